//! `edgerunner runner start`: claim jobs up to capacity, run the command for each, stream its
//! output, complete with its result.
//!
//! # One job
//!
//! 1. The claim is verified by [`RunnerClient::claim`] before anything else happens.
//! 2. The input is read (`GET …/input`) and checked against the signed `inputHash`; the bound
//!    artifact is read and checked against the signed `contentHash`. A mismatch, or an
//!    artifact that cannot be read, is reported in the stream and completed `failed` without
//!    running anything.
//! 3. The evaluation run the completion will name is found or created ([`crate::evidence`]).
//!    Without one the job is not run and its claim is left to lapse (nothing can complete it).
//! 4. The first heartbeat moves the job to `running` (and reveals a cancellation requested
//!    while it was queued); then heartbeats continue on their own task.
//! 5. The command runs ([`crate::exec`]) in the job's own directory inside the runner's
//!    private one ([`crate::workdir`]), with `EDGERUNNER_INPUT` (the input file, exactly the
//!    bytes served), `EDGERUNNER_ARTIFACT` (the artifact's content), `EDGERUNNER_JOB_ID`,
//!    `EDGERUNNER_CLAIM_ID`, `EDGERUNNER_ATTEMPT` and `EDGERUNNER_WORKDIR`; its lines become batched `log` chunks,
//!    framed by a `started` chunk and an `exited` chunk.
//! 6. It completes once, with one sealed completion re-sent as is on transient failures:
//!    exit 0 → `succeeded`, other exits and the wall-time limit → `failed`, cancellation →
//!    `cancelled`. `resultHash = H({"exitCode", "stdoutSha256"})` (`exitCode` null when a
//!    signal ended the command; `stdoutSha256` the hex SHA-256 of all of stdout).
//!
//! # Shutdown
//!
//! [`ShutdownState::Draining`] stops claiming and lets running jobs finish and complete.
//! [`ShutdownState::GivingBack`] also stops the running commands (terminate, grace, kill) and
//! does not complete them: their heartbeats stop, their leases lapse, and the server's
//! recovery requeues them (it has no endpoint to hand a claim back sooner).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use edgerunner_protocol::chunk::ChunkKind;
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::client::{Assignment, Decision, RunnerClient};
use crate::evidence::EvidenceSource;
use crate::exec::{self, Ending, ExecOutcome, ExecSpec, StopRequest};
use crate::heartbeat::{is_claim_lost, ClaimStatus, Heartbeat, HeartbeatConfig};
use crate::http::ClientError;
use crate::report::Reporter;
use crate::retry::RetryPolicy;
use crate::stream::{pump_lines, BatchLimits, ChunkStream};
use crate::workdir::{write_private_file, RunnerWorkDir};

/// How `runner start` behaves.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Run as `sh -c '<command>'` for each job.
    pub command: String,
    /// Jobs at once.
    pub capacity: usize,
    /// Wait between claims that found no job.
    pub poll_interval: Duration,
    pub heartbeat: HeartbeatConfig,
    /// Between `SIGTERM` and `SIGKILL` when a command is stopped.
    pub grace: Duration,
    /// Stop claiming after this many claims (verified or refused).
    pub max_jobs: Option<u64>,
    /// Stop once a claim finds no job while none is running.
    pub exit_when_idle: bool,
    /// Each job gets a private directory `<job id>-<attempt>` in here.
    pub work_dir: RunnerWorkDir,
    /// Keep job directories after completion.
    pub keep_work: bool,
    pub batch: BatchLimits,
    pub evidence: EvidenceSource,
}

/// Where the runner is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownState {
    Running,
    /// No new claims; running jobs finish.
    Draining,
    /// Running jobs are stopped and left to lapse back into the queue.
    GivingBack,
}

