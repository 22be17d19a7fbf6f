//! Running a job's command: the inputs checked, the job's files written, the command run with
//! its output streamed, and how it ended told as a completion status.

use std::time::Duration;

use edgerunner_protocol::chunk::ChunkKind;
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::job::{JobRun, Prepared};
use super::{Isolation, OutputFigures, ShutdownState};
use crate::client::Assignment;
use crate::exec::{self, Ending, ExecOutcome, ExecSpec, StopRequest};
use crate::heartbeat::{is_claim_lost, ClaimStatus, Heartbeat};
use crate::isolation::{Confinement, Unenforceable};
use crate::stream::{pump_lines, ChunkStream, PumpReport};
use crate::workdir::JobDir;

/// What stops a running command, from the claim's status and the runner's: a lost claim
/// first (nothing can complete it), then cancellation (which completes `cancelled`), then
/// giving the job back.
pub fn stop_request(claim: &ClaimStatus, shutdown: ShutdownState) -> Option<StopRequest> {
    if let Some(reason) = &claim.lost {
        return Some(StopRequest::Lost {
            reason: reason.clone(),
        });
    }
    if let Some(reason) = &claim.cancel_requested {
        return Some(StopRequest::Cancel {
            reason: reason.clone(),
        });
    }
    (shutdown == ShutdownState::GivingBack).then_some(StopRequest::Shutdown)
}

/// `H({"exitCode", "stdoutSha256"})`.
pub fn result_hash(exit_code: Option<i32>, stdout_sha256: &Sha256Hex) -> Sha256Hex {
    stable_json::hash(&json!({
        "exitCode": exit_code,
        "stdoutSha256": stdout_sha256.as_str(),
    }))
}

/// The completion status an ending calls for; `None` when the job must not be completed.
pub fn completion_status(outcome: &ExecOutcome) -> Option<CompletionStatus> {
    match &outcome.ending {
        Ending::Exited if outcome.exit_code == Some(0) => Some(CompletionStatus::Succeeded),
        Ending::Exited | Ending::WallTimeExceeded | Ending::CpuTimeExceeded => {
            Some(CompletionStatus::Failed)
        }
        Ending::Stopped(StopRequest::Cancel { .. }) => Some(CompletionStatus::Cancelled),
        Ending::Stopped(StopRequest::Lost { .. } | StopRequest::Shutdown) => None,
    }
}

