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
//!    Without one the job is not run and its claim is handed back (nothing could complete it).
//! 4. The first heartbeat moves the job to `running` (and reveals a cancellation requested
//!    while it was queued); then heartbeats continue on their own task.
//! 5. The command runs ([`crate::exec`]) in [`WorkerConfig::exec_dir`] (for the CLI, where
//!    `runner start` was invoked, so `./evaluate.sh` means what it says), with
//!    `EDGERUNNER_WORKDIR` naming the job's own fresh directory inside the runner's private one
//!    ([`crate::workdir`]), `EDGERUNNER_INPUT` (the input file there, exactly the bytes served),
//!    `EDGERUNNER_ARTIFACT` (the artifact's content, there too), `EDGERUNNER_JOB_ID`,
//!    `EDGERUNNER_CLAIM_ID` and `EDGERUNNER_ATTEMPT`, `TMPDIR` in the job's directory, and of
//!    the runner's own environment only what [`WorkerConfig::job_env`] picked
//!    ([`crate::job_env`]: never a credential); its lines become batched `log` chunks
//!    ([`crate::stream::pump_lines`]), framed by a `started` chunk and an `exited` chunk.
//! 6. It completes once, with one sealed completion re-sent as is on transient failures:
//!    exit 0 → `succeeded`, other exits and the wall-time limit → `failed`, cancellation →
//!    `cancelled`. `resultHash = H({"exitCode", "stdoutSha256"})` (`exitCode` null when a
//!    signal ended the command; `stdoutSha256` the hex SHA-256 of all of stdout).
//!
//! # Logs and progress
//!
//! Everything is reported through `tracing` (see [`crate::report`]): each job's events are in a
//! `job` span with `job_id`, `claim_id` and `attempt`. [`Worker::progress`] publishes the counts
//! a status line shows.
//!
//! # Shutdown
//!
//! [`ShutdownState::Draining`] stops claiming and lets running jobs finish and complete.
//! [`ShutdownState::GivingBack`] also stops the running commands (terminate, grace, kill) and
//! hands their claims back (`POST /api/remote-runners/release`): the server requeues each job
//! at once and does not mark this runner lost.
//!
//! # Hand-backs
//!
//! A claim this process will not complete is handed back rather than left to lapse: on giving
//! back, when the job cannot be prepared (input unreadable, no evaluation run), and when the
//! completion is refused while the claim is still ours (an evidence refusal, say). And a process
//! that starts hands back every claim its identity still holds ([`Worker::run`]): a fresh
//! process runs none of them, so they were a previous process's, and without this a restart
//! would wait out their leases at capacity. (So one runner identity is one process at a time;
//! two processes sharing an identity would hand back each other's work.)

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use edgerunner_protocol::chunk::ChunkKind;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{error, info, warn, Instrument};

use crate::client::{Assignment, Decision, RunnerClient};
use crate::evidence::EvidenceSource;
use crate::exec::{self, Ending, ExecOutcome, ExecSpec, RunAs, StopRequest};
use crate::heartbeat::{is_claim_lost, ClaimStatus, Heartbeat, HeartbeatConfig};
use crate::http::ClientError;
use crate::job_env::JobEnvironment;
use crate::retry::RetryPolicy;
use crate::stream::{pump_lines, BatchLimits, ChunkStream, PumpReport};
use crate::workdir::{JobDir, RunnerWorkDir};

/// How `runner start` behaves.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Run as `sh -c '<command>'` for each job.
    pub command: String,
    /// The command's current directory (the CLI's: where `runner start` was invoked). The
    /// job's own directory is `EDGERUNNER_WORKDIR`.
    pub exec_dir: PathBuf,
    /// Jobs at once.
    pub capacity: usize,
    /// Wait between claims that found no job.
    pub poll_interval: Duration,
    /// Seconds the server may hold each claim until a job is queued (a long poll); 0 polls.
    pub claim_wait: u32,
    pub heartbeat: HeartbeatConfig,
    /// Between `SIGTERM` and `SIGKILL` when a command is stopped.
    pub grace: Duration,
    /// Stop claiming after this many claims (verified or refused).
    pub max_jobs: Option<u64>,
    /// Stop once a claim finds no job while none is running.
    pub exit_when_idle: bool,
    /// Each job gets a fresh private directory `<job id>-<attempt>-<random>` in here.
    pub work_dir: RunnerWorkDir,
    /// Keep job directories after completion.
    pub keep_work: bool,
    pub batch: BatchLimits,
    pub evidence: EvidenceSource,
    /// What each job's command gets of the runner's environment (nothing else of it).
    pub job_env: JobEnvironment,
    /// Run each command as this user, its job directory handed to it (`--run-as`).
    pub run_as: Option<RunAs>,
}

