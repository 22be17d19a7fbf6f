//! Running one job's command.
//!
//! The command runs as `sh -c '<command>'` in [`ExecSpec::current_dir`] (for `runner start`, the
//! directory it was started in), with [`ExecSpec::env`] as its whole environment (nothing of the
//! runner's is inherited: [`crate::job_env`] says what is given), with stdin closed and stdout
//! and stderr read line by line. The runner starts it through the job launcher
//! ([`ExecSpec::launcher`], see [`crate::isolation`]): a session of its own with no terminal,
//! the job's limits and network confinement, its cgroups where the host allows them, and a
//! subreaper that kills whatever the job leaves behind, `setsid` or double fork included. Stopping it — wall time exceeded,
//! cancellation requested, claim lost, runner giving work back — always goes the same way:
//! `SIGTERM` to the session's process group, [`ExecSpec::grace`] to exit, then `SIGKILL` to
//! every process under the launcher. When the shell itself exits, the launcher kills what is
//! left, so that no stray process outlives its job or keeps writing into its pipes; the runner
//! then ends the job's cgroups ([`crate::cgroup::end`]): whatever is still in them is killed and
//! they are removed.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use edgerunner_protocol::stable_json::Sha256Hex;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::cgroup;
use crate::isolation::{self, kill_descendants, Confinement};
use crate::stream::{LogLine, OutputStream};

/// What to run and within which bounds.
#[derive(Clone, Debug)]
pub struct ExecSpec {
    /// Given to `sh -c`.
    pub command: String,
    /// The command's whole environment: the runner's own is not inherited.
    pub env: Vec<(String, OsString)>,
    /// The command's current directory.
    pub current_dir: PathBuf,
    /// Stop the command after this long (the job's `limits.wallSeconds`).
    pub wall_limit: Option<Duration>,
    /// How long a stopped command has between `SIGTERM` and `SIGKILL`.
    pub grace: Duration,
    /// Another OS user to run the command as (the runner must be root).
    pub run_as: Option<RunAs>,
    /// The `edgerunner` binary that launches the command confined (see [`crate::isolation`]);
    /// `None` runs `sh` directly in a process group of its own, unconfined (for tests of
    /// this module alone).
    pub launcher: Option<PathBuf>,
    /// Limits and network confinement the launcher applies (`run_as` is added from above).
    pub confinement: Confinement,
}

/// The OS user a command runs as instead of the runner's (`runner start --run-as`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    /// The user's primary group; supplementary groups are dropped (the standard library's
    /// `setgroups(0)` before `setuid`).
    pub gid: u32,
}

/// Why a command must stop before it is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopRequest {
    /// The job's cancellation was requested (reason as the operator gave it).
    Cancel { reason: Option<String> },
    /// The claim is no longer this runner's.
    Lost { reason: String },
    /// The runner is shutting down and gives the job back.
    Shutdown,
}

/// How the command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// On its own.
    Exited,
    /// Stopped at the wall-time limit.
    WallTimeExceeded,
    /// Killed by the kernel at its CPU-time limit (`SIGXCPU`, or `SIGKILL` a second later,
    /// under `RLIMIT_CPU`).
    CpuTimeExceeded,
    /// Stopped on request.
    Stopped(StopRequest),
}

impl Ending {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Exited => "exited",
            Self::WallTimeExceeded => "wall_time_exceeded",
            Self::CpuTimeExceeded => "cpu_time_exceeded",
            Self::Stopped(StopRequest::Cancel { .. }) => "cancelled",
            Self::Stopped(StopRequest::Lost { .. }) => "claim_lost",
            Self::Stopped(StopRequest::Shutdown) => "given_back",
        }
    }
}

/// What running the command produced.
#[derive(Clone, Debug)]
pub struct ExecOutcome {
    pub ending: Ending,
    /// The exit code, when the command exited rather than died of a signal.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Whether it had to be killed after the grace period.
    pub killed: bool,
    /// SHA-256 of everything it wrote to stdout.
    pub stdout_sha256: Sha256Hex,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Whether the command's stderr said an allocation failed (see [`says_allocation_failed`]).
    pub allocation_failed: bool,
    /// Processes of the job the kernel killed at its cgroup's memory limit.
    pub oom_kills: u64,
    pub elapsed: Duration,
}

/// Why the command could not be run at all.
#[derive(Debug)]
pub struct ExecError(pub String);

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ExecError {}

