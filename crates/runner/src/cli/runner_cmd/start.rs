//! `edgerunner runner start`: claim jobs up to capacity and run each.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use edgerunner_protocol::envelope::ServedTarget;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::stable_json::Sha256Hex;
use serde_json::Value;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{positive_seconds, seconds, IdentityArgs, Resolved, EVIDENCE_API_KEY};
use crate::cli::CliError;
use crate::client::RunnerClient;
use crate::evidence::{EvidenceApi, EvidenceSource};
use crate::exec::RunAs;
use crate::heartbeat::HeartbeatConfig;
use crate::http::{ClientError, Http};
use crate::isolation;
use crate::job_env::{self, JobEnvError, JobEnvironment, PassEnv};
use crate::report::{self, Format, LogLayer, Terminal};
use crate::stream::BatchLimits;
use crate::workdir::RunnerWorkDir;
use crate::worker::{Isolation, JobOutcome, Progress, ShutdownState, Worker, WorkerConfig};

#[derive(Debug, Args)]
pub struct StartArgs {
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// The shell command run for each job (`sh -c`), in the directory `runner start` was
    /// started in (so `./evaluate.sh` is found there), with EDGERUNNER_WORKDIR (the job's own
    /// private directory, for its files), EDGERUNNER_INPUT and EDGERUNNER_ARTIFACT (files in
    /// it), EDGERUNNER_JOB_ID, EDGERUNNER_CLAIM_ID and EDGERUNNER_ATTEMPT set. It starts from an
    /// empty environment: only PATH, LANG, LC_*, TZ, HOME and TMPDIR (private directories in
    /// EDGERUNNER_WORKDIR) and what --pass-env names; never the runner's credentials. It runs
    /// in a session of its own without a terminal, within the job's cpuSeconds and memoryMb
    /// (rlimits) and, for network deny_all, in a network namespace of its own; every process
    /// it starts ends with the job
    #[arg(long = "exec", value_name = "COMMAND")]
    pub command: String,
    /// A variable of the runner's environment jobs also get; repeatable (with the config
    /// file's "passEnv", at most 64). EVALGATE_*, EDGERUNNER_*, TMPDIR and HOME are refused: they are
    /// the runner's settings and credentials, and what it sets for each job itself
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Run each job's command as this OS user (uid and primary group), its job directory
    /// (with its HOME and TMPDIR) handed to it; only when the runner runs as root. The start directory and
    /// --work-dir must be reachable by that user
    #[arg(long, value_name = "USER")]
    pub run_as: Option<String>,
    /// Jobs at once [default: the runner's maxConcurrentJobs]
    #[arg(long)]
    pub capacity: Option<usize>,
    /// Seconds the server may hold a claim until a job is queued (a long poll, 0-25; 0 polls
    /// every --poll-interval instead)
    #[arg(long, default_value = "10", value_parser = clap::value_parser!(u32).range(0..=25))]
    pub wait_seconds: u32,
    /// Seconds between claims that found no job (after a long poll: only when it came back early)
    #[arg(long, default_value = "2", value_parser = seconds)]
    pub poll_interval: Duration,
    /// Seconds between heartbeats (how soon a cancellation is seen)
    #[arg(long, default_value = "5", value_parser = seconds)]
    pub heartbeat_interval: Duration,
    /// How far each heartbeat extends the lease (15-120 seconds)
    #[arg(long, default_value = "60", value_parser = clap::value_parser!(u32).range(lease_extension()))]
    pub lease_seconds: u32,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped
    #[arg(long, default_value = "10", value_parser = seconds)]
    pub grace: Duration,
    /// Stop claiming after this many claims
    #[arg(long)]
    pub max_jobs: Option<u64>,
    /// Exit once no job is queued for this runner and none is running
    #[arg(long)]
    pub exit_when_idle: bool,
    /// Take exactly one job, run it to its end and exit 0, whatever its outcome (one job at
    /// a time: a fresh process, and with a pool or a scaler a fresh machine, per job). SIGTERM
    /// while it runs drains or hands it back as always; with --idle-exit, exits 0 when none comes
    #[arg(long, conflicts_with_all = ["max_jobs", "capacity"])]
    pub ephemeral: bool,
    /// Exit 0 once no job has run for this many seconds, counted from the start and from the
    /// end of the last job (a runner that scales down by leaving)
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    pub idle_exit: Option<Duration>,
    /// Where this runner makes its private work directory (a fresh `edgerunner-<random>`,
    /// mode 0700) for job directories; refused when it or a directory above it is group- or
    /// world-writable without the sticky bit [default: $TMPDIR]
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep each job's directory (input.json, artifact.json, files it wrote)
    #[arg(long)]
    pub keep_work: bool,
    /// After SIGINT/SIGTERM, seconds to let running jobs finish before giving them back
    /// [default: until a second signal]
    #[arg(long, value_parser = seconds)]
    pub drain_timeout: Option<Duration>,
    /// Log lines per chunk, at most
    #[arg(long, default_value = "100000", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_lines: u32,
    /// Payload bytes per log chunk, at most (as the server counts them; its limit, 256 KiB
    /// per chunk, is the default)
    #[arg(long, default_value = "262144", value_parser = batch_bytes)]
    pub batch_bytes: usize,
    /// Milliseconds a log line may wait for its chunk
    #[arg(long, default_value = "250")]
    pub batch_millis: u64,
    /// A target version this process serves (VERSION_ID:CONTENT_HASH); repeatable. Jobs for
    /// other targets are refused before they run
    #[arg(long = "served-target", value_name = "VERSION_ID:CONTENT_HASH")]
    pub served_targets: Vec<String>,
    /// A file holding an API key with runs:write, used only to create each job's evaluation
    /// run when its input names none; `-` for standard input
    /// [default: $EDGERUNNER_EVIDENCE_API_KEY]
    #[arg(long, value_name = "FILE")]
    pub evidence_api_key_file: Option<PathBuf>,
    /// Refused: use EDGERUNNER_EVIDENCE_API_KEY or --evidence-api-key-file
    #[arg(long, hide = true)]
    pub evidence_api_key: Option<String>,
    /// The evaluationId runs created with --evidence-api-key are filed under
    #[arg(long)]
    pub evaluation_id: Option<String>,
    /// The job input field that names a pre-created evaluation run
    #[arg(long, default_value = "evaluationRunId")]
    pub evaluation_run_field: String,
}