impl JobRun {
    /// Checks the inputs, runs the command and streams its output; says how to complete.
    pub(super) async fn run_command(
        &self,
        assignment: &Assignment,
        heartbeat: &Heartbeat,
        stream: &mut ChunkStream,
        job_dir: Result<&JobDir, &std::io::Error>,
        (input, input_text): (&Value, &str),
        figures: &mut Option<OutputFigures>,
    ) -> Prepared {
        let label = format!(
            "job {} (attempt {})",
            assignment.job_id(),
            assignment.attempt()
        );
        if let Some(reason) = heartbeat.current().cancel_requested {
            let note = json!({ "event": "cancelled_before_start", "reason": reason });
            if let Err(error) = stream.send(ChunkKind::Log, note).await {
                if is_claim_lost(&error) {
                    return self.stop(
                        assignment,
                        "job.lost",
                        format!("the claim is gone: {error}"),
                    );
                }
            }
            return Prepared::Complete {
                status: CompletionStatus::Cancelled,
                result_hash: None,
                summary: "cancellation was requested before it started; not run".into(),
            };
        }

        let refusal = if assignment.input_matches(input) {
            None
        } else {
            Some(format!(
                "the served input hashes to {}, not the signed inputHash {}",
                stable_json::hash(input),
                assignment.envelope().input_hash
            ))
        };
        // Fail closed: a job whose bound artifact cannot be read, or is not the one signed,
        // is not run. Running it without would evaluate something nobody signed off.
        let artifact = match refusal {
            Some(reason) => Err(reason),
            None => self.checked_artifact(assignment).await,
        };
        let artifact = match artifact {
            Ok(artifact) => artifact,
            Err(reason) => return not_run(stream, &label, "job.inputs_refused", reason).await,
        };

        let written = job_dir.map_err(|error| error.to_string()).and_then(|dir| {
            let input = dir.write_file("input.json", input_text.as_bytes());
            let artifact =
                dir.write_file("artifact.json", artifact["content"].to_string().as_bytes());
            // The job's TMPDIR and HOME: private, fresh, and removed with the job's directory,
            // so that nothing one job leaves there reaches the next (under --run-as, all jobs
            // share one user).
            let private = dir.create_dir("tmp").and_then(|tmp| {
                let home = dir.create_dir("home")?;
                match self.config.run_as {
                    Some(user) => dir.hand_to(user.uid, user.gid).map(|()| (tmp, home)),
                    None => Ok((tmp, home)),
                }
            });
            match (input, artifact, private) {
                (Ok(input), Ok(artifact), Ok(private)) => {
                    Ok((dir.path(), input, artifact, private))
                }
                (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
                    Err(format!("{}: {error}", dir.path().display()))
                }
            }
        });
        let (workdir, input_path, artifact_path, (tmp_dir, home_dir)) = match written {
            Ok(paths) => paths,
            Err(error) => {
                let reason = format!(
                    "cannot prepare the job's directory in {}: {error}",
                    self.config.work_dir.path().display()
                );
                let _ = stream
                    .send(
                        ChunkKind::Log,
                        json!({ "event": "refused", "reason": reason }),
                    )
                    .await;
                return Prepared::Complete {
                    status: CompletionStatus::Failed,
                    result_hash: None,
                    summary: reason,
                };
            }
        };
        let job_values = vec![
            (
                "EDGERUNNER_JOB_ID".to_owned(),
                assignment.job_id().as_str().to_owned(),
            ),
            (
                "EDGERUNNER_CLAIM_ID".to_owned(),
                assignment.claim_id().as_str().to_owned(),
            ),
            (
                "EDGERUNNER_ATTEMPT".to_owned(),
                assignment.attempt().to_string(),
            ),
            (
                "EDGERUNNER_WORKDIR".to_owned(),
                workdir.display().to_string(),
            ),
            (
                "EDGERUNNER_INPUT".to_owned(),
                input_path.display().to_string(),
            ),
            (
                "EDGERUNNER_ARTIFACT".to_owned(),
                artifact_path.display().to_string(),
            ),
        ];
        let env = self.config.job_env.for_job(&tmp_dir, &home_dir, job_values);
        let confinement = match confinement_for(assignment, self.config.isolation.as_ref()) {
            Ok(confinement) => confinement,
            Err(reason) => {
                return not_run(stream, &label, "job.unenforceable", reason.to_string()).await
            }
        };

        let wall_seconds = assignment.wall_seconds();
        let started = json!({
            "event": "started",
            "command": self.config.command,
            "wallSeconds": wall_seconds,
            "enforced": enforced(&confinement, self.config.isolation.as_ref()),
        });
        if let Err(error) = stream.send(ChunkKind::Log, started).await {
            if is_claim_lost(&error) {
                return self.stop(
                    assignment,
                    "job.lost",
                    format!("the claim is gone: {error}"),
                );
            }
        }
        info!(
            event = "job.started",
            wall_seconds, "{label}: running `{}`", self.config.command
        );

        let (stop_sender, stop) = watch::channel(None);
        let relay = tokio::spawn(relay_stops(
            heartbeat.status(),
            self.shutdown.clone(),
            stop_sender,
        ));
        let spec = ExecSpec {
            command: self.config.command.clone(),
            env,
            current_dir: self.config.exec_dir.clone(),
            wall_limit: wall_seconds.map(Duration::from_secs),
            grace: self.config.grace,
            run_as: self.config.run_as,
            launcher: self
                .config
                .isolation
                .as_ref()
                .map(|isolation| isolation.launcher.clone()),
            confinement: confinement.clone(),
        };
        let (lines, received) = mpsc::channel(1024);
        let started_at = Instant::now();
        let (ran, pumped) = tokio::join!(
            exec::run(&spec, lines, stop),
            pump_lines(
                stream,
                received,
                self.config.batch,
                assignment.output_bytes()
            ),
        );
        let upload = started_at.elapsed();
        relay.abort();
        if let Some(error) = &pumped.error {
            warn!(
                event = "stream.refused",
                lines_lost = pumped.lines_lost,
                "{label}: {} output line(s) not stored: {error}",
                pumped.lines_lost
            );
        }
        if pumped.lines_over_stream_limit > 0 {
            warn!(
                event = "stream.full",
                lines_over_stream_limit = pumped.lines_over_stream_limit,
                "{label}: the attempt's stream is full (10,000 chunks or 64 MiB); {} output \
                 line(s) were counted, not sent",
                pumped.lines_over_stream_limit
            );
        }
        let outcome = match ran {
            Ok(outcome) => outcome,
            Err(error) => {
                let reason = error.to_string();
                let _ = stream
                    .send(
                        ChunkKind::Log,
                        json!({ "event": "failed_to_start", "reason": reason }),
                    )
                    .await;
                return Prepared::Complete {
                    status: CompletionStatus::Failed,
                    result_hash: None,
                    summary: reason,
                };
            }
        };

        let output = output_figures(&outcome, &pumped, upload);
        report_output(&label, &output);
        *figures = Some(output);

        let cancel_reason = match &outcome.ending {
            Ending::Stopped(StopRequest::Cancel { reason }) => reason.clone(),
            _ => None,
        };
        let exited = json!({
            "event": "exited",
            "ending": outcome.ending.as_str(),
            "exitCode": outcome.exit_code,
            "signal": outcome.signal,
            "killed": outcome.killed,
            "durationMs": u64::try_from(outcome.elapsed.as_millis()).unwrap_or(u64::MAX),
            "stdoutBytes": outcome.stdout_bytes,
            "stderrBytes": outcome.stderr_bytes,
            "stdoutSha256": outcome.stdout_sha256.as_str(),
            "linesOverLimit": pumped.lines_over_limit,
            "linesOverStreamLimit": pumped.lines_over_stream_limit,
            "cancelReason": cancel_reason,
            "limit": limit_reached(&outcome, &confinement),
        });
        let summary = match limit_reached(&outcome, &confinement) {
            Some(limit) => format!(
                "{}; {}",
                describe(&outcome),
                explain_limit(limit, &outcome, &confinement)
            ),
            None => describe(&outcome),
        };
        let Some(status) = completion_status(&outcome) else {
            if matches!(outcome.ending, Ending::Stopped(StopRequest::Shutdown)) {
                let _ = stream.send(ChunkKind::Log, exited).await;
                let handed = self
                    .hand_back(
                        assignment,
                        "the runner is stopping (a second signal or --drain-timeout)",
                    )
                    .await;
                return self.stop(
                    assignment,
                    "job.given_back",
                    format!("{summary}; given back, not completed: {handed}"),
                );
            }
            return self.stop(
                assignment,
                "job.lost",
                format!("{summary}; the claim is no longer ours, so it is not completed"),
            );
        };
        if let Err(error) = stream.send(ChunkKind::Log, exited).await {
            if is_claim_lost(&error) {
                return self.stop(
                    assignment,
                    "job.lost",
                    format!("{summary}; the claim is gone: {error}"),
                );
            }
        }
        Prepared::Complete {
            status,
            result_hash: Some(result_hash(outcome.exit_code, &outcome.stdout_sha256)),
            summary,
        }
    }
}