/// The reason a starting process gives for the claims a previous process left.
const RESTART_REASON: &str =
    "the runner restarted; its new process runs none of the previous process's claims";

/// Where the runner is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownState {
    Running,
    /// No new claims; running jobs finish.
    Draining,
    /// Running jobs are stopped and handed back to the queue.
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
    /// How its output went, when the command ran.
    pub output: Option<OutputFigures>,
}

/// A command's output on its way to the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputFigures {
    /// Bytes the command wrote (stdout and stderr).
    pub output_bytes: u64,
    /// Lines sent in log chunks.
    pub lines: u64,
    /// Log chunks, and their payload bytes (stable JSON, as the server counts them).
    pub chunks: u64,
    pub payload_bytes: u64,
    /// Lines not sent: over the job's `outputBytes`, or past the attempt's stream limits.
    pub lines_over_limit: u64,
    pub lines_over_stream_limit: u64,
    /// From the command's start to its exit.
    pub command: Duration,
    /// From the command's start until its last log chunk was sent.
    pub upload: Duration,
}

/// What the runner is doing, for a status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub running: usize,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Claims that ended without a completion (lost, given back, abandoned) or were refused.
    pub not_completed: u64,
    /// Since when nothing has run; `None` while a job runs.
    pub idle_since: Option<Instant>,
    pub shutdown: ShutdownState,
}

impl Progress {
    fn new(now: Instant) -> Self {
        Self {
            running: 0,
            succeeded: 0,
            failed: 0,
            cancelled: 0,
            not_completed: 0,
            idle_since: Some(now),
            shutdown: ShutdownState::Running,
        }
    }

    /// One line for a person, e.g. `2 running · 5 succeeded · 1 failed · idle 0:42`.
    pub fn summary(&self, now: Instant) -> String {
        let mut parts = vec![
            format!("{} running", self.running),
            format!("{} succeeded", self.succeeded),
            format!("{} failed", self.failed),
        ];
        if self.cancelled > 0 {
            parts.push(format!("{} cancelled", self.cancelled));
        }
        if self.not_completed > 0 {
            parts.push(format!("{} not completed", self.not_completed));
        }
        if let Some(since) = self.idle_since {
            let idle = now.saturating_duration_since(since).as_secs();
            parts.push(format!("idle {}:{:02}", idle / 60, idle % 60));
        }
        match self.shutdown {
            ShutdownState::Running => {}
            ShutdownState::Draining => parts.push("draining".into()),
            ShutdownState::GivingBack => parts.push("giving back".into()),
        }
        parts.join(" · ")
    }

    fn record(&mut self, outcome: &JobOutcome, now: Instant) {
        self.running = self.running.saturating_sub(1);
        match outcome {
            JobOutcome::Completed { status, .. } => match status {
                CompletionStatus::Succeeded => self.succeeded += 1,
                CompletionStatus::Cancelled => self.cancelled += 1,
                _ => self.failed += 1,
            },
            JobOutcome::NotCompleted { .. } => self.not_completed += 1,
        }
        if self.running == 0 {
            self.idle_since = Some(now);
        }
    }
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
    progress: watch::Sender<Progress>,
    /// Set when this process hands a claim back: the capacity that frees is ours, so the next
    /// `RUNNER_AT_CAPACITY` is worth retrying after one poll interval, not a long backoff.
    handed_back: Arc<AtomicBool>,
}

