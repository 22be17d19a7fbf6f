//! Scenarios 5 and 6, the memory check: a 90 MB body to `/session` from a stranger, a job whose
//! stream reaches the 64 MiB limit and its custody bundle, and the server's memory read after
//! each step.

use std::sync::Arc;
use std::time::Instant;

use edgerunner::stream::ChunkStream;
use edgerunner_protocol::chunk::ChunkKind;
use serde_json::{json, Value};

use super::{claim_one, succeed, Bench};
use crate::error::{BenchError, Res};
use crate::measure::{round, Phase};

/// The memory check's first stranger: 90 MB (no credential) to `/session`, whose cap is
/// 16 KiB. The answer must be `413 BODY_TOO_LARGE`; the reading after it shows what the
/// attempt cost the Worker.
pub(crate) async fn oversized_session_body(bench: &Bench) -> Res<Value> {
    const BYTES: usize = 90 * 1024 * 1024;
    let started = Instant::now();
    let (status, text) = bench
        .server
        .post_unauthenticated("/api/remote-runners/session", vec![b' '; BYTES])
        .await?;
    if status != 413 || !text.contains("BODY_TOO_LARGE") {
        return Err(BenchError::unexpected(format!(
            "90 MB to /session answered {status}: {text}"
        )));
    }
    Ok(json!({ "bytes": BYTES, "status": status, "ms": started.elapsed().as_millis() as u64 }))
}

/// One memory reading (`--memory-probe`), labelled; `null` figures when there is no probe.
pub(crate) fn memory_reading(probe: Option<&str>, label: &str) -> Res<Value> {
    let Some(probe) = probe else {
        return Ok(json!({ "at": label, "wasmMemoryBytes": null, "workerdRssBytes": null }));
    };
    let out = std::process::Command::new("sh")
        .args(["-c", probe])
        .output()
        .map_err(BenchError::io("memory probe"))?;
    if !out.status.success() {
        return Err(BenchError::unexpected(format!(
            "memory probe failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let mut reading: Value =
        serde_json::from_slice(&out.stdout).map_err(BenchError::json("memory probe output"))?;
    reading["at"] = label.into();
    eprintln!("memory {label}: {reading}");
    Ok(reading)
}

/// Scenario 5, the memory check: one job streams `bundle_chunks` chunks of 256 KiB (at full
/// size, the 64 MiB per-attempt limit) and completes; then its custody bundle is downloaded
/// (streamed by the server) and counted.
pub(crate) async fn big_bundle(bench: &Bench, chunks: usize) -> Res<Value> {
    let runner = bench.one_runner().await?;
    let client = bench.server.runner_client(&runner)?;
    let assignment = claim_one(&client).await?;
    let mut stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
    let phase = Phase::start();
    for n in 0..chunks {
        if n % 16 == 0 {
            client
                .heartbeat(assignment.claim_id(), 120)
                .await
                .map_err(BenchError::client("heartbeat"))?;
        }
        // A JSON string of exactly 256 KiB as stable JSON.
        let payload = Value::String(format!("{n:08}{}", "m".repeat(256 * 1024 - 10)));
        stream
            .send(ChunkKind::Log, payload)
            .await
            .map_err(BenchError::client("stream"))?;
    }
    let (stream_wall, _) = phase.end();
    let run = bench.server.evaluation_run().await?;
    succeed(
        &client,
        &assignment,
        stream.final_checksum(),
        run,
        "complete",
    )
    .await?;
    let job_id = assignment.identity().job_id.as_str().to_owned();
    let path = format!("/api/remote-runners/jobs/{job_id}/bundle");
    let start = Instant::now();
    let (bytes, streamed) = bench.server.download(&path).await?;
    let bundle_wall = start.elapsed().as_secs_f64();
    eprintln!("bundle of {job_id}: {bytes} bytes in {bundle_wall:.1} s (streamed: {streamed})");
    Ok(json!({
        "chunks": chunks,
        "payloadBytes": chunks * 256 * 1024,
        "streamSeconds": round(stream_wall),
        "bundleBytes": bytes,
        "bundleSeconds": round(bundle_wall),
        "streamed": streamed,
    }))
}