pub(super) fn output_figures(
    outcome: &ExecOutcome,
    pumped: &PumpReport,
    upload: Duration,
) -> OutputFigures {
    OutputFigures {
        output_bytes: outcome.stdout_bytes + outcome.stderr_bytes,
        lines: pumped.lines_sent,
        chunks: pumped.chunks,
        payload_bytes: pumped.payload_bytes,
        lines_over_limit: pumped.lines_over_limit,
        lines_over_stream_limit: pumped.lines_over_stream_limit,
        command: outcome.elapsed,
        upload,
    }
}

pub(super) fn report_output(label: &str, output: &OutputFigures) {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let upload_seconds = output.upload.as_secs_f64();
    let rate = if upload_seconds > 0.0 {
        output.output_bytes as f64 / upload_seconds
    } else {
        0.0
    };
    info!(
        event = "job.output",
        output_bytes = output.output_bytes,
        log_lines = output.lines,
        log_chunks = output.chunks,
        payload_bytes = output.payload_bytes,
        command_ms = millis(output.command),
        upload_ms = millis(output.upload),
        "{label}: {} line(s), {} byte(s) of output, sent in {} chunk(s) ({} byte(s) of payload); \
         the command ran {:.2} s, its log was stored after {:.2} s ({:.1} MB/s)",
        output.lines,
        output.output_bytes,
        output.chunks,
        output.payload_bytes,
        output.command.as_secs_f64(),
        upload_seconds,
        rate / 1e6,
    );
}