/// How one claim ended, from this runner's side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    Completed {
        status: CompletionStatus,
        decision: Decision,
    },
    /// Not completed: the claim was lost, given back, or could not be completed.
    NotCompleted { reason: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobReport {
    pub job_id: String,
    pub attempt: u32,
    pub outcome: JobOutcome,
}

/// What a `run` did.
#[derive(Debug, Default)]
pub struct WorkerSummary {
    /// Claim answers with a job (verified or refused).
    pub claimed: u64,
    /// Assignments refused by local verification (never run).
    pub refused: u64,
    pub jobs: Vec<JobReport>,
    /// The error that stopped the runner, if one did.
    pub fatal: Option<ClientError>,
}

/// The claim loop.
pub struct Worker {
    client: Arc<RunnerClient>,
    config: Arc<WorkerConfig>,
    reporter: Reporter,
}

impl Worker {
    pub fn new(client: Arc<RunnerClient>, config: WorkerConfig, reporter: Reporter) -> Self {
        Self {
            client,
            config: Arc::new(config),
            reporter,
        }
    }

    /// Claims and runs jobs until `shutdown` leaves [`ShutdownState::Running`], the job budget
    /// is spent, the runner is idle (when asked to stop then), or a fatal error; then waits for
    /// the jobs still running.
    pub async fn run(&self, mut shutdown: watch::Receiver<ShutdownState>) -> WorkerSummary {
        let permits = Arc::new(Semaphore::new(self.config.capacity.max(1)));
        let mut jobs: JoinSet<JobReport> = JoinSet::new();
        let mut summary = WorkerSummary::default();
        let mut failures: u32 = 0;
        let mut last_problem: Option<String> = None;
        loop {
            while let Some(done) = jobs.try_join_next() {
                self.record(&mut summary, done);
            }
            if *shutdown.borrow() != ShutdownState::Running {
                break;
            }
            if self
                .config
                .max_jobs
                .is_some_and(|max| summary.claimed >= max)
            {
                self.reporter.info(
                    "runner.budget_spent",
                    &format!("claimed {} job(s), the --max-jobs budget", summary.claimed),
                    json!({ "claimed": summary.claimed }),
                );
                break;
            }
            let permit = tokio::select! {
                permit = Arc::clone(&permits).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                () = changed(&mut shutdown) => continue,
            };
            match self.client.claim().await {
                Ok(Some(assignment)) => {
                    summary.claimed += 1;
                    failures = 0;
                    last_problem = None;
                    let job = JobRun {
                        client: Arc::clone(&self.client),
                        config: Arc::clone(&self.config),
                        reporter: self.reporter.clone(),
                        shutdown: shutdown.clone(),
                    };
                    jobs.spawn(job.run(assignment, permit));
                }
                Ok(None) => {
                    drop(permit);
                    failures = 0;
                    last_problem = None;
                    if self.config.exit_when_idle && jobs.is_empty() {
                        self.reporter.info(
                            "runner.idle",
                            "no job is queued for this runner and none is running; exiting",
                            json!({}),
                        );
                        break;
                    }
                    pause(self.config.poll_interval, &mut shutdown).await;
                }
                Err(ClientError::Refused(error)) => {
                    drop(permit);
                    summary.claimed += 1;
                    summary.refused += 1;
                    self.reporter.error(
                        "claim.refused",
                        &format!(
                            "refused an assignment before execution ({}): {error}; it was not run",
                            error.code()
                        ),
                        json!({ "code": error.code(), "reason": error.to_string() }),
                    );
                }
                Err(error) if is_fatal(&error) => {
                    drop(permit);
                    self.reporter.error(
                        "runner.fatal",
                        &format!("cannot go on: {error}"),
                        json!({ "code": error.code(), "reason": error.to_string() }),
                    );
                    summary.fatal = Some(error);
                    break;
                }
                Err(error) => {
                    drop(permit);
                    failures += 1;
                    let (event, message) = describe_claim_problem(&error);
                    if last_problem.as_deref() != Some(message.as_str()) {
                        self.reporter.warn(
                            event,
                            &message,
                            json!({ "code": error.code(), "reason": error.to_string() }),
                        );
                        last_problem = Some(message);
                    }
                    let backoff = RetryPolicy {
                        attempts: u32::MAX,
                        initial: self.config.poll_interval.max(Duration::from_millis(200)),
                        max: Duration::from_secs(30),
                    };
                    pause(backoff.delay(failures), &mut shutdown).await;
                }
            }
        }
        if !jobs.is_empty() {
            self.reporter.info(
                "runner.draining",
                &format!("waiting for {} running job(s)", jobs.len()),
                json!({ "running": jobs.len() }),
            );
        }
        while let Some(done) = jobs.join_next().await {
            self.record(&mut summary, done);
        }
        summary
    }

    fn record(&self, summary: &mut WorkerSummary, done: Result<JobReport, tokio::task::JoinError>) {
        match done {
            Ok(report) => summary.jobs.push(report),
            Err(error) => self.reporter.error(
                "job.crashed",
                &format!("a job task ended abnormally: {error}"),
                json!({}),
            ),
        }
    }
}

/// Errors no amount of waiting fixes: the credential is refused (rotated, revoked, wrong),
/// the local configuration is unusable, or the server's sessions are for another identity.
fn is_fatal(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Config(_) | ClientError::IdentityMismatch(_)
    ) || error.status() == Some(401)
        || error.code() == Some("RUNNER_REVOKED")
}

