//! Scenario 4: recovery of expired leases. Many claimed jobs, their leases moved into the past
//! in the database, then admin reap passes until none is left.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Bench;
use crate::error::{BenchError, Res};
use crate::measure::{ms, now_ms, round, Phase};

/// Scenario 4, recovery: `n` claimed jobs whose leases are pushed into the past through D1,
/// then timed admin reap passes (limit 500, to workerd's own socket: `Server::reap_pass`) until
/// `more` is false.
pub(crate) async fn recovery(bench: &Bench, n: usize) -> Res<Value> {
    let per_runner = 250.min(n).max(1);
    let runner_count = n.div_ceil(per_runner);
    let runners = bench
        .register_runners(runner_count, per_runner as u32)
        .await?;
    let claim_phase = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, credentials) in runners.iter().enumerate() {
        let client = bench.server.runner_client(credentials)?;
        let mine = per_runner.min(n - i * per_runner);
        tasks.spawn(async move {
            // A claim whose answer was lost may still have been granted: it is counted from D1
            // below, so a transport error here only costs a retry.
            let (mut got, mut errors) = (0, 0);
            while got < mine {
                match client.claim().await {
                    Ok(Some(_)) => got += 1,
                    Ok(None) => return Err(BenchError::unexpected("no job to claim")),
                    Err(error) if errors < 20 => {
                        errors += 1;
                        eprintln!("recovery: claim failed, retrying: {error}");
                    }
                    Err(source) => return Err(BenchError::client("claim")(source)),
                }
            }
            Ok::<_, BenchError>(errors)
        });
    }
    // Claiming thousands of jobs here takes longer than a first lease (60 s): every 15 s the
    // leases granted so far move an hour ahead, so none lapses before the measurement (their
    // alarms, finding them alive, re-arm there).
    let mut claim_errors = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(15));
    tick.tick().await;
    loop {
        tokio::select! {
            done = tasks.join_next() => match done {
                None => break,
                Some(done) => claim_errors += done.map_err(BenchError::task("task"))??,
            },
            _ = tick.tick() => keep_alive(bench).await?,
        }
    }
    let claim_seconds = claim_phase.elapsed().as_secs_f64();
    let leases = bench.db.leased()?;
    bench.db.move_leases(now_ms().saturating_sub(120_000))?;
    let phase = Phase::start();
    let (mut passes, mut requeued, mut ended, mut examined) = (0u64, 0u64, 0u64, 0u64);
    let mut pass_ms = Vec::new();
    // A failed pass (the server answered an error) is recorded, not fatal: the next pass asks
    // for half as many leases (down to 50), and the report lists every failure.
    let (mut limit, mut failures) = (500u32, Vec::new());
    loop {
        let start = Instant::now();
        let answer = bench.server.reap_pass(limit).await;
        pass_ms.push(ms(start.elapsed()));
        passes += 1;
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) if failures.len() < 10 => {
                eprintln!("recovery: reap pass with limit {limit} failed: {error}");
                failures.push(format!(
                    "limit {limit} after {:.0} ms: {error}",
                    ms(start.elapsed())
                ));
                limit = (limit / 2).max(50);
                continue;
            }
            Err(error) => return Err(error),
        };
        requeued += answer.requeued;
        ended += answer.ended;
        examined += answer.examined;
        if !answer.more || passes > 200 {
            break;
        }
    }
    let (wall, cpu) = phase.end();
    let still_leased = bench.db.leased()?;
    eprintln!("recovery: {requeued} requeued in {wall:.1} s ({passes} passes)");
    Ok(json!({
        "leases": leases,
        "claimErrors": claim_errors,
        "runners": runner_count,
        "claimSeconds": round(claim_seconds),
        "seconds": round(wall),
        "passes": passes,
        "passMs": pass_ms.iter().map(|x| round(*x)).collect::<Vec<_>>(),
        "examined": examined,
        "requeued": requeued,
        "ended": ended,
        "stillLeased": still_leased,
        "failedPasses": failures,
        "leasesPerSecond": round(requeued as f64 / wall),
        "clientCpu": round(cpu),
    }))
}

/// Moves every lease granted so far an hour ahead. The UPDATE shares the local database file
/// with the server, which may hold its lock (SQLITE_BUSY): it is tried again, at most 20 times,
/// a quarter second apart, without holding up the claim tasks meanwhile.
async fn keep_alive(bench: &Bench) -> Res<()> {
    let ahead = now_ms() + 3_600_000;
    let mut tries = 0;
    loop {
        match bench.db.move_leases(ahead) {
            Ok(_) => return Ok(()),
            Err(error) if tries < 20 && error.is_database_busy() => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(error) => return Err(error),
        }
    }
}