/// Runs `spec`, sending each output line to `lines`, until the command ends or `stop` asks it
/// to. `lines` closes when this returns.
pub async fn run(
    spec: &ExecSpec,
    lines: mpsc::Sender<LogLine>,
    mut stop: watch::Receiver<Option<StopRequest>>,
) -> Result<ExecOutcome, ExecError> {
    let started = Instant::now();
    let mut command = match &spec.launcher {
        Some(launcher) => {
            let mut confinement = spec.confinement.clone();
            confinement.run_as = spec.run_as.map(|user| (user.uid, user.gid));
            let mut command = Command::new(launcher);
            // The launcher makes its own session (and so its own group, whose id is its pid).
            command.args(confinement.to_args()).arg("sh");
            command
        }
        None => {
            let mut command = Command::new("sh");
            if let Some(user) = spec.run_as {
                command.uid(user.uid).gid(user.gid);
            }
            command.process_group(0);
            command
        }
    };
    command
        .arg("-c")
        .arg(&spec.command)
        // A job must not read the runner's credentials out of its environment.
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_os_str())))
        .current_dir(&spec.current_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let spawned = match spec.launcher {
        Some(_) => isolation::spawn_launcher(|| command.spawn(), Child::id),
        None => command.spawn(),
    };
    let mut child = spawned.map_err(|error| {
        ExecError(format!(
            "cannot start `sh -c {:?}` in {}: {error}",
            spec.command,
            spec.current_dir.display()
        ))
    })?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| ExecError("the command exited before it could be watched".into()))?;
    // Should this future be dropped mid-run, the job's processes go before the launcher does
    // (`kill_on_drop` kills only the launcher, which would orphan them).
    let cgroups = match spec.launcher {
        Some(_) => spec.confinement.cgroups.clone(),
        None => Vec::new(),
    };
    let mut sweep = SweepOnDrop {
        launcher: spec.launcher.is_some().then_some(group),
        cgroups: cgroups.clone(),
    };

    let stdout = child
        .stdout
        .take()
        .map(|out| tokio::spawn(read_lines(out, OutputStream::Stdout, lines.clone(), true)));
    let stderr = child
        .stderr
        .take()
        .map(|err| tokio::spawn(read_lines(err, OutputStream::Stderr, lines.clone(), false)));
    let launched = spec.launcher.is_some();
    drop(lines);

    let deadline = spec.wall_limit.map(|limit| started + limit);
    let wall = async {
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    let requested = async {
        let request = stop
            .wait_for(Option::is_some)
            .await
            .map(|request| request.clone());
        match request {
            Ok(request) => request,
            // The sender is gone: nobody can ask any more.
            Err(_) => std::future::pending().await,
        }
    };
    let (status, ending, killed) = tokio::select! {
        status = child.wait() => (status, Ending::Exited, false),
        () = wall => {
            let (status, killed) = terminate(&mut child, group, spec.grace, launched).await;
            (status, Ending::WallTimeExceeded, killed)
        }
        request = requested => {
            let (status, killed) = terminate(&mut child, group, spec.grace, launched).await;
            (status, Ending::Stopped(request.unwrap_or(StopRequest::Shutdown)), killed)
        }
    };
    // The launcher has been waited for: its pid is free for reuse, so nothing may be
    // signalled by it any more; what a job left after killing its launcher is ended now.
    sweep.disarm();
    if launched {
        isolation::launcher_ended(group);
    }
    let ended = if cgroups.is_empty() {
        cgroup::Ended::default()
    } else {
        tokio::task::spawn_blocking(move || cgroup::end(&cgroups))
            .await
            .unwrap_or_default()
    };
    if !ended.left.is_empty() {
        tracing::warn!(
            event = "runner.cgroup_left",
            "a job's cgroups could not be removed (a process in them outlived every kill): {:?}",
            ended.left
        );
    }
    let status = status.map_err(|error| ExecError(format!("waiting for the command: {error}")))?;
    // Sweep what the shell left in its group; ESRCH (nothing left) is the usual answer. (The
    // launcher has already killed everything under it, in any group or session.)
    if !launched {
        let _ = killpg(group, Signal::SIGKILL);
    }
    let elapsed = started.elapsed();

    let (stdout_bytes, stdout_sha256, _) = match stdout {
        Some(task) => finish_reader(task).await,
        None => (0, Sha256Hex::from_digest(Sha256::digest(b"").into()), false),
    };
    let (stderr_bytes, _, allocation_failed) = match stderr {
        Some(task) => finish_reader(task).await,
        None => (0, Sha256Hex::from_digest(Sha256::digest(b"").into()), false),
    };
    // SIGXCPU comes only from RLIMIT_CPU; a SIGKILL the runner did not send is the kernel's
    // hard limit a second later only when enough time has passed for it (a job that kills
    // itself sooner is not said to have reached the limit).
    let cpu_killed = status.signal() == Some(Signal::SIGXCPU as i32)
        || (status.signal() == Some(Signal::SIGKILL as i32)
            && !killed
            && spec
                .confinement
                .cpu_seconds
                .is_some_and(|seconds| started.elapsed() >= Duration::from_secs(seconds)));
    let ending = match ending {
        Ending::Exited if launched && cpu_killed => Ending::CpuTimeExceeded,
        other => other,
    };
    Ok(ExecOutcome {
        ending,
        exit_code: status.code(),
        signal: status.signal(),
        killed,
        stdout_sha256,
        stdout_bytes,
        stderr_bytes,
        allocation_failed,
        oom_kills: ended.oom_kills,
        elapsed,
    })
}