pub(super) fn describe(outcome: &ExecOutcome) -> String {
    let seconds = outcome.elapsed.as_secs_f64();
    let how = match (&outcome.exit_code, &outcome.signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "no exit status".into(),
    };
    let killed = if outcome.killed {
        ", killed after the grace period"
    } else {
        ""
    };
    match &outcome.ending {
        Ending::Exited => format!("{how} after {seconds:.1} s"),
        Ending::WallTimeExceeded => {
            format!("wall-time limit exceeded: stopped after {seconds:.1} s ({how}{killed})")
        }
        Ending::CpuTimeExceeded => {
            format!("CPU-time limit exceeded: killed after {seconds:.1} s ({how})")
        }
        Ending::Stopped(StopRequest::Cancel { reason }) => format!(
            "cancellation requested{}: stopped after {seconds:.1} s ({how}{killed})",
            reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        Ending::Stopped(StopRequest::Lost { reason }) => {
            format!("claim lost ({reason}): stopped after {seconds:.1} s ({how}{killed})")
        }
        Ending::Stopped(StopRequest::Shutdown) => {
            format!("runner shutting down: stopped after {seconds:.1} s ({how}{killed})")
        }
    }
}

/// A job refused before its command runs: the refusal in its stream (a `refused` event) and
/// the log (`event`), and a `failed` completion saying why.
async fn not_run(stream: &mut ChunkStream, label: &str, event: &str, reason: String) -> Prepared {
    let note = json!({ "event": "refused", "reason": reason });
    let _ = stream.send(ChunkKind::Log, note).await;
    error!(
        event,
        reason = reason.as_str(),
        "{label}: {reason}; not run"
    );
    Prepared::Complete {
        status: CompletionStatus::Failed,
        result_hash: None,
        summary: format!("not run: {reason}"),
    }
}

/// What the launcher applies to this job: its cgroups where the host allows them, its
/// `limits.cpuSeconds` (an rlimit) and `limits.memoryMb` (its cgroups' limit, else an rlimit),
/// and a network namespace of its own unless its `network` is an allowlist (absent means
/// `deny_all`). Refused when it asks for `deny_all` on a host that cannot enforce it.
pub(super) fn confinement_for(
    assignment: &Assignment,
    isolation: Option<&Isolation>,
) -> Result<Confinement, Unenforceable> {
    let requirements = assignment.envelope().requirements.as_map();
    let limit = |name: &str| {
        requirements
            .get("limits")
            .and_then(|limits| limits.get(name))
            .and_then(Value::as_u64)
    };
    let deny_network = requirements
        .get("network")
        .is_none_or(|network| network["mode"] == "deny_all" || network == "deny_all");
    if deny_network && isolation.is_some_and(|isolation| !isolation.host.network_namespace) {
        return Err(Unenforceable::NetworkDenyAll);
    }
    Ok(Confinement {
        cpu_seconds: limit("cpuSeconds"),
        memory_mb: limit("memoryMb"),
        deny_network,
        run_as: None,
        cgroups: isolation
            .map(|isolation| isolation.host.job_cgroups())
            .unwrap_or_default(),
    })
}

/// What holds for this job, for its `started` event: nothing without a launcher.
fn enforced(confinement: &Confinement, isolation: Option<&Isolation>) -> Value {
    match isolation {
        None => json!({ "launcher": false }),
        Some(isolation) => json!({
            "launcher": true,
            "ownSession": true,
            "processSweep": isolation.host.process_sweep,
            "processContainment": if confinement.cgroups.is_empty() { "subreaper" } else { "cgroup" },
            "memoryLimit": match (confinement.memory_mb, isolation.host.memory_cgroup) {
                (None, _) => None,
                (Some(_), true) => Some("cgroup"),
                (Some(_), false) => Some("rlimit"),
            },
            "cpuSeconds": confinement.cpu_seconds,
            "memoryMb": confinement.memory_mb,
            "networkDenyAll": confinement.deny_network,
        }),
    }
}

/// The limit a failed command ran into, where that can be told: `cpuSeconds` when the kernel
/// killed it for CPU time; `memoryMb` when the kernel killed a process of it at its cgroup's
/// memory limit, or when it failed under an address-space limit and its stderr said an
/// allocation failed. A job that fails an allocation silently under an rlimit is not told
/// apart from any other failure.
pub(super) fn limit_reached(
    outcome: &ExecOutcome,
    confinement: &Confinement,
) -> Option<&'static str> {
    match outcome.ending {
        Ending::CpuTimeExceeded => Some("cpuSeconds"),
        Ending::Exited
            if outcome.exit_code != Some(0)
                && (outcome.allocation_failed || outcome.oom_kills > 0)
                && confinement.memory_mb.is_some() =>
        {
            Some("memoryMb")
        }
        _ => None,
    }
}

