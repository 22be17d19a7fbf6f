//! Scenario 2: full lifecycles (session, claim, heartbeat, ten chunks, completion) with many
//! runners at once, in rounds bracketed by the floor's throughput at the same concurrency.

use std::sync::Arc;
use std::time::Instant;

use edgerunner::client::RunnerClient;
use edgerunner::http::Http;
use edgerunner::session::Credentials;
use edgerunner::stream::ChunkStream;
use edgerunner_protocol::chunk::ChunkKind;
use edgerunner_protocol::completion::EvidenceId;
use serde_json::{json, Value};

use super::{claim_one, succeed, Bench};
use crate::error::{BenchError, Res};
use crate::measure::{ms, percentile, round, stats, Phase};
use crate::server::{floor, local_http};

/// Requests in one lifecycle: session, claim, heartbeat, 10 chunks, complete.
const LIFECYCLE_REQUESTS: usize = 14;

/// The queued jobs the lifecycles of `plan` (runners, lifecycles per runner) take in `rounds`
/// rounds each.
pub(crate) fn lifecycle_jobs(plan: &[(usize, usize)], rounds: usize) -> u64 {
    plan.iter()
        .map(|&(runners, per_runner)| (runners * per_runner * rounds) as u64)
        .sum()
}

/// Scenario 2: full lifecycles with C concurrent runners, in rounds, each bracketed by the
/// floor at the same concurrency and the same number of requests (a floor between two rounds
/// brackets both). A round's ratio is its requests per second over the mean of its two floors;
/// the scenario's ratio is the median of its rounds', so one round that a burst of background
/// load slowed (or the floor beside it) does not decide it.
pub(crate) async fn lifecycle(
    bench: &Bench,
    plan: &[(usize, usize)],
    rounds_each: usize,
) -> Res<Value> {
    let most = plan.iter().map(|(c, _)| *c).max().unwrap_or(1);
    let runners = bench.register_runners(most, 1).await?;
    let mut out = Vec::new();
    for &(concurrency, per_runner) in plan {
        let per_round = concurrency * per_runner;
        let floor_requests = per_runner * LIFECYCLE_REQUESTS;
        let mut floors = vec![floor_throughput(bench, concurrency, floor_requests).await?];
        let (mut latencies, mut rounds, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut wall, mut cpu, mut all_trips) = (0.0, 0.0, 0u64);
        for _ in 0..rounds_each {
            let mut runs = bench.server.evaluation_runs(per_round).await?;
            let trips_before = bench.server.round_trips().await?;
            let phase = Phase::start();
            let mut tasks = Vec::new();
            for credentials in runners.iter().take(concurrency) {
                let mine: Vec<EvidenceId> = runs.drain(..per_runner).collect();
                let server = bench.server.base.clone();
                let credentials = credentials.clone();
                tasks.push(tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    for run in mine {
                        let start = Instant::now();
                        one_lifecycle(&server, &credentials, run).await?;
                        latencies.push(ms(start.elapsed()));
                    }
                    Ok::<_, BenchError>(latencies)
                }));
            }
            for task in tasks {
                latencies.extend(task.await.map_err(BenchError::task("task"))??);
            }
            let (round_wall, round_cpu) = phase.end();
            let trips = bench
                .server
                .round_trips()
                .await?
                .saturating_sub(trips_before);
            all_trips += trips;
            let before = floors.last().copied().unwrap_or(0.0);
            let after = floor_throughput(bench, concurrency, floor_requests).await?;
            floors.push(after);
            let rps = (per_round * LIFECYCLE_REQUESTS) as f64 / round_wall;
            let floor_rps = (before + after) / 2.0;
            ratios.push(round(rps / floor_rps));
            rounds.push(json!({
                "requestsPerSecond": round(rps),
                "floorRequestsPerSecond": round(floor_rps),
                "throughputRatio": round(rps / floor_rps),
                "d1RoundTripsPerLifecycle": round(trips as f64 / per_round as f64),
            }));
            wall += round_wall;
            cpu += round_cpu * round_wall;
        }
        let total = per_round * rounds_each;
        let rps = (total * LIFECYCLE_REQUESTS) as f64 / wall;
        let floor_rps = floors.iter().sum::<f64>() / floors.len() as f64;
        let ratio = percentile(&ratios, 50.0);
        eprintln!(
            "lifecycle x{concurrency}: {:.1} lifecycles/s, floor {floor_rps:.0} req/s, ratio {ratio} (rounds {ratios:?})",
            total as f64 / wall
        );
        out.push(json!({
            "runners": concurrency,
            "lifecycles": total,
            "lifecycle": stats(&latencies),
            "lifecyclesPerSecond": round(total as f64 / wall),
            "requestsPerSecond": round(rps),
            "floorRequestsPerSecond": round(floor_rps),
            "floorRequestsPerSecondEach": floors.iter().map(|x| round(*x)).collect::<Vec<_>>(),
            "floorLifecyclesPerSecond": round(floor_rps / LIFECYCLE_REQUESTS as f64),
            "rounds": rounds,
            "d1RoundTripsPerLifecycle": round(all_trips as f64 / total as f64),
            "throughputRatio": round(ratio),
            "wallSeconds": round(wall),
            "clientCpu": round(cpu / wall),
        }));
    }
    Ok(Value::Array(out))
}

/// Session, claim, heartbeat, ten chunks, complete: as a runner process would, from a fresh
/// client (so the session exchange is part of it).
async fn one_lifecycle(server: &str, credentials: &Credentials, run: EvidenceId) -> Res<()> {
    let client = Arc::new(RunnerClient::new(
        Http::new(server).map_err(BenchError::client("http"))?,
        credentials.clone(),
    ));
    client
        .session()
        .await
        .map_err(BenchError::client("session"))?;
    let assignment = claim_one(&client).await?;
    client
        .heartbeat(assignment.claim_id(), 60)
        .await
        .map_err(BenchError::client("heartbeat"))?;
    let mut stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
    for i in 0..10 {
        stream
            .send(
                ChunkKind::Log,
                json!({ "lines": [{ "stream": "stdout", "line": format!("line {i}") }] }),
            )
            .await
            .map_err(BenchError::client("stream"))?;
    }
    let answer = succeed(
        &client,
        &assignment,
        stream.final_checksum(),
        run,
        "complete",
    )
    .await?;
    if !answer.is_settled() {
        return Err(BenchError::unexpected(format!(
            "completion not accepted: {}",
            answer.rationale
        )));
    }
    Ok(())
}

/// Floor requests per second with `concurrency` tasks of `each` sequential requests.
async fn floor_throughput(bench: &Bench, concurrency: usize, each: usize) -> Res<f64> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let server = bench.server.base.clone();
        tasks.push(tokio::spawn(async move {
            let http = local_http()?;
            for _ in 0..each {
                floor(&http, &server).await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    for task in tasks {
        task.await.map_err(BenchError::task("task"))??;
    }
    Ok((concurrency * each) as f64 / start.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lifecycles_take_a_job_each() {
        assert_eq!(
            lifecycle_jobs(&[(1, 20), (8, 5), (32, 2)], 5),
            5 * (20 + 40 + 64)
        );
        assert_eq!(lifecycle_jobs(&[], 3), 0);
    }
}