impl Worker {
    pub fn new(client: Arc<RunnerClient>, config: WorkerConfig) -> Self {
        Self {
            client,
            config: Arc::new(config),
            progress: watch::Sender::new(Progress::new(Instant::now())),
            handed_back: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The runner's progress, updated as jobs start and end.
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Claims and runs jobs until `shutdown` leaves [`ShutdownState::Running`], the job budget
    /// is spent, the runner is idle (when asked to stop then), or a fatal error; then waits for
    /// the jobs still running.
    pub async fn run(&self, mut shutdown: watch::Receiver<ShutdownState>) -> WorkerSummary {
        // Until the server has answered once: a server that is unreachable at start is reported by
        // the claim below, and the hand-back is tried again before the next claim.
        let mut previous_claims_settled = false;
        let permits = Arc::new(Semaphore::new(self.config.capacity.max(1)));
        let mut jobs: JoinSet<JobReport> = JoinSet::new();
        let mut summary = WorkerSummary::default();
        let mut backoff: Option<backon::ExponentialBackoff> = None;
        let mut last_problem: Option<String> = None;
        loop {
            while let Some(done) = jobs.try_join_next() {
                self.record(&mut summary, done);
            }
            let state = *shutdown.borrow();
            self.progress.send_if_modified(|progress| {
                let changed = progress.shutdown != state;
                progress.shutdown = state;
                changed
            });
            if state != ShutdownState::Running {
                break;
            }
            if self
                .config
                .max_jobs
                .is_some_and(|max| summary.claimed >= max)
            {
                info!(
                    event = "runner.budget_spent",
                    claimed = summary.claimed,
                    "claimed {} job(s), the --max-jobs budget",
                    summary.claimed
                );
                break;
            }
            if !previous_claims_settled {
                previous_claims_settled = self.hand_back_previous_claims().await;
            }
            let permit = tokio::select! {
                permit = Arc::clone(&permits).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                () = changed(&mut shutdown) => continue,
            };
            // A long poll, unless the runner is to stop at the first "nothing queued".
            let wait = if self.config.exit_when_idle && jobs.is_empty() {
                0
            } else {
                self.config.claim_wait
            };
            let asked = tokio::time::Instant::now();
            match self.client.claim_waiting(wait).await {
                Ok(Some(assignment)) => {
                    summary.claimed += 1;
                    backoff = None;
                    last_problem = None;
                    let job = JobRun {
                        client: Arc::clone(&self.client),
                        config: Arc::clone(&self.config),
                        shutdown: shutdown.clone(),
                        handed_back: Arc::clone(&self.handed_back),
                    };
                    let span = tracing::info_span!(
                        "job",
                        job_id = assignment.job_id().as_str(),
                        claim_id = assignment.claim_id().as_str(),
                        attempt = assignment.attempt().get(),
                    );
                    self.progress.send_modify(|progress| {
                        progress.running += 1;
                        progress.idle_since = None;
                    });
                    jobs.spawn(job.run(assignment, permit).instrument(span));
                }
                Ok(None) => {
                    drop(permit);
                    backoff = None;
                    last_problem = None;
                    if self.config.exit_when_idle && jobs.is_empty() {
                        info!(
                            event = "runner.idle",
                            "no job is queued for this runner and none is running; exiting"
                        );
                        break;
                    }
                    // A long poll that waited has already spent the pause; one that came back
                    // early (the server was not waiting) must not make this loop spin.
                    let waited = asked.elapsed() >= Duration::from_secs(u64::from(wait)) / 2;
                    if wait == 0 || !waited {
                        pause(self.config.poll_interval, &mut shutdown).await;
                    }
                }
                Err(ClientError::Refused(error)) => {
                    drop(permit);
                    summary.claimed += 1;
                    summary.refused += 1;
                    self.progress
                        .send_modify(|progress| progress.not_completed += 1);
                    error!(
                        event = "claim.refused",
                        code = error.code(),
                        reason = %error,
                        "refused an assignment before execution ({}): {error}; it was not run",
                        error.code()
                    );
                }
                Err(error) if is_fatal(&error) => {
                    drop(permit);
                    error!(
                        event = "runner.fatal",
                        code = error.code_text(),
                        reason = %error,
                        "cannot go on: {error}"
                    );
                    summary.fatal = Some(error);
                    break;
                }
                Err(error) => {
                    drop(permit);
                    let (event, message) = describe_claim_problem(&error);
                    if last_problem.as_deref() != Some(message.as_str()) {
                        warn!(
                            event,
                            code = error.code_text(),
                            reason = %error,
                            "{message}"
                        );
                        last_problem = Some(message);
                    }
                    let own_capacity = error.code() == Some(ErrorCode::RunnerAtCapacity)
                        && self.handed_back.swap(false, Ordering::SeqCst);
                    if own_capacity {
                        // Our own hand-back freed it: look again after one poll interval.
                        backoff = None;
                        pause(self.config.poll_interval, &mut shutdown).await;
                        continue;
                    }
                    let wait = backoff
                        .get_or_insert_with(|| {
                            RetryPolicy {
                                attempts: u32::MAX,
                                initial: self.config.poll_interval.max(Duration::from_millis(200)),
                                max: Duration::from_secs(30),
                            }
                            .endless()
                        })
                        .next()
                        .unwrap_or(Duration::from_secs(30));
                    pause(wait, &mut shutdown).await;
                }
            }
        }
        if !jobs.is_empty() {
            info!(
                event = "runner.draining",
                running = jobs.len(),
                "waiting for {} running job(s)",
                jobs.len()
            );
        }
        while let Some(done) = jobs.join_next().await {
            self.record(&mut summary, done);
        }
        summary
    }

    /// Hands back the claims this runner's identity holds: this process has just started and
    /// runs none of them. `false` when the list could not be read for a reason that may pass
    /// (the server unreachable, the runner not approved yet): the caller tries again later. A
    /// claim that cannot be handed back is reported, and its lease lapses as before.
    async fn hand_back_previous_claims(&self) -> bool {
        let held = match self.client.held_claims().await {
            Ok(held) => held,
            Err(error) if error.is_transient() || error.status() == Some(503) => return false,
            // Not approved yet: it has never held a claim. (A refused credential is the claim
            // loop's to report.)
            Err(error)
                if error.code() == Some(ErrorCode::RunnerPendingApproval)
                    || error.status() == Some(401) =>
            {
                return true
            }
            Err(error) => {
                warn!(
                    event = "runner.held_claims_unknown",
                    code = error.code_text(),
                    "could not list the claims a previous process left ({error}); their leases will lapse"
                );
                return true;
            }
        };
        for claim_id in held {
            match self.client.release(&claim_id, RESTART_REASON).await {
                Ok(state) => {
                    self.handed_back.store(true, Ordering::SeqCst);
                    info!(
                        event = "claim.handed_back",
                        claim_id = claim_id.as_str(),
                        job_state = state.as_str(),
                        "handed back claim {claim_id}, left by a previous process of this runner (the job is {state} now)"
                    );
                }
                Err(error) => warn!(
                    event = "claim.hand_back_failed",
                    claim_id = claim_id.as_str(),
                    code = error.code_text(),
                    "could not hand back claim {claim_id} ({error}); its lease will lapse"
                ),
            }
        }
        true
    }

    fn record(&self, summary: &mut WorkerSummary, done: Result<JobReport, tokio::task::JoinError>) {
        let outcome = match done {
            Ok(report) => {
                let outcome = report.outcome.clone();
                summary.jobs.push(report);
                outcome
            }
            Err(error) => {
                error!(
                    event = "job.crashed",
                    "a job task ended abnormally: {error}"
                );
                JobOutcome::NotCompleted {
                    reason: error.to_string(),
                }
            }
        };
        self.progress
            .send_modify(|progress| progress.record(&outcome, Instant::now()));
    }
}

/// Errors no amount of waiting fixes: the credential is refused (rotated, revoked, wrong),
/// the local configuration is unusable, or the server's sessions are for another identity.
fn is_fatal(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Config(_) | ClientError::IdentityMismatch(_)
    ) || error.status() == Some(401)
        || error.code() == Some(ErrorCode::RunnerRevoked)
}

fn describe_claim_problem(error: &ClientError) -> (&'static str, String) {
    match error.code() {
        Some(ErrorCode::RunnerPendingApproval) => (
            "runner.pending_approval",
            "waiting for an admin to approve this runner's fingerprint".into(),
        ),
        Some(ErrorCode::RunnerNotActive) => (
            "runner.not_active",
            format!("the server gives this runner no work now: {error}"),
        ),
        Some(ErrorCode::RunnerAtCapacity) => (
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
/// Everything one job's task needs. Its events are reported inside the job's span.
struct JobRun {
    client: Arc<RunnerClient>,
    config: Arc<WorkerConfig>,
    shutdown: watch::Receiver<ShutdownState>,
    handed_back: Arc<AtomicBool>,
}

impl JobRun {
    async fn run(self, assignment: Assignment, permit: OwnedSemaphorePermit) -> JobReport {
        let mut output = None;
        let outcome = self.execute(&assignment, &mut output).await;
        drop(permit);
        JobReport {
            job_id: assignment.job_id().as_str().to_owned(),
            attempt: assignment.attempt().get(),
            outcome,
            output,
        }
    }

    /// Hands this job's claim back, so that the server requeues it now rather than after its
    /// lease; says what happened, for the job's report. Never fatal: if it fails the lease lapses.
    async fn hand_back(&self, assignment: &Assignment, why: &str) -> String {
        match self
            .client
            .release(assignment.claim_id().as_str(), why)
            .await
        {
            Ok(state) => {
                self.handed_back.store(true, Ordering::SeqCst);
                format!("handed back (the job is {state} now)")
            }
            Err(error) if error.code() == Some(ErrorCode::ClaimNotActive) => {
                "the claim was already over".to_owned()
            }
            Err(error) => format!("could not hand it back ({error}); its lease will lapse"),
        }
    }

    fn not_completed(&self, assignment: &Assignment, event: &str, reason: String) -> JobOutcome {
        error!(
            event,
            reason = reason.as_str(),
            "job {} (attempt {}): {reason}",
            assignment.job_id(),
            assignment.attempt()
        );
        JobOutcome::NotCompleted { reason }
    }

    async fn execute(
        &self,
        assignment: &Assignment,
        output: &mut Option<OutputFigures>,
    ) -> JobOutcome {
        let label = format!(
            "job {} (attempt {})",
            assignment.job_id(),
            assignment.attempt()
        );
        info!(
            event = "job.claimed",
            lease_expires_at = assignment.lease_expires_at.as_deref(),
            "{label}: claimed; envelope verified"
        );

        let (input_text, input) = match self.client.job_input(assignment.job_id()).await {
            Ok(input) => input,
            Err(error) => {
                let handed = self
                    .hand_back(assignment, "the runner cannot read the job input")
                    .await;
                return self.not_completed(
                    assignment,
                    "job.abandoned",
                    format!("cannot read the job input ({error}); {handed}"),
                );
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
                let handed = self
                    .hand_back(
                        assignment,
                        "the runner has no evaluation run to complete it with",
                    )
                    .await;
                return self.not_completed(
                    assignment,
                    "job.abandoned",
                    format!("{error}; {handed}"),
                );
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
                warn!(
                    event = "heartbeat.failed",
                    "{label}: first heartbeat failed ({error}); retrying on schedule"
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

        let job_dir = self.config.work_dir.create_job_dir(&format!(
            "{}-{}",
            sanitize(assignment.job_id().as_str()),
            assignment.attempt()
        ));
        let outcome = self
            .run_command(
                assignment,
                &heartbeat,
                &mut stream,
                job_dir.as_ref(),
                (&input, &input_text),
                output,
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
                self.finish_dir(job_dir.ok());
                return outcome;
            }
        };

        let (evidence, warning) = self
            .config
            .evidence
            .finish(&self.client, &prepared, assignment, status)
            .await;
        if let Some(warning) = warning {
            warn!(
                event = "evidence.partial",
                "{label}: could not record the outcome in the evaluation run: {warning}"
            );
        }
        if let Err(error) = stream.flush().await {
            warn!(
                event = "stream.unsettled",
                "{label}: the last chunk's delivery is unknown ({error})"
            );
        }
        let completion =
            assignment.completion(status, result_hash, stream.final_checksum(), evidence);
        let answer = self.client.complete(&completion).await;
        drop(heartbeat);
        self.finish_dir(job_dir.ok());
        match answer {
            Ok(answer) => {
                let message = format!(
                    "{label}: {} ({summary}); completion {}",
                    status.as_str(),
                    answer.decision.as_str()
                );
                if answer.is_settled() {
                    info!(
                        event = "job.completed",
                        status = status.as_str(),
                        decision = answer.decision.as_str(),
                        rationale = answer.rationale.as_str(),
                        completion_checksum = completion.checksum().as_str(),
                        chunks = stream.len(),
                        "{message}"
                    );
                } else {
                    warn!(
                        event = "job.completion_not_applied",
                        status = status.as_str(),
                        decision = answer.decision.as_str(),
                        rationale = answer.rationale.as_str(),
                        completion_checksum = completion.checksum().as_str(),
                        chunks = stream.len(),
                        "{message}: {}",
                        answer.rationale
                    );
                }
                JobOutcome::Completed {
                    status,
                    decision: answer.decision,
                }
            }
            Err(error) => {
                // Reported first; then, if the claim is still ours, it goes back to the queue
                // rather than holding this runner's capacity until its lease lapses.
                let handed = if is_claim_lost(&error) {
                    "the claim is over".to_owned()
                } else {
                    self.hand_back(
                        assignment,
                        &format!(
                            "the completion was refused: {}",
                            error.code_text().unwrap_or("error")
                        ),
                    )
                    .await
                };
                self.not_completed(
                    assignment,
                    "job.completion_failed",
                    format!(
                        "{} but the completion was refused: {error}; {handed}",
                        status.as_str()
                    ),
                )
            }
        }
    }

    /// Checks the inputs, runs the command and streams its output; says how to complete.
    async fn run_command(
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
            Err(reason) => {
                let note = json!({ "event": "refused", "reason": reason });
                let _ = stream.send(ChunkKind::Log, note).await;
                error!(
                    event = "job.inputs_refused",
                    reason = reason.as_str(),
                    "{label}: {reason}; not run"
                );
                return Prepared::Complete {
                    status: CompletionStatus::Failed,
                    result_hash: None,
                    summary: format!("not run: {reason}"),
                };
            }
        };

        let written = job_dir.map_err(|error| error.to_string()).and_then(|dir| {
            let input = dir.write_file("input.json", input_text.as_bytes());
            let artifact =
                dir.write_file("artifact.json", artifact["content"].to_string().as_bytes());
            // The job's TMPDIR: private, and removed with the job's directory.
            let tmp = dir
                .create_dir("tmp")
                .and_then(|tmp| match self.config.run_as {
                    Some(user) => dir.hand_to(user.uid, user.gid).map(|()| tmp),
                    None => Ok(tmp),
                });
            match (input, artifact, tmp) {
                (Ok(input), Ok(artifact), Ok(tmp)) => Ok((dir.path(), input, artifact, tmp)),
                (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
                    Err(format!("{}: {error}", dir.path().display()))
                }
            }
        });
        let (workdir, input_path, artifact_path, tmp_dir) = match written {
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
        let env = self.config.job_env.for_job(&tmp_dir, job_values);

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
        });
        let summary = describe(&outcome);
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

    /// Removes the job's directory, or keeps it when asked to.
    fn finish_dir(&self, job_dir: Option<JobDir>) {
        if let Some(dir) = job_dir.filter(|_| self.config.keep_work) {
            let path = dir.keep();
            info!(
                event = "job.dir_kept",
                path = %path.display(),
                "kept the job's directory {}",
                path.display()
            );
        }
    }
}

fn output_figures(outcome: &ExecOutcome, pumped: &PumpReport, upload: Duration) -> OutputFigures {
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

fn report_output(label: &str, output: &OutputFigures) {
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