fn describe_claim_problem(error: &ClientError) -> (&'static str, String) {
    match error.code() {
        Some("RUNNER_PENDING_APPROVAL") => (
            "runner.pending_approval",
            "waiting for an admin to approve this runner's fingerprint".into(),
        ),
        Some("RUNNER_NOT_ACTIVE") => (
            "runner.not_active",
            format!("the server gives this runner no work now: {error}"),
        ),
        Some("RUNNER_AT_CAPACITY") => (
            "runner.at_capacity",
            "the server counts this runner at capacity; waiting".into(),
        ),
        _ => ("claim.failed", format!("claim failed: {error}")),
    }
}

/// Waits for the next change of `shutdown`; never, once its sender is gone.
async fn changed(shutdown: &mut watch::Receiver<ShutdownState>) {
    if shutdown.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn pause(duration: Duration, shutdown: &mut watch::Receiver<ShutdownState>) {
    tokio::select! {
        () = tokio::time::sleep(duration) => {}
        () = changed(shutdown) => {}
    }
}

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
        Ending::Exited | Ending::WallTimeExceeded => Some(CompletionStatus::Failed),
        Ending::Stopped(StopRequest::Cancel { .. }) => Some(CompletionStatus::Cancelled),
        Ending::Stopped(StopRequest::Lost { .. } | StopRequest::Shutdown) => None,
    }
}

/// Everything one job's task needs.
struct JobRun {
    client: Arc<RunnerClient>,
    config: Arc<WorkerConfig>,
    reporter: Reporter,
    shutdown: watch::Receiver<ShutdownState>,
}

impl JobRun {
    async fn run(self, assignment: Assignment, permit: OwnedSemaphorePermit) -> JobReport {
        let outcome = self.execute(&assignment).await;
        drop(permit);
        JobReport {
            job_id: assignment.job_id().as_str().to_owned(),
            attempt: assignment.attempt().get(),
            outcome,
        }
    }

    fn fields(&self, assignment: &Assignment, extra: Value) -> Value {
        let mut fields = json!({
            "jobId": assignment.job_id().as_str(),
            "claimId": assignment.claim_id().as_str(),
            "attempt": assignment.attempt().get(),
        });
        if let (Value::Object(fields), Value::Object(extra)) = (&mut fields, extra) {
            fields.extend(extra);
        }
        fields
    }

    fn not_completed(&self, assignment: &Assignment, event: &str, reason: String) -> JobOutcome {
        self.reporter.error(
            event,
            &format!(
                "job {} (attempt {}): {reason}",
                assignment.job_id(),
                assignment.attempt()
            ),
            self.fields(assignment, json!({ "reason": reason })),
        );
        JobOutcome::NotCompleted { reason }
    }