/// The `--run-as` user's ids. Only root may run commands as another user, and
/// running them as root would give them the runner's every file.
fn run_as_user(name: &str) -> Result<RunAs, CliError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(CliError::Usage(format!(
            "--run-as {name}: only a runner running as root can run jobs as another user"
        )));
    }
    let user = nix::unistd::User::from_name(name)
        .map_err(|error| CliError::Failed(format!("--run-as {name}: {error}")))?
        .ok_or_else(|| CliError::Usage(format!("--run-as {name}: no such user")))?;
    if user.uid.is_root() {
        return Err(CliError::Usage(format!(
            "--run-as {name}: that is root, the runner's own user; name an unprivileged one"
        )));
    }
    Ok(RunAs {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    })
}

/// The job launcher (this binary) and what it can enforce here, tried once at start and
/// logged: a host without network namespaces refuses `network: deny_all` jobs rather than run
/// them open.
fn probe_isolation() -> Result<Isolation, CliError> {
    let launcher = std::env::current_exe().map_err(|error| {
        CliError::Failed(format!(
            "cannot find this binary, which launches each job: {error}"
        ))
    })?;
    let host = isolation::probe(&launcher);
    let enforced = host.to_value();
    if host.network_namespace {
        info!(event = "runner.isolation", enforced = %enforced, "jobs are confined: {enforced}");
    } else {
        warn!(
            event = "runner.isolation",
            enforced = %enforced,
            "this host gives jobs no network namespace (it needs root or unprivileged user \
             namespaces): jobs whose requirements say network deny_all are refused, not run \
             open; enforced: {enforced}"
        );
    }
    Ok(Isolation { launcher, host })
}

/// Where the runner's record says what it enforces: a file of its own on the server, which
/// an admin reads (`GET /api/remote-runners/{id}/files/isolation.json`).
const ISOLATION_FILE: &str = "/api/remote-runners/self/files/isolation.json";

/// Puts what this host enforces in the runner's record; a failure is logged, never fatal.
async fn record_isolation(client: &RunnerClient, http: &Http, host: &isolation::HostIsolation) {
    let put = async {
        let session = client.session().await?;
        http.send(
            reqwest::Method::PUT,
            ISOLATION_FILE,
            Some(session.token()),
            Some(&host.to_value()),
        )
        .await
    };
    if let Err(error) = put.await {
        warn!(
            event = "runner.isolation_unrecorded",
            "could not record what this runner enforces in its record ({ISOLATION_FILE}): {error}"
        );
    }
}

