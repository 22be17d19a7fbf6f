//! Scenario 3: appends into one job's stream, one after another, at three payload sizes; and
//! before them, warm heartbeats of the same claim. Each follows one floor request.

use std::sync::Arc;
use std::time::Instant;

use edgerunner::stream::ChunkStream;
use edgerunner_protocol::chunk::ChunkKind;
use serde_json::{json, Value};

use super::{claim_one, succeed, Bench, Sizes};
use crate::error::{BenchError, Res};
use crate::measure::{ms, percentile, round, stats, Phase};
use crate::server::{floor, local_http};

/// Scenario 3: appends into one job's stream, one after another (the chain is sequential);
/// before them, warm heartbeats of the same claim. Each heartbeat and each append follows one
/// floor request (interleaved, as the claims are). Answers (appends, heartbeats).
pub(crate) async fn stream_rate(bench: &Bench, sizes: &Sizes) -> Res<(Value, Value)> {
    let runner = bench.one_runner().await?;
    let client = bench.server.runner_client(&runner)?;
    let assignment = claim_one(&client).await?;
    let mut stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
    let floor_http = local_http()?;
    // The first heartbeat moves the job to running and warms its object; the rest are timed.
    client
        .heartbeat(assignment.claim_id(), 120)
        .await
        .map_err(BenchError::client("heartbeat"))?;
    let (mut beats, mut beat_floors) = (Vec::new(), Vec::new());
    for _ in 0..sizes.claim_reps {
        beat_floors.push(ms(floor(&floor_http, &bench.server.base).await?));
        let start = Instant::now();
        client
            .heartbeat(assignment.claim_id(), 120)
            .await
            .map_err(BenchError::client("heartbeat"))?;
        beats.push(ms(start.elapsed()));
    }
    let heartbeats = json!({
        "heartbeat": stats(&beats),
        "floor": stats(&beat_floors),
        "p50Ratio": round(percentile(&beats, 50.0) / percentile(&beat_floors, 50.0)),
        "p99Ratio": round(percentile(&beats, 99.0) / percentile(&beat_floors, 99.0)),
    });
    let mut out = Vec::new();
    for (size, count) in sizes.stream {
        client
            .heartbeat(assignment.claim_id(), 120)
            .await
            .map_err(BenchError::client("heartbeat"))?;
        let payload = if size == 0 {
            json!({ "lines": [{ "stream": "stdout", "line": "ok" }] })
        } else {
            json!({ "data": "x".repeat(size) })
        };
        let payload_bytes = serde_json::to_string(&payload)
            .map_err(BenchError::json("json"))?
            .len();
        // Each append after one floor request (interleaved, as the claims and heartbeats are),
        // so that both see the same background load.
        let (mut latencies, mut floors) = (Vec::new(), Vec::new());
        let phase = Phase::start();
        for _ in 0..count {
            floors.push(ms(floor(&floor_http, &bench.server.base).await?));
            let start = Instant::now();
            stream
                .send(ChunkKind::Log, payload.clone())
                .await
                .map_err(BenchError::client("stream"))?;
            latencies.push(ms(start.elapsed()));
        }
        let (_, cpu) = phase.end();
        // The appends' own time: the floor requests between them are not part of the rate.
        let wall = latencies.iter().sum::<f64>() / 1000.0;
        eprintln!("stream {size} B: {:.1} appends/s", count as f64 / wall);
        out.push(json!({
            "payload": if size == 0 { "one log line".to_owned() } else { format!("{} KiB", size / 1024) },
            "payloadBytes": payload_bytes,
            "appends": count,
            "append": stats(&latencies),
            "appendsPerSecond": round(count as f64 / wall),
            "bytesPerSecond": round((count * payload_bytes) as f64 / wall),
            "floor": stats(&floors),
            "p50Ratio": round(percentile(&latencies, 50.0) / percentile(&floors, 50.0)),
            "wallSeconds": round(wall),
            "clientCpu": round(cpu),
        }));
    }
    let run = bench.server.evaluation_run().await?;
    succeed(
        &client,
        &assignment,
        stream.final_checksum(),
        run,
        "complete",
    )
    .await?;
    Ok((Value::Array(out), heartbeats))
}