/// Kills every process under the launcher, and ends the job's cgroups, when dropped before the
/// command was waited for.
struct SweepOnDrop {
    launcher: Option<Pid>,
    cgroups: Vec<PathBuf>,
}

impl SweepOnDrop {
    /// Once the launcher is reaped its pid may name another process: never signal by it (the
    /// caller ends the cgroups itself).
    fn disarm(&mut self) {
        self.launcher = None;
        self.cgroups.clear();
    }
}

impl Drop for SweepOnDrop {
    fn drop(&mut self) {
        if let Some(launcher) = self.launcher.take() {
            let _ = kill_descendants(launcher);
        }
        if !self.cgroups.is_empty() {
            cgroup::end(&self.cgroups);
        }
    }
}

/// `SIGTERM` to the group, `grace` to exit, then `SIGKILL`: to every process under the
/// launcher (which then reaps them and exits as its shell did), or to the group when there is
/// no launcher. Returns the status and whether the kill was needed.
async fn terminate(
    child: &mut Child,
    group: Pid,
    grace: Duration,
    launched: bool,
) -> (std::io::Result<ExitStatus>, bool) {
    let _ = killpg(group, Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => (status, false),
        Err(_) if launched => {
            kill_descendants(group);
            match tokio::time::timeout(LAUNCHER_SWEEP, child.wait()).await {
                Ok(status) => (status, true),
                // A launcher that does not finish its sweep: all of it, by force.
                Err(_) => {
                    kill_descendants(group);
                    let _ = killpg(group, Signal::SIGKILL);
                    (child.wait().await, true)
                }
            }
        }
        Err(_) => {
            let _ = killpg(group, Signal::SIGKILL);
            (child.wait().await, true)
        }
    }
}

/// How long a launcher has to reap its killed job and exit.
const LAUNCHER_SWEEP: Duration = Duration::from_secs(5);

/// Lines on stderr that say an allocation failed, as common runtimes word it (Python,
/// `strerror(ENOMEM)`, coreutils, C++, Rust, Node.js, Go). Matched case-insensitively.
const ALLOCATION_FAILED: [&str; 7] = [
    "memoryerror",
    "cannot allocate memory",
    "memory exhausted",
    "std::bad_alloc",
    "memory allocation of",
    "heap out of memory",
    "out of memory",
];

/// Whether a line of stderr says an allocation failed (see [`ALLOCATION_FAILED`]).
pub fn says_allocation_failed(line: &[u8]) -> bool {
    let line = String::from_utf8_lossy(line).to_ascii_lowercase();
    ALLOCATION_FAILED.iter().any(|marker| line.contains(marker))
}

/// Bytes read, their SHA-256, and whether a line said an allocation failed.
type ReaderResult = (u64, Sha256Hex, bool);

async fn finish_reader(task: tokio::task::JoinHandle<ReaderResult>) -> ReaderResult {
    // The group is dead, so its pipes close; a process that left the group (setsid) could keep
    // one open, and is not waited for beyond a few seconds.
    let abort = task.abort_handle();
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(result)) => result,
        _ => {
            abort.abort();
            (0, Sha256Hex::from_digest(Sha256::digest(b"").into()), false)
        }
    }
}

