//! Scenario 9: job pickup latency, from an enqueue to the moment one of 32 long-polling
//! runners holds the claim.

use std::sync::Arc;
use std::time::{Duration, Instant};

use edgerunner::stream::ChunkStream;
use serde_json::{json, Value};

use super::{succeed, Bench};
use crate::error::{BenchError, Res};
use crate::measure::{ms, now_ms, stats};
use crate::server::EnqueuedJob;

/// Runners that long-poll in scenario 9, and the CLI's default wait they use.
const PICKUP_RUNNERS: usize = 32;
pub(crate) const PICKUP_WAIT_SECONDS: u32 = 10;

/// Scenario 9: job pickup latency. 32 runners long-poll (`waitSeconds` 10, the CLI's default)
/// on an empty queue; jobs are enqueued one at a time, each once the previous one was picked
/// up, and the latency is from just before the enqueue request to the moment a runner holds
/// the claim's answer. Each runner completes what it gets and long-polls again. The first jobs
/// warm the objects and are not counted.
pub(crate) async fn pickup(bench: &Bench, jobs: usize) -> Res<Value> {
    const WARM_UP: usize = 4;
    let total = jobs + WARM_UP;
    let runs = bench.server.evaluation_runs(total).await?;
    let runs = Arc::new(std::sync::Mutex::new(runs));
    let runners = bench.register_runners(PICKUP_RUNNERS, 4).await?;
    let (picked, mut pickups) = tokio::sync::mpsc::unbounded_channel::<(String, Instant, u64)>();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for credentials in &runners {
        let client = bench.server.runner_client(credentials)?;
        let (picked, runs, stop) = (picked.clone(), Arc::clone(&runs), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            let mut errors = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let assignment = match client.claim_waiting(PICKUP_WAIT_SECONDS).await {
                    Ok(Some(assignment)) => assignment,
                    Ok(None) => continue,
                    Err(error) if errors < 20 => {
                        errors += 1;
                        eprintln!("pickup: claim failed: {error}");
                        continue;
                    }
                    Err(source) => return Err(BenchError::client("pickup claim")(source)),
                };
                let (at, wall) = (Instant::now(), now_ms());
                let _ = picked.send((assignment.job_id().as_str().to_owned(), at, wall));
                let run = runs
                    .lock()
                    .map_err(|_| BenchError::unexpected("runs lock"))?
                    .pop()
                    .ok_or_else(|| {
                        BenchError::unexpected("pickup: more jobs picked up than enqueued")
                    })?;
                let stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
                succeed(
                    &client,
                    &assignment,
                    stream.final_checksum(),
                    run,
                    "pickup complete",
                )
                .await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    let mut latencies = Vec::new();
    let mut since_commit = Vec::new();
    let mut enqueue_ms = Vec::new();
    for i in 0..total {
        let job = bench.release.job("bench-pickup", &format!("pickup {i}"));
        let start = Instant::now();
        let enqueued = bench
            .server
            .admin
            .enqueue(&job)
            .await
            .map_err(BenchError::client("enqueue"))?;
        enqueue_ms.push(ms(start.elapsed()));
        let enqueued = EnqueuedJob::read(enqueued)?;
        let id = enqueued.id;
        let created = enqueued
            .created_at
            .as_deref()
            .and_then(|t| edgerunner_protocol::time::UnixMillis::parse_rfc3339(t).ok())
            .ok_or_else(|| BenchError::unexpected("pickup: the job has no createdAt"))?
            .get();
        let (got, at, wall) = tokio::time::timeout(Duration::from_secs(30), pickups.recv())
            .await
            .map_err(|_| {
                BenchError::unexpected(format!("pickup: job {i} was not picked up within 30 s"))
            })?
            .ok_or_else(|| BenchError::unexpected("pickup: every runner stopped"))?;
        if got != id {
            return Err(BenchError::unexpected(format!(
                "pickup: {got} was picked up, not {id}"
            )));
        }
        if i >= WARM_UP {
            latencies.push(ms(at.duration_since(start)));
            since_commit.push(wall as f64 - created as f64);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    // Each runner stops after its long poll ends (a dropped long poll could still be granted
    // the next scenario's job; see ARCHITECTURE.md "Idle runners").
    for task in tasks {
        tokio::time::timeout(
            Duration::from_secs(u64::from(PICKUP_WAIT_SECONDS) + 30),
            task,
        )
        .await
        .map_err(|_| BenchError::unexpected("pickup: a runner did not stop"))?
        .map_err(BenchError::task("pickup task"))??;
    }
    Ok(json!({
        "runners": PICKUP_RUNNERS,
        "waitSeconds": PICKUP_WAIT_SECONDS,
        "jobs": jobs,
        "pickupMs": stats(&since_commit),
        "fromRequestMs": stats(&latencies),
        "enqueueMs": stats(&enqueue_ms),
    }))
}
