//! Scenario 7: chatty jobs, whose commands print hundreds of thousands of lines, run by the
//! runner itself (`Worker`), so that the figures are its batching and upload.

use std::sync::Arc;
use std::time::Duration;

use edgerunner::client::RunnerClient;
use edgerunner::evidence::EvidenceSource;
use edgerunner::heartbeat::HeartbeatConfig;
use edgerunner::http::Http;
use edgerunner::job_env::{JobEnvironment, PassEnv};
use edgerunner::stream::BatchLimits;
use edgerunner::workdir::RunnerWorkDir;
use edgerunner::worker::{JobOutcome, ShutdownState, Worker, WorkerConfig};
use edgerunner_protocol::completion::EvidenceId;
use serde_json::{json, Value};

use super::{Bench, Sizes};
use crate::error::{BenchError, Res};
use crate::measure::{now_ms, round, Phase};

/// Scenario 7: chatty jobs through the runner itself ([`Worker`]: claim, input, heartbeat, the
/// command, its log batched into chunks, completion), one job at a time. The runner and the
/// jobs use their own runtime, so no other queued job is claimed.
pub(crate) async fn chatty(
    bench: &Bench,
    sizes: &Sizes,
    batch_bytes: usize,
    server: &str,
) -> Res<Value> {
    const CHATTY_RUNTIME: &str = "bench-chatty";
    let key = format!("bench-chatty-{}", now_ms());
    let credentials = bench
        .server
        .register_runner(&key, CHATTY_RUNTIME, 1)
        .await?;
    let via = if server.trim_end_matches('/') == bench.server.base {
        "wrangler's dev proxy"
    } else {
        "workerd's own socket"
    };
    let http = Http::new(server).map_err(BenchError::client("http"))?;
    let client = Arc::new(RunnerClient::new(http, credentials.clone()));
    let work_dir =
        RunnerWorkDir::create_in(&std::env::temp_dir()).map_err(BenchError::invalid("work dir"))?;
    // What `runner start` gives a job without --pass-env (the commands need only PATH).
    let job_env = JobEnvironment::new(std::env::vars_os(), &PassEnv::default(), &[])
        .map_err(BenchError::invalid("job environment"))?;
    let runs = bench.server.evaluation_runs(sizes.chatty.len()).await?;
    let mut out = Vec::new();
    for ((what, command), run) in sizes.chatty.iter().zip(runs) {
        let mut job = bench.release.job("bench-chatty", what);
        job["input"]["evaluationRunId"] = match run {
            EvidenceId::Integer(n) => json!(n),
            EvidenceId::Text(s) => json!(s),
        };
        job["requirements"]["runtime"] = json!(CHATTY_RUNTIME);
        job["requirements"]["limits"]["outputBytes"] = json!(64 * 1024 * 1024);
        let job = bench.server.enqueue(&job).await?;
        let worker = Worker::new(
            Arc::clone(&client),
            WorkerConfig {
                command: (*command).to_owned(),
                exec_dir: std::env::temp_dir(),
                capacity: 1,
                poll_interval: Duration::from_millis(200),
                claim_wait: 0,
                heartbeat: HeartbeatConfig::DEFAULT,
                grace: Duration::from_secs(5),
                max_jobs: Some(1),
                exit_when_idle: true,
                idle_exit: None,
                work_dir: work_dir.clone(),
                keep_work: false,
                batch: BatchLimits {
                    max_bytes: batch_bytes,
                    ..BatchLimits::DEFAULT
                },
                evidence: EvidenceSource {
                    input_field: Some("evaluationRunId".into()),
                    api: None,
                },
                job_env: job_env.clone(),
                run_as: None,
                isolation: None,
            },
        );
        let (_keep, shutdown) = tokio::sync::watch::channel(ShutdownState::Running);
        let phase = Phase::start();
        let summary = worker.run(shutdown).await;
        let (wall, cpu) = phase.end();
        let report = summary
            .jobs
            .first()
            .ok_or_else(|| BenchError::unexpected("the chatty job was not claimed"))?;
        if report.job_id != job.id {
            return Err(BenchError::unexpected(format!(
                "claimed {} instead of the chatty job",
                report.job_id
            )));
        }
        match &report.outcome {
            JobOutcome::Completed { status, .. } if status.as_str() == "succeeded" => {}
            other => {
                return Err(BenchError::unexpected(format!(
                    "the chatty job {what}: {other:?}"
                )))
            }
        }
        let output = report
            .output
            .as_ref()
            .ok_or_else(|| BenchError::unexpected("no output figures"))?;
        let upload = output.upload.as_secs_f64();
        eprintln!(
            "chatty {what}: {} lines, {} bytes in {} chunks, stored after {upload:.2} s",
            output.lines, output.output_bytes, output.chunks
        );
        out.push(json!({
            "what": what,
            "batchBytes": batch_bytes,
            "via": via,
            "command": command,
            "lines": output.lines,
            "outputBytes": output.output_bytes,
            "chunks": output.chunks,
            "payloadBytes": output.payload_bytes,
            "linesNotSent": output.lines_over_limit + output.lines_over_stream_limit,
            "commandSeconds": round(output.command.as_secs_f64()),
            "uploadSeconds": round(upload),
            "linesPerSecond": round(output.lines as f64 / upload),
            "outputBytesPerSecond": round(output.output_bytes as f64 / upload),
            "payloadBytesPerSecond": round(output.payload_bytes as f64 / upload),
            "jobSeconds": round(wall),
            "clientCpu": round(cpu),
        }));
    }
    work_dir.remove_if_empty();
    Ok(Value::Array(out))
}
