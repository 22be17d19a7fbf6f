//! `edgerunner runner start`: claim jobs up to capacity, run the command for each, stream its
//! output, complete with its result.
//!
//! # One job
//!
//! 1. The claim is verified by [`RunnerClient::claim`](crate::client::RunnerClient::claim) before anything else happens.
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
use std::time::Duration;

use edgerunner_protocol::state::CompletionStatus;
use tokio::time::Instant;

use crate::client::Decision;
use crate::evidence::EvidenceSource;
use crate::exec::RunAs;
use crate::heartbeat::HeartbeatConfig;
use crate::http::ClientError;
use crate::isolation::HostIsolation;
use crate::job_env::JobEnvironment;
use crate::stream::BatchLimits;
use crate::workdir::RunnerWorkDir;

mod claim_loop;
mod command;
mod job;

pub use claim_loop::Worker;
pub use command::{completion_status, result_hash, stop_request};

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
    /// Stop once no job has run for this long (from the start, and from the end of the last
    /// job): `--idle-exit`.
    pub idle_exit: Option<Duration>,
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
    /// The job launcher and what this host lets it enforce (`runner start` always has one);
    /// `None` runs commands unconfined, for a process that embeds the worker.
    pub isolation: Option<Isolation>,
}

/// How jobs are confined on this host: the launcher (this binary) and what the start-up probe
/// found it can enforce (see [`crate::isolation`]).
#[derive(Clone, Debug)]
pub struct Isolation {
    pub launcher: PathBuf,
    pub host: HostIsolation,
}

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