/// The most bytes of one line held in memory; a longer line is forwarded in pieces of this
/// size (each then cut to [`crate::stream::MAX_LINE_BYTES`] in its chunk).
const MAX_PENDING_LINE: usize = 64 * 1024;

/// Reads `pipe` to its end, line by line; hashes the bytes when `hash` is set (stdout), looks
/// for a failed allocation when it is not (stderr).
async fn read_lines(
    pipe: impl AsyncRead + Unpin,
    stream: OutputStream,
    lines: mpsc::Sender<LogLine>,
    hash: bool,
) -> ReaderResult {
    let mut reader = BufReader::new(pipe);
    let mut digest = Sha256::new();
    let mut total: u64 = 0;
    let mut pending: Vec<u8> = Vec::new();
    let mut allocation_failed = false;
    loop {
        let available = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(available) => available,
        };
        let (taken, complete) = match available.iter().position(|&b| b == b'\n') {
            Some(newline) => (newline + 1, true),
            None => (available.len().min(MAX_PENDING_LINE - pending.len()), false),
        };
        if hash {
            digest.update(&available[..taken]);
        }
        pending.extend_from_slice(&available[..taken]);
        reader.consume(taken);
        total += taken as u64;
        if complete || pending.len() >= MAX_PENDING_LINE {
            allocation_failed |= !hash && says_allocation_failed(&pending);
            forward(&mut pending, stream, &lines).await;
        }
    }
    if !pending.is_empty() {
        allocation_failed |= !hash && says_allocation_failed(&pending);
        forward(&mut pending, stream, &lines).await;
    }
    (
        total,
        Sha256Hex::from_digest(digest.finalize().into()),
        allocation_failed,
    )
}