    async fn execute(&self, assignment: &Assignment) -> JobOutcome {
        let label = format!(
            "job {} (attempt {})",
            assignment.job_id(),
            assignment.attempt()
        );
        self.reporter.info(
            "job.claimed",
            &format!("{label}: claimed; envelope verified"),
            self.fields(
                assignment,
                json!({ "leaseExpiresAt": assignment.lease_expires_at }),
            ),
        );

        let (input_text, input) = match self.client.job_input(assignment.job_id()).await {
            Ok(input) => input,
            Err(error) => {
                return self.not_completed(
                    assignment,
                    "job.abandoned",
                    format!("cannot read the job input ({error}); the claim is left to lapse"),
                )
            }
        };
        let prepared = match self
            .config
            .evidence
            .prepare(&self.client, assignment, &input)
            .await
        {
            Ok(prepared) => prepared,
            Err(error) => {
                return self.not_completed(
                    assignment,
                    "job.abandoned",
                    format!("{error}; the claim is left to lapse"),
                )
            }
        };

        let mut status = ClaimStatus::default();
        match self
            .client
            .heartbeat(assignment.claim_id(), self.config.heartbeat.extend_seconds)
            .await
        {
            Ok(answer) => status.record(&answer),
            Err(error) => {
                if status.record_error(&error) {
                    return self.not_completed(
                        assignment,
                        "job.lost",
                        format!("the claim is no longer ours: {error}"),
                    );
                }
                self.reporter.warn(
                    "heartbeat.failed",
                    &format!("{label}: first heartbeat failed ({error}); retrying on schedule"),
                    self.fields(assignment, json!({})),
                );
            }
        }
        let heartbeat = Heartbeat::spawn(
            Arc::clone(&self.client),
            assignment.claim_id().clone(),
            self.config.heartbeat,
            status.clone(),
        );
        let mut stream = ChunkStream::new(Arc::clone(&self.client), assignment.identity());

        let workdir_name = format!(
            "{}-{}",
            sanitize(assignment.job_id().as_str()),
            assignment.attempt()
        );
        let workdir = self.config.work_dir.path().join(&workdir_name);
        let outcome = self
            .run_command(
                assignment,
                &heartbeat,
                &mut stream,
                &workdir_name,
                &input,
                &input_text,
            )
            .await;
        let (status, result_hash, summary) = match outcome {
            Prepared::Complete {
                status,
                result_hash,
                summary,
            } => (status, result_hash, summary),
            Prepared::Stop(outcome) => {
                drop(heartbeat);
                self.cleanup(&workdir);
                return outcome;
            }
        };

        let (evidence, warning) = self
            .config
            .evidence
            .finish(&self.client, &prepared, assignment, status)
            .await;
        if let Some(warning) = warning {
            self.reporter.warn(
                "evidence.partial",
                &format!("{label}: could not record the outcome in the evaluation run: {warning}"),
                self.fields(assignment, json!({})),
            );
        }
        if let Err(error) = stream.flush().await {
            self.reporter.warn(
                "stream.unsettled",
                &format!("{label}: the last chunk's delivery is unknown ({error})"),
                self.fields(assignment, json!({})),
            );
        }
        let completion =
            assignment.completion(status, result_hash, stream.final_checksum(), evidence);
        let answer = self.client.complete(&completion).await;
        drop(heartbeat);
        self.cleanup(&workdir);
        match answer {
            Ok(answer) => {
                let fields = self.fields(
                    assignment,
                    json!({
                        "status": status.as_str(),
                        "decision": answer.decision.as_str(),
                        "rationale": answer.rationale,
                        "completionChecksum": completion.checksum().as_str(),
                        "chunks": stream.len(),
                    }),
                );
                let message = format!(
                    "{label}: {} ({summary}); completion {}",
                    status.as_str(),
                    answer.decision.as_str()
                );
                if answer.is_settled() {
                    self.reporter.info("job.completed", &message, fields);
                } else {
                    self.reporter.warn(
                        "job.completion_not_applied",
                        &format!("{message}: {}", answer.rationale),
                        fields,
                    );
                }
                JobOutcome::Completed {
                    status,
                    decision: answer.decision,
                }
            }
            Err(error) => self.not_completed(
                assignment,
                "job.completion_failed",
                format!(
                    "{} but the completion was refused: {error}",
                    status.as_str()
                ),
            ),
        }
    }

