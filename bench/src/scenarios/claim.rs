//! Scenario 1: claim latency by queue depth, each claim after one floor request.

use std::time::Instant;

use serde_json::{json, Value};

use super::{claim_one, succeed, Bench, Sizes};
use crate::error::{BenchError, Res};
use crate::measure::{ms, percentile, round, stats, Phase};
use crate::server::{floor, local_http};

/// Scenario 1: claim latency at three queue depths, each claim interleaved with one floor request.
pub(crate) async fn claim_latency(bench: &mut Bench, sizes: &Sizes) -> Res<Value> {
    let mut levels = Vec::new();
    let mut queued = bench.db.queued()?;
    for level in sizes.queue_levels {
        let want = level + sizes.claim_reps as u64;
        let seed_time = bench.db.seed(want.saturating_sub(queued))?;
        queued = bench.db.queued()?;
        eprintln!(
            "claim latency: {queued} queued (seeded in {:.1} s)",
            seed_time.as_secs_f64()
        );
        let runner = bench.one_runner().await?;
        let client = bench.server.runner_client(&runner)?;
        client
            .session()
            .await
            .map_err(BenchError::client("session"))?;
        let runs = bench.server.evaluation_runs(sizes.claim_reps).await?;
        let floor_http = local_http()?;
        floor(&floor_http, &bench.server.base).await?;
        let (mut claims, mut floors) = (Vec::new(), Vec::new());
        let phase = Phase::start();
        for run in runs {
            floors.push(ms(floor(&floor_http, &bench.server.base).await?));
            let start = Instant::now();
            let assignment = claim_one(&client).await?;
            claims.push(ms(start.elapsed()));
            succeed(&client, &assignment, None, run, "complete").await?;
        }
        let (wall, cpu) = phase.end();
        levels.push(json!({
            "depth": level,
            "queued": queued,
            "seedSeconds": round(seed_time.as_secs_f64()),
            "claim": stats(&claims),
            "floor": stats(&floors),
            "p50Ratio": round(percentile(&claims, 50.0) / percentile(&floors, 50.0)),
            "p99Ratio": round(percentile(&claims, 99.0) / percentile(&floors, 99.0)),
            "wallSeconds": round(wall),
            "clientCpu": round(cpu),
        }));
        queued = bench.db.queued()?;
    }
    Ok(Value::Array(levels))
}