fn parse_served_target(text: &str) -> Result<ServedTarget, CliError> {
    let bad = || {
        CliError::Input(format!(
            "--served-target {text:?} is not VERSION_ID:CONTENT_HASH"
        ))
    };
    let (version, hash) = text.split_once(':').ok_or_else(bad)?;
    Ok(ServedTarget {
        version_id: version.parse().map_err(|_| bad())?,
        content_hash: Sha256Hex::parse(hash).map_err(|_| bad())?,
    })
}

fn usage(error: JobEnvError) -> CliError {
    CliError::Usage(error.to_string())
}

fn batch_bytes(text: &str) -> Result<usize, String> {
    let bytes: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of bytes"))?;
    let range = 1024..=BatchLimits::MAX_BYTES;
    if range.contains(&bytes) {
        Ok(bytes)
    } else {
        Err(format!(
            "{bytes} is outside {}..={} bytes",
            range.start(),
            range.end()
        ))
    }
}

pub(super) async fn run(args: StartArgs) -> Result<ExitCode, CliError> {
    // A job runs as this user unless --run-as says otherwise, and a process may read its own
    // user's processes: the runner's environment (its bootstrap token) in /proc/<pid>/environ,
    // its memory (the session credential, the job-signing secret) through ptrace. A process
    // that is not dumpable is closed to them; the flag is not inherited across exec, so jobs
    // are unaffected.
    #[cfg(target_os = "linux")]
    nix::sys::prctl::set_dumpable(false).map_err(|error| {
        CliError::Failed(format!(
            "cannot close this process to its jobs (prctl PR_SET_DUMPABLE): {error}"
        ))
    })?;
    let evidence_api_key = EVIDENCE_API_KEY.read(
        args.evidence_api_key_file.as_deref(),
        args.evidence_api_key.as_deref(),
    )?;
    if args.heartbeat_interval.is_zero()
        || args.heartbeat_interval * 2 > Duration::from_secs(u64::from(args.lease_seconds))
    {
        return Err(CliError::Input(format!(
            "--heartbeat-interval {:?} must be above zero and at most half of --lease-seconds {}, \
             or one late heartbeat loses the lease",
            args.heartbeat_interval, args.lease_seconds
        )));
    }
    let format = args.identity.log_format.resolve();
    let terminal = Terminal::stderr();
    report::install(
        LogLayer::new(format, terminal.clone()),
        report::env_filter().map_err(CliError::Input)?,
    )
    .map_err(CliError::Failed)?;
    let exec_dir = std::env::current_dir().map_err(|error| {
        CliError::Failed(format!(
            "cannot tell the current directory, where --exec runs: {error}"
        ))
    })?;
    let Resolved {
        client,
        model,
        config_path,
        pass_env,
        key_file,
        mut secrets,
    } = args.identity.resolve()?;
    let job_env = {
        let pass = PassEnv::parse(args.pass_env.iter().chain(&pass_env)).map_err(usage)?;
        secrets.extend(evidence_api_key.clone());
        secrets.extend(std::env::var("EDGERUNNER_API_KEY").ok());
        // `runner enroll` reads it; one left in the environment is still a secret.
        secrets.extend(std::env::var("EDGERUNNER_ENROLLMENT_TOKEN").ok());
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        JobEnvironment::new(std::env::vars_os(), &pass, &secrets).map_err(usage)?
    };
    // Each job's HOME is its own (in its directory), never the --run-as user's shared one.
    let run_as = args.run_as.as_deref().map(run_as_user).transpose()?;
    let isolation = probe_isolation()?;
    isolation::adopt_strays().map_err(CliError::Failed)?;
    job_env::check_files_outside(
        &exec_dir,
        &[
            ("config file", config_path.as_path()),
            ("key file", key_file.as_deref().unwrap_or(Path::new(""))),
        ],
    )
    .map_err(|error| CliError::Failed(error.to_string()))?;
    if !job_env.missing().is_empty() {
        warn!(
            event = "runner.pass_env_unset",
            "--pass-env names what this runner's environment does not have, so jobs do not get \
             it: {}",
            job_env.missing().join(", ")
        );
    }
    let served = args
        .served_targets
        .iter()
        .map(|text| parse_served_target(text))
        .collect::<Result<Vec<_>, _>>()?;
    let http = client.http().clone();
    let client = Arc::new(client.with_served_targets(served));

    let (shutdown_sender, shutdown) = watch::channel(ShutdownState::Running);
    let signals = spawn_signal_handler(shutdown_sender, args.drain_timeout)?;

    let Some(record) = connect(&client, model, shutdown.clone(), args.poll_interval).await? else {
        signals.abort();
        return Ok(ExitCode::SUCCESS);
    };
    record_isolation(&client, &http, &isolation.host).await;
    let capacity = match (args.ephemeral, args.capacity) {
        (true, _) => 1,
        (false, Some(capacity)) => capacity,
        (false, None) => record["maxConcurrentJobs"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(1),
    };
    let work_parent = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let work_dir = RunnerWorkDir::create_in(&work_parent)
        .map_err(|error| CliError::Failed(error.to_string()))?;
    if run_as.is_some() {
        work_dir.allow_passing_through().map_err(|error| {
            CliError::Failed(format!(
                "cannot open {} to the --run-as user: {error}",
                work_dir.path().display()
            ))
        })?;
    }
    let evidence = EvidenceSource {
        input_field: Some(args.evaluation_run_field.clone()).filter(|f| !f.is_empty()),
        api: evidence_api_key.as_deref().map(|key| EvidenceApi {
            http: http.clone(),
            api_key: Arc::from(key),
            evaluation_id: args.evaluation_id.clone(),
        }),
    };
    let runner_id = record["id"].as_str().unwrap_or("?");
    info!(
        event = "runner.started",
        runner_id,
        identity_model = model,
        capacity,
        command = args.command.as_str(),
        exec_dir = %exec_dir.display(),
        evidence = if evidence.api.is_some() { "api-key" } else { "input-field" },
        job_env = job_env.names().join(",").as_str(),
        "runner {runner_id} ({model}) claiming up to {capacity} job(s) at once; running `{}` \
         in {} per job",
        args.command,
        exec_dir.display()
    );
    let worker = Worker::new(
        Arc::clone(&client),
        WorkerConfig {
            command: args.command.clone(),
            exec_dir,
            capacity,
            poll_interval: args.poll_interval,
            claim_wait: args.wait_seconds,
            heartbeat: HeartbeatConfig {
                interval: args.heartbeat_interval,
                extend_seconds: args.lease_seconds,
            },
            grace: args.grace,
            max_jobs: if args.ephemeral {
                Some(1)
            } else {
                args.max_jobs
            },
            exit_when_idle: args.exit_when_idle,
            idle_exit: args.idle_exit,
            work_dir: work_dir.clone(),
            keep_work: args.keep_work,
            batch: BatchLimits {
                max_lines: usize::try_from(args.batch_lines).unwrap_or(usize::MAX),
                max_bytes: args.batch_bytes,
                max_delay: Duration::from_millis(args.batch_millis),
            },
            evidence,
            job_env,
            run_as,
            isolation: Some(isolation),
        },
    );
    // A status line only where a person watches: human lines on a terminal.
    let status = (format == Format::Human && std::io::stderr().is_terminal())
        .then(|| tokio::spawn(show_status(terminal.clone(), worker.progress())));
    let summary = worker.run(shutdown).await;
    if let Some(status) = status {
        status.abort();
        terminal.clear_status();
    }
    signals.abort();
    if !args.keep_work {
        work_dir.remove_if_empty();
    }
    let count = |wanted: &str| {
        summary
            .jobs
            .iter()
            .filter(|job| match &job.outcome {
                JobOutcome::Completed { status, .. } => status.as_str() == wanted,
                JobOutcome::NotCompleted { .. } => wanted == "not_completed",
            })
            .count()
    };
    info!(
        event = "runner.stopped",
        claimed = summary.claimed,
        refused = summary.refused,
        succeeded = count("succeeded"),
        failed = count("failed"),
        cancelled = count("cancelled"),
        not_completed = count("not_completed"),
        "stopped: {} claimed, {} refused, {} succeeded, {} failed, {} cancelled, {} not completed",
        summary.claimed,
        summary.refused,
        count("succeeded"),
        count("failed"),
        count("cancelled"),
        count("not_completed"),
    );
    match summary.fatal {
        Some(_) => Err(CliError::Reported),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Exchanges the first session (waiting while an admin has not approved a key-pair runner)
/// and reads the runner's record. `None` when shutdown was asked for while waiting.
/// Redraws the status line when the progress changes, and every second for the idle time.
async fn show_status(terminal: Terminal, mut progress: watch::Receiver<Progress>) {
    loop {
        let line = progress.borrow_and_update().summary(Instant::now());
        terminal.show_status(&line);
        tokio::select! {
            changed = progress.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// How often a key-pair runner waiting for approval tries a session: at most 12 failed
/// exchanges a minute, under the server's default of 20 per network.
const PENDING_POLL: Duration = Duration::from_secs(5);

async fn connect(
    client: &RunnerClient,
    model: &str,
    mut shutdown: watch::Receiver<ShutdownState>,
    poll: Duration,
) -> Result<Option<Value>, CliError> {
    let mut waiting_reported = false;
    let poll = poll.clamp(Duration::from_secs(1), Duration::from_secs(10));
    let fingerprint = client.credentials().fingerprint().map(|f| f.to_string());
    loop {
        let mut wait = poll;
        match client.whoami().await {
            Ok(record) => return Ok(Some(record)),
            // The server answers a key that is not approved (yet, or any more) exactly as it
            // answers an unknown one: a `401` from the session exchange, which tells a
            // stranger nothing. This runner knows it enrolled, so it keeps trying; each try
            // is a failed session its network is rate-limited on, hence the slower pace.
            Err(error)
                if fingerprint.is_some()
                    && (error.status() == Some(401)
                        || error.code() == Some(ErrorCode::RunnerPendingApproval)) =>
            {
                wait = poll.max(PENDING_POLL);
                if !waiting_reported {
                    let fingerprint = fingerprint.as_deref().unwrap_or_default();
                    warn!(
                        event = "runner.pending_approval",
                        fingerprint,
                        "waiting for an admin to approve this runner (fingerprint {fingerprint}); \
                         if it was revoked, enroll a new key"
                    );
                    waiting_reported = true;
                }
            }
            Err(error) if error.is_transient() => warn!(
                event = "runner.unreachable",
                "cannot reach the server yet: {error}"
            ),
            Err(error) => {
                return Err(CliError::Failed(format!(
                    "cannot connect as a {model} runner: {}",
                    explain(&error)
                )))
            }
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() != ShutdownState::Running {
                return Ok(None);
            },
        }
    }
}

fn explain(error: &ClientError) -> String {
    match (error.status(), error.code()) {
        (Some(401), _) => format!(
            "{error} (check EVALGATE_RUNNER_ID and EVALGATE_RUNNER_BOOTSTRAP_TOKEN: the token may \
             have been rotated, or the runner revoked)"
        ),
        (_, Some(ErrorCode::RunnerRevoked)) => {
            format!("{error} (revocation is permanent: enroll a new identity)")
        }
        _ => error.to_string(),
    }
}

/// First SIGINT/SIGTERM: drain (no new claims; running jobs finish). Second signal, or the
/// drain timeout: give running jobs back.
fn spawn_signal_handler(
    shutdown: watch::Sender<ShutdownState>,
    drain_timeout: Option<Duration>,
) -> Result<tokio::task::JoinHandle<()>, CliError> {
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|error| CliError::Failed(format!("cannot watch SIGINT: {error}")))?;
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|error| CliError::Failed(format!("cannot watch SIGTERM: {error}")))?;
    Ok(tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        info!(
            event = "runner.draining",
            "shutting down: no new claims; running jobs finish (signal again to give them back)"
        );
        shutdown.send_replace(ShutdownState::Draining);
        let timeout = async {
            match drain_timeout {
                Some(timeout) => tokio::time::sleep(timeout).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
            () = timeout => {}
        }
        info!(
            event = "runner.giving_back",
            "giving back running jobs: stopping them and handing their claims back; the server \
             requeues them at once"
        );
        shutdown.send_replace(ShutdownState::GivingBack);
        // Keep the sender alive so receivers see the final state rather than a closed channel.
        std::future::pending::<()>().await;
    }))
}

/// The protocol's bounds on one heartbeat's extension, as `clap` reads a range.
fn lease_extension() -> std::ops::RangeInclusive<i64> {
    let bounds = edgerunner_protocol::recovery::LEASE_EXTENSION_SECONDS;
    i64::from(*bounds.start())..=i64::from(*bounds.end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_targets_parse_version_and_hash() {
        let hash = "a".repeat(64);
        let target = parse_served_target(&format!("7:{hash}")).expect("parsed");
        assert_eq!(target.version_id, 7);
        assert!(parse_served_target("7").is_err());
        assert!(parse_served_target("x:abc").is_err());
    }
}