    /// Checks the inputs, runs the command and streams its output; says how to complete.
    async fn run_command(
        &self,
        assignment: &Assignment,
        heartbeat: &Heartbeat,
        stream: &mut ChunkStream,
        workdir_name: &str,
        input: &Value,
        input_text: &str,
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
            Err(reason) => {
                let note = json!({ "event": "refused", "reason": reason });
                let _ = stream.send(ChunkKind::Log, note).await;
                self.reporter.error(
                    "job.inputs_refused",
                    &format!("{label}: {reason}; not run"),
                    self.fields(assignment, json!({ "reason": reason })),
                );
                return Prepared::Complete {
                    status: CompletionStatus::Failed,
                    result_hash: None,
                    summary: format!("not run: {reason}"),
                };
            }
        };

        let workdir = self.config.work_dir.path().join(workdir_name);
        let input_path = workdir.join("input.json");
        let artifact_path = workdir.join("artifact.json");
        let written = (|| -> std::io::Result<()> {
            self.config.work_dir.create_job_dir(workdir_name)?;
            write_private_file(&input_path, input_text.as_bytes())?;
            write_private_file(&artifact_path, artifact["content"].to_string().as_bytes())
        })();
        if let Err(error) = written {
            let reason = format!("cannot prepare {}: {error}", workdir.display());
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
        let env = vec![
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

        let wall_seconds = assignment.wall_seconds();
        let started = json!({
            "event": "started",
            "command": self.config.command,
            "wallSeconds": wall_seconds,
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
        self.reporter.info(
            "job.started",
            &format!("{label}: running `{}`", self.config.command),
            self.fields(assignment, json!({ "wallSeconds": wall_seconds })),
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
            workdir: workdir.to_owned(),
            wall_limit: wall_seconds.map(Duration::from_secs),
            grace: self.config.grace,
        };
        let (lines, received) = mpsc::channel(1024);
        let (ran, pumped) = tokio::join!(
            exec::run(&spec, lines, stop),
            pump_lines(
                stream,
                received,
                self.config.batch,
                assignment.output_bytes()
            ),
        );
        relay.abort();
        if let Some(error) = &pumped.error {
            self.reporter.warn(
                "stream.refused",
                &format!(
                    "{label}: {} output line(s) not stored: {error}",
                    pumped.lines_lost
                ),
                self.fields(assignment, json!({ "linesLost": pumped.lines_lost })),
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
            "cancelReason": cancel_reason,
        });
        let summary = describe(&outcome);
        let Some(status) = completion_status(&outcome) else {
            if matches!(outcome.ending, Ending::Stopped(StopRequest::Shutdown)) {
                let _ = stream.send(ChunkKind::Log, exited).await;
                return self.stop(
                    assignment,
                    "job.given_back",
                    format!("{summary}; given back: not completed, its lease will lapse and the server requeues it"),
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

    /// The bound artifact, read and checked against the signed `contentHash`; `Err` says why
    /// the job must not run.
    async fn checked_artifact(&self, assignment: &Assignment) -> Result<Value, String> {
        let artifact = self
            .client
            .job_artifact(assignment.job_id())
            .await
            .map_err(|error| format!("cannot read the bound artifact: {error}"))?;
        let signed = &assignment.envelope().subject.content_hash;
        let computed = stable_json::hash(&artifact["content"]);
        if &computed != signed {
            return Err(format!(
                "the served artifact hashes to {computed}, not the signed contentHash {signed}"
            ));
        }
        Ok(artifact)
    }

    fn stop(&self, assignment: &Assignment, event: &str, reason: String) -> Prepared {
        Prepared::Stop(self.not_completed(assignment, event, reason))
    }

    fn cleanup(&self, workdir: &Path) {
        if !self.config.keep_work {
            let _ = std::fs::remove_dir_all(workdir);
        }
    }
}

enum Prepared {
    Complete {
        status: CompletionStatus,
        result_hash: Option<Sha256Hex>,
        summary: String,
    },
    Stop(JobOutcome),
}

fn describe(outcome: &ExecOutcome) -> String {
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

/// Job ids are the server's; keep directory names to a safe alphabet anyway.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Forwards the first reason to stop (see [`stop_request`]) to the running command.
async fn relay_stops(
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
            elapsed: Duration::from_millis(5),
        }
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