/// Sends `pending` as one line (without its newline) and empties it.
async fn forward(pending: &mut Vec<u8>, stream: OutputStream, lines: &mpsc::Sender<LogLine>) {
    let mut text = &pending[..];
    if let Some(rest) = text.strip_suffix(b"\n") {
        text = rest.strip_suffix(b"\r").unwrap_or(rest);
    }
    let line = LogLine {
        stream,
        line: String::from_utf8_lossy(text).into_owned(),
    };
    pending.clear();
    // A closed receiver only means nobody forwards lines any more; keep draining the pipe.
    let _ = lines.send(line).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str) -> ExecSpec {
        ExecSpec {
            command: command.to_owned(),
            env: vec![
                ("GREETING".into(), "hello".into()),
                ("PATH".into(), std::env::var_os("PATH").unwrap_or_default()),
            ],
            current_dir: std::env::temp_dir(),
            wall_limit: None,
            grace: Duration::from_millis(300),
            run_as: None,
            launcher: None,
            confinement: Confinement::default(),
        }
    }

    async fn collect(
        spec: ExecSpec,
        stop: watch::Receiver<Option<StopRequest>>,
    ) -> (ExecOutcome, Vec<LogLine>) {
        let (tx, mut rx) = mpsc::channel(64);
        let collector = tokio::spawn(async move {
            let mut all = Vec::new();
            while let Some(line) = rx.recv().await {
                all.push(line);
            }
            all
        });
        let outcome = run(&spec, tx, stop).await.expect("runs");
        (outcome, collector.await.expect("collector"))
    }

    #[test]
    fn allocation_failures_are_told_by_what_runtimes_print() {
        for line in [
            "MemoryError",
            "tail: memory exhausted",
            "bash: fork: Cannot allocate memory",
            "terminate called after throwing an instance of 'std::bad_alloc'",
            "memory allocation of 1073741824 bytes failed",
            "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory",
            "fatal error: runtime: out of memory",
        ] {
            assert!(says_allocation_failed(line.as_bytes()), "{line}");
        }
        for line in ["memory: 12 MB used", "allocated 300 MB", ""] {
            assert!(!says_allocation_failed(line.as_bytes()), "{line}");
        }
    }

    #[tokio::test]
    async fn output_lines_exit_code_and_stdout_hash() {
        let (_keep, stop) = watch::channel(None);
        let (outcome, lines) = collect(
            spec("echo \"$GREETING\"; echo oops >&2; printf 'no newline'; exit 3"),
            stop,
        )
        .await;
        assert_eq!(outcome.ending, Ending::Exited);
        assert_eq!(outcome.exit_code, Some(3));
        assert_eq!(
            outcome.stdout_sha256,
            Sha256Hex::from_digest(Sha256::digest(b"hello\nno newline").into())
        );
        assert_eq!(outcome.stdout_bytes, 16);
        let stdout: Vec<&str> = lines
            .iter()
            .filter(|l| l.stream == OutputStream::Stdout)
            .map(|l| l.line.as_str())
            .collect();
        assert_eq!(stdout, ["hello", "no newline"]);
        assert!(lines
            .iter()
            .any(|l| l.stream == OutputStream::Stderr && l.line == "oops"));
    }

    #[tokio::test]
    async fn the_command_inherits_nothing_of_the_runners_environment() {
        // cargo runs tests with CARGO_* and HOME set; none of them may reach the command.
        assert!(std::env::vars_os().any(|(name, _)| name == "CARGO_PKG_NAME" || name == "HOME"));
        let (_keep, stop) = watch::channel(None);
        let (outcome, lines) = collect(spec("env"), stop).await;
        assert_eq!(outcome.exit_code, Some(0));
        let names: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.line.split_once('=').map(|(name, _)| name))
            .collect();
        assert!(names.contains(&"GREETING"), "{names:?}");
        // What the shell itself sets is all there may be besides.
        for name in names {
            assert!(
                ["GREETING", "PATH", "PWD", "SHLVL", "_", "OLDPWD"].contains(&name),
                "{name} was inherited"
            );
        }
    }

    #[tokio::test]
    async fn the_command_runs_in_the_given_directory_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().expect("scratch");
        std::fs::write(dir.path().join("evaluate.sh"), "echo evaluated\n").expect("script");
        let (_keep, stop) = watch::channel(None);
        let mut here = spec("pwd; sh ./evaluate.sh");
        here.current_dir = dir.path().to_owned();
        let (outcome, lines) = collect(here, stop.clone()).await;
        assert_eq!(outcome.exit_code, Some(0));
        let printed: Vec<&str> = lines.iter().map(|l| l.line.as_str()).collect();
        let canonical = dir.path().canonicalize().expect("canonical");
        assert_eq!(printed, [canonical.to_str().expect("UTF-8"), "evaluated"]);

        let mut gone = spec("true");
        gone.current_dir = dir.path().join("missing");
        let (tx, _rx) = mpsc::channel(1);
        let error = run(&gone, tx, stop).await.expect_err("no such directory");
        assert!(error.to_string().contains("missing"), "{error}");
    }

    #[tokio::test]
    async fn a_line_without_end_is_forwarded_in_bounded_pieces_and_hashed_whole() {
        let (_keep, stop) = watch::channel(None);
        let (outcome, lines) = collect(spec("head -c 200000 /dev/zero | tr '\\0' x"), stop).await;
        assert_eq!(outcome.stdout_bytes, 200_000);
        assert_eq!(
            outcome.stdout_sha256,
            Sha256Hex::from_digest(Sha256::digest(vec![b'x'; 200_000]).into())
        );
        assert!(lines.iter().all(|l| l.line.len() <= MAX_PENDING_LINE));
        assert_eq!(lines.iter().map(|l| l.line.len()).sum::<usize>(), 200_000);
    }

    #[tokio::test]
    async fn the_wall_time_limit_terminates_the_whole_group() {
        let (_keep, stop) = watch::channel(None);
        let mut spec = spec("sleep 30 & sleep 30; echo never");
        spec.wall_limit = Some(Duration::from_millis(300));
        let started = Instant::now();
        let (outcome, lines) = collect(spec, stop).await;
        assert_eq!(outcome.ending, Ending::WallTimeExceeded);
        assert_eq!(outcome.signal, Some(15));
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(lines.iter().all(|l| l.line != "never"));
    }

    #[tokio::test]
    async fn a_command_ignoring_sigterm_is_killed_after_the_grace_period() {
        let (stop_tx, stop) = watch::channel(None);
        let spec = spec("trap '' TERM; echo ready; while true; do sleep 0.1; done");
        let handle = tokio::spawn(async move { collect(spec, stop).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop_tx
            .send(Some(StopRequest::Cancel {
                reason: Some("test".into()),
            }))
            .expect("sent");
        let (outcome, _) = handle.await.expect("joined");
        assert_eq!(
            outcome.ending,
            Ending::Stopped(StopRequest::Cancel {
                reason: Some("test".into())
            })
        );
        assert!(outcome.killed);
        assert_eq!(outcome.signal, Some(9));
    }
}