fn explain_limit(limit: &str, outcome: &ExecOutcome, confinement: &Confinement) -> String {
    match (limit, confinement.memory_mb, confinement.cpu_seconds) {
        ("memoryMb", Some(mb), _) if outcome.oom_kills > 0 => format!(
            "the kernel killed {} of its processes at its memory limit ({mb} MB for the job's \
             processes together, its cgroup)",
            outcome.oom_kills
        ),
        ("memoryMb", Some(mb), _) => format!(
            "an allocation failed at its memory limit ({mb} MB of address space, RLIMIT_AS)"
        ),
        ("cpuSeconds", _, Some(seconds)) => {
            format!("it used its {seconds} s of CPU time (RLIMIT_CPU)")
        }
        _ => format!("it reached its {limit} limit"),
    }
}

/// Forwards the first reason to stop (see [`stop_request`]) to the running command.
pub(super) async fn relay_stops(
    mut claim: watch::Receiver<ClaimStatus>,
    mut shutdown: watch::Receiver<ShutdownState>,
    stop: watch::Sender<Option<StopRequest>>,
) {
    let mut claim_open = true;
    let mut shutdown_open = true;
    loop {
        let request = stop_request(&claim.borrow_and_update(), *shutdown.borrow_and_update());
        if let Some(request) = request {
            stop.send_replace(Some(request));
            return;
        }
        tokio::select! {
            changed = claim.changed(), if claim_open => claim_open = changed.is_ok(),
            changed = shutdown.changed(), if shutdown_open => shutdown_open = changed.is_ok(),
            else => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_claim_outranks_cancellation_which_outranks_giving_back() {
        let mut claim = ClaimStatus::default();
        assert_eq!(stop_request(&claim, ShutdownState::Running), None);
        assert_eq!(stop_request(&claim, ShutdownState::Draining), None);
        assert_eq!(
            stop_request(&claim, ShutdownState::GivingBack),
            Some(StopRequest::Shutdown)
        );
        claim.cancel_requested = Some(Some("no longer needed".into()));
        assert_eq!(
            stop_request(&claim, ShutdownState::GivingBack),
            Some(StopRequest::Cancel {
                reason: Some("no longer needed".into())
            })
        );
        claim.lost = Some("409 CLAIM_NOT_ACTIVE".into());
        assert!(matches!(
            stop_request(&claim, ShutdownState::Running),
            Some(StopRequest::Lost { .. })
        ));
    }

    fn outcome(ending: Ending, exit_code: Option<i32>) -> ExecOutcome {
        ExecOutcome {
            ending,
            exit_code,
            signal: None,
            killed: false,
            stdout_sha256: stable_json::sha256_hex(b""),
            stdout_bytes: 0,
            stderr_bytes: 0,
            allocation_failed: false,
            oom_kills: 0,
            elapsed: Duration::from_millis(5),
        }
    }

    #[test]
    fn a_limit_is_named_only_where_it_can_be_told() {
        let limited = Confinement {
            memory_mb: Some(64),
            cpu_seconds: Some(10),
            ..Confinement::default()
        };
        let mut failed = outcome(Ending::Exited, Some(1));
        assert_eq!(
            limit_reached(&failed, &limited),
            None,
            "any failure is not memory"
        );
        failed.allocation_failed = true;
        assert_eq!(limit_reached(&failed, &limited), Some("memoryMb"));
        assert!(explain_limit("memoryMb", &failed, &limited).contains("64 MB of address space"));
        let mut killed = outcome(Ending::Exited, None);
        killed.oom_kills = 2;
        assert_eq!(limit_reached(&killed, &limited), Some("memoryMb"));
        let said = explain_limit("memoryMb", &killed, &limited);
        assert!(
            said.contains("killed 2") && said.contains("cgroup"),
            "{said}"
        );
        assert_eq!(
            limit_reached(&killed, &Confinement::default()),
            None,
            "no memory limit asked for, so not the limit"
        );
        assert_eq!(
            limit_reached(&failed, &Confinement::default()),
            None,
            "no limit, so not the limit"
        );
        let mut succeeded = outcome(Ending::Exited, Some(0));
        succeeded.allocation_failed = true;
        assert_eq!(limit_reached(&succeeded, &limited), None, "it coped");
        let cpu = outcome(Ending::CpuTimeExceeded, None);
        assert_eq!(limit_reached(&cpu, &limited), Some("cpuSeconds"));
        assert_eq!(completion_status(&cpu), Some(CompletionStatus::Failed));
        assert!(describe(&cpu).starts_with("CPU-time limit exceeded"));
    }

    #[test]
    fn statuses_follow_how_the_command_ended() {
        use CompletionStatus::*;
        assert_eq!(
            completion_status(&outcome(Ending::Exited, Some(0))),
            Some(Succeeded)
        );
        assert_eq!(
            completion_status(&outcome(Ending::Exited, Some(2))),
            Some(Failed)
        );
        assert_eq!(
            completion_status(&outcome(Ending::Exited, None)),
            Some(Failed)
        );
        assert_eq!(
            completion_status(&outcome(Ending::WallTimeExceeded, None)),
            Some(Failed)
        );
        assert_eq!(
            completion_status(&outcome(
                Ending::Stopped(StopRequest::Cancel { reason: None }),
                None
            )),
            Some(Cancelled)
        );
        assert_eq!(
            completion_status(&outcome(Ending::Stopped(StopRequest::Shutdown), None)),
            None
        );
    }

    #[test]
    fn the_result_hash_covers_exit_code_and_stdout() {
        let empty = stable_json::sha256_hex(b"");
        // H({"exitCode":0,"stdoutSha256":"e3b0…"}) as `edgerunner hash` prints it.
        let expected = stable_json::hash(
            &serde_json::from_str(&format!(
                "{{\"exitCode\":0,\"stdoutSha256\":\"{}\"}}",
                empty.as_str()
            ))
            .expect("json"),
        );
        assert_eq!(result_hash(Some(0), &empty), expected);
        assert_ne!(result_hash(Some(1), &empty), expected);
        assert_ne!(result_hash(None, &empty), expected);
    }
}
