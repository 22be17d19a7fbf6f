//! A job's confinement on the runner host, applied by a small launcher between the runner and
//! the job's shell.
//!
//! The runner does not start `sh -c` itself: it starts its own binary as
//! `edgerunner __job-launcher [--cpu-seconds N] [--memory-mb N] [--deny-network] [--uid U
//! --gid G] -- sh -c COMMAND` ([`LAUNCHER_ARG`]), which, before starting the shell:
//!
//! - makes a new session (`setsid`): the job has no controlling terminal, so it cannot open
//!   `/dev/tty` to write to or type into the operator's shell, and the session's process group
//!   is the one the runner signals;
//! - becomes a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): whatever the job starts and
//!   orphans — a `setsid` process, a double fork — is re-parented to the launcher instead of to
//!   `init`, so every process of the job stays its descendant;
//! - enters a new network namespace (`unshare(CLONE_NEWNET)`, inside a user namespace of its
//!   own when the runner is not root) for a `network: deny_all` job: no interface but a
//!   loopback that is down, so no connection leaves;
//! - creates the job's cgroups and joins them, where the runner may create cgroups
//!   ([`crate::cgroup`]): the job's shell and everything it starts are born inside, whatever
//!   they do to leave the launcher's tree, and `limits.memoryMb` bounds them together there;
//! - sets `RLIMIT_CPU` from `limits.cpuSeconds`, and `RLIMIT_AS` from `limits.memoryMb` where
//!   no cgroup limits memory (an rlimit bounds each process's address space, not the job).
//!
//! Should the runner itself die, the launcher (whose parent-death signal is `SIGHUP`) kills
//! every process under it too. Should a job kill its launcher (a job of the runner's own user
//! may), the runner, a subreaper as well ([`adopt_strays`]), gets what the job left and ends
//! it ([`launcher_ended`]).
//!
//! The shell runs as the `--run-as` user when given (the launcher stays the runner's user, so
//! it can enter the namespace and signal every process of the job). When the shell exits, the
//! launcher kills and reaps every process left under it, then exits as the shell did (same
//! code, or the same signal). The launcher ignores the runner's `SIGTERM` (blocked), which
//! reaches the job's process group; when the runner's grace is over it kills the launcher's
//! descendants itself ([`kill_descendants`]), and the launcher then sweeps what is left.
//!
//! Why a launcher: a `pre_exec` hook would need `unsafe`, which the workspace forbids; the
//! launcher does the same with safe calls, in a process of its own.
//!
//! What a host allows is found out at start ([`probe`]): a network namespace needs root or
//! unprivileged user namespaces. A `deny_all` job on a host that cannot enforce it is refused,
//! never run open.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::{kill, raise, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpid, getppid, setsid, Pid};

use crate::cgroup;

/// The first argument that makes `edgerunner` the job launcher (not a subcommand in `--help`:
/// only the runner starts it).
pub const LAUNCHER_ARG: &str = "__job-launcher";

/// The exit code of a launcher that could not set up the job (its reason on stderr).
pub const SETUP_FAILED: u8 = 125;

/// What the launcher applies before the job's shell starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Confinement {
    /// `RLIMIT_CPU`: `SIGXCPU` at this many seconds of CPU time, `SIGKILL` a second later.
    pub cpu_seconds: Option<u64>,
    /// The most memory, in MiB: the job's cgroups' limit where one holds it (the kernel kills
    /// a process of the job past it), else `RLIMIT_AS` (an allocation past it fails).
    pub memory_mb: Option<u64>,
    /// A network namespace of its own, with no usable interface.
    pub deny_network: bool,
    /// The user and group the shell runs as.
    pub run_as: Option<(u32, u32)>,
    /// The job's cgroups, which the launcher creates and joins (see [`crate::cgroup`]).
    pub cgroups: Vec<PathBuf>,
}

impl Confinement {
    /// The launcher's arguments for this confinement, before `--` and the program.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![LAUNCHER_ARG.to_owned()];
        if let Some(seconds) = self.cpu_seconds {
            args.extend(["--cpu-seconds".to_owned(), seconds.to_string()]);
        }
        if let Some(mb) = self.memory_mb {
            args.extend(["--memory-mb".to_owned(), mb.to_string()]);
        }
        if self.deny_network {
            args.push("--deny-network".to_owned());
        }
        for dir in &self.cgroups {
            args.extend(["--cgroup".to_owned(), dir.display().to_string()]);
        }
        if let Some((uid, gid)) = self.run_as {
            args.extend([
                "--uid".to_owned(),
                uid.to_string(),
                "--gid".to_owned(),
                gid.to_string(),
            ]);
        }
        args.push("--".to_owned());
        args
    }

    /// Reads what [`Confinement::to_args`] wrote (after [`LAUNCHER_ARG`]): the confinement and
    /// the program with its arguments.
    pub fn parse_args(args: &[OsString]) -> Result<(Self, Vec<OsString>), String> {
        let mut confinement = Self::default();
        let mut uid = None;
        let mut gid = None;
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let arg = arg.to_str().ok_or("a launcher argument is not UTF-8")?;
            let mut number = |name: &str| -> Result<u64, String> {
                rest.next()
                    .and_then(|value| value.to_str())
                    .and_then(|value| value.parse().ok())
                    .ok_or_else(|| format!("{name} takes a number"))
            };
            match arg {
                "--cpu-seconds" => confinement.cpu_seconds = Some(number(arg)?),
                "--memory-mb" => confinement.memory_mb = Some(number(arg)?),
                "--uid" => uid = Some(number(arg)?),
                "--gid" => gid = Some(number(arg)?),
                "--deny-network" => confinement.deny_network = true,
                "--cgroup" => confinement.cgroups.push(
                    rest.next()
                        .map(PathBuf::from)
                        .ok_or("--cgroup takes a directory")?,
                ),
                "--" => break,
                other => return Err(format!("unknown launcher argument {other:?}")),
            }
        }
        confinement.run_as = match (uid, gid) {
            (None, None) => None,
            (Some(uid), Some(gid)) => Some((
                u32::try_from(uid).map_err(|_| "--uid is out of range")?,
                u32::try_from(gid).map_err(|_| "--gid is out of range")?,
            )),
            _ => return Err("--uid and --gid go together".into()),
        };
        let program: Vec<OsString> = rest.cloned().collect();
        if program.is_empty() {
            return Err("no program after --".into());
        }
        Ok((confinement, program))
    }
}

/// What this host lets the runner enforce, found by [`probe`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostIsolation {
    /// A job can get a network namespace of its own (`network: deny_all` holds).
    pub network_namespace: bool,
    /// Every process a job starts is killed with it (a subreaper launcher; Linux).
    pub process_sweep: bool,
    /// Where each job's cgroups are created (one per hierarchy), when the runner may.
    pub cgroup_bases: Vec<PathBuf>,
    /// A job's cgroup limits its memory (else `RLIMIT_AS` per process).
    pub memory_cgroup: bool,
}

/// Numbers the cgroups of this runner's jobs.
static JOB_CGROUPS: AtomicU64 = AtomicU64::new(0);

impl HostIsolation {
    /// For the runner's start-up record and each job's `started` event.
    pub fn to_value(&self) -> serde_json::Value {
        let rlimits: &[&str] = if self.memory_cgroup {
            &["cpuSeconds"]
        } else {
            &["cpuSeconds", "memoryMb"]
        };
        serde_json::json!({
            "session": true,
            "processSweep": self.process_sweep,
            "processContainment": if self.cgroup_bases.is_empty() { "subreaper" } else { "cgroup" },
            "memoryLimit": if self.memory_cgroup { "cgroup" } else { "rlimit" },
            "rlimits": rlimits,
            "networkDenyAll": self.network_namespace,
        })
    }

    /// The cgroups of a new job: a fresh name in each base (none where cgroups do not hold).
    pub fn job_cgroups(&self) -> Vec<PathBuf> {
        let n = JOB_CGROUPS.fetch_add(1, Ordering::Relaxed);
        let name = format!("edgerunner-job-{}-{n}", std::process::id());
        self.cgroup_bases
            .iter()
            .map(|base| base.join(&name))
            .collect()
    }
}

/// Tries what the launcher at `launcher` can do here, in throwaway launchers.
pub fn probe(launcher: &Path) -> HostIsolation {
    let works = |confinement: Confinement| {
        Command::new(launcher)
            .args(confinement.to_args())
            .arg("true")
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    let process_sweep = cfg!(target_os = "linux") && works(Confinement::default());
    // Cgroups in every hierarchy that serves, else the unified one alone, else none: each
    // tried in a throwaway launcher that creates, limits and joins them, then ended here.
    let places = cgroup::places();
    cgroup::sweep_stale(&places.bases());
    let mut cgroup_bases = Vec::new();
    let mut memory_cgroup = false;
    let candidates = [places.bases(), places.unified.iter().cloned().collect()];
    for bases in candidates
        .into_iter()
        .filter(|bases| process_sweep && !bases.is_empty())
    {
        let name = format!("edgerunner-probe-{}", std::process::id());
        let dirs: Vec<PathBuf> = bases.iter().map(|base| base.join(&name)).collect();
        let held = works(Confinement {
            memory_mb: Some(PROBE_MEMORY_MB),
            cgroups: dirs.clone(),
            ..Confinement::default()
        });
        let limits_memory = dirs.iter().any(|dir| {
            dir.join("memory.max").exists() || dir.join("memory.limit_in_bytes").exists()
        });
        cgroup::end(&dirs);
        if held {
            cgroup_bases = bases;
            memory_cgroup = limits_memory;
            break;
        }
    }
    HostIsolation {
        network_namespace: works(Confinement {
            deny_network: true,
            ..Confinement::default()
        }),
        process_sweep,
        cgroup_bases,
        memory_cgroup,
    }
}

/// The memory limit of the probe's cgroups: room for the launcher and `true`.
const PROBE_MEMORY_MB: u64 = 64;

/// Signals the launcher keeps from itself: the runner's `SIGTERM` is for the job's processes,
/// not for the launcher that must outlive them to sweep; `SIGCHLD` and `SIGHUP` (the runner
/// is gone) are waited for instead.
fn held_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGCHLD,
    ] {
        set.add(signal);
    }
    set
}

/// The launcher's second stage's flag: it lowers the limits, lets every signal through
/// again, and becomes the job's shell.
const EXEC_STAGE: &str = "--exec-stage";

/// The launcher: `edgerunner __job-launcher …` (see the module's documentation).
///
/// It runs in two stages, both this binary. The first confines the session and the network,
/// holds the runner's `SIGTERM` from itself, and supervises; a held signal stays held across
/// `fork` and `exec`, so the job's shell is started through a second stage that lets signals
/// through again and sets the limits (so the supervisor is not bound by them) before it
/// `exec`s the shell.
pub fn launcher_main(args: &[OsString]) -> ExitCode {
    if args.first().is_some_and(|arg| arg == EXEC_STAGE) {
        return exec_stage(&args[1..]);
    }
    let (confinement, program) = match Confinement::parse_args(args) {
        Ok(parsed) => parsed,
        Err(reason) => return setup_failed(&reason),
    };
    let runner = match confine(&confinement) {
        Ok(runner) => runner,
        Err(reason) => return setup_failed(&reason),
    };
    // Joined before the shell starts, so that it is born inside; the runner ends them.
    let memory_bytes = confinement
        .memory_mb
        .map(|mb| mb.saturating_mul(1024 * 1024));
    let memory_in_cgroup = match cgroup::enter(&confinement.cgroups, memory_bytes) {
        Ok(limited) => limited,
        Err(reason) => return setup_failed(&reason),
    };
    let myself = match std::env::current_exe() {
        Ok(path) => path,
        Err(error) => return setup_failed(&format!("cannot find its own binary: {error}")),
    };
    let limits = Confinement {
        cpu_seconds: confinement.cpu_seconds,
        memory_mb: confinement.memory_mb.filter(|_| !memory_in_cgroup),
        ..Confinement::default()
    };
    let mut command = Command::new(myself);
    command
        .arg(LAUNCHER_ARG)
        .arg(EXEC_STAGE)
        .args(&limits.to_args()[1..])
        .args(&program);
    if let Some((uid, gid)) = confinement.run_as {
        // The standard library drops supplementary groups (setgroups(0)) before setuid.
        std::os::unix::process::CommandExt::uid(&mut command, uid);
        std::os::unix::process::CommandExt::gid(&mut command, gid);
    }
    let shell = match command.spawn() {
        Ok(child) => child,
        Err(error) => return setup_failed(&format!("cannot start {:?}: {error}", program[0])),
    };
    let shell = Pid::from_raw(i32::try_from(shell.id()).unwrap_or(i32::MAX));
    let status = wait_for(shell, runner);
    sweep_children();
    exit_as(status)
}

/// The second stage: limits, every signal let through, then the program in its place.
fn exec_stage(args: &[OsString]) -> ExitCode {
    let (limits, program) = match Confinement::parse_args(args) {
        Ok(parsed) => parsed,
        Err(reason) => return setup_failed(&reason),
    };
    if let Err(reason) = SigSet::empty().thread_set_mask() {
        return setup_failed(&format!("cannot let signals through: {reason}"));
    }
    if let Err(reason) = set_limits(&limits) {
        return setup_failed(&reason);
    }
    // `exec` only returns on failure; the standard library puts SIGPIPE back to its default.
    let error =
        std::os::unix::process::CommandExt::exec(Command::new(&program[0]).args(&program[1..]));
    setup_failed(&format!("cannot start {:?}: {error}", program[0]))
}

fn setup_failed(reason: &str) -> ExitCode {
    eprintln!("edgerunner job launcher: {reason}");
    ExitCode::from(SETUP_FAILED)
}

/// Confines this process (the launcher's first stage); returns the runner's pid.
fn confine(confinement: &Confinement) -> Result<Pid, String> {
    let runner = getppid();
    setsid().map_err(|error| format!("setsid: {error}"))?;
    held_signals()
        .thread_block()
        .map_err(|error| format!("blocking SIGTERM: {error}"))?;
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|error| format!("prctl PR_SET_CHILD_SUBREAPER: {error}"))?;
        // Should the runner die, the job ends too (see `wait_for`).
        nix::sys::prctl::set_pdeathsig(Signal::SIGHUP)
            .map_err(|error| format!("prctl PR_SET_PDEATHSIG: {error}"))?;
        if getppid() != runner {
            return Err("the runner is gone".into());
        }
    }
    if confinement.deny_network {
        #[cfg(target_os = "linux")]
        own_network()?;
        #[cfg(not(target_os = "linux"))]
        return Err("network deny_all needs Linux network namespaces".into());
    }
    Ok(runner)
}

/// Enters a new network namespace: directly where this process may (root), else inside a new
/// user namespace that maps this process's own uid and gid to themselves (unprivileged user
/// namespaces), so that the job keeps its ids and its file access.
#[cfg(target_os = "linux")]
fn own_network() -> Result<(), String> {
    use nix::sched::{unshare, CloneFlags};
    if unshare(CloneFlags::CLONE_NEWNET).is_ok() {
        return Ok(());
    }
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET).map_err(|error| {
        format!("a network namespace (unshare CLONE_NEWNET, also in a user namespace): {error}")
    })?;
    // An unprivileged process may map only its own ids, and its gid only once it gave up
    // setgroups.
    for (file, text) in [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ] {
        std::fs::write(file, text).map_err(|error| format!("{file}: {error}"))?;
    }
    Ok(())
}

fn set_limits(limits: &Confinement) -> Result<(), String> {
    if let Some(seconds) = limits.cpu_seconds {
        setrlimit(Resource::RLIMIT_CPU, seconds, seconds.saturating_add(1))
            .map_err(|error| format!("RLIMIT_CPU: {error}"))?;
    }
    if let Some(mb) = limits.memory_mb {
        let bytes = mb.saturating_mul(1024 * 1024);
        setrlimit(Resource::RLIMIT_AS, bytes, bytes)
            .map_err(|error| format!("RLIMIT_AS: {error}"))?;
    }
    Ok(())
}

/// Reaps children until `shell` ends; returns how it ended. Should the runner die meanwhile
/// (`SIGHUP`, the parent-death signal, and a new parent), every process under the launcher is
/// killed: a job does not outlive the runner that ran it.
fn wait_for(shell: Pid, runner: Pid) -> WaitStatus {
    let mut wakeups = SigSet::empty();
    wakeups.add(Signal::SIGCHLD);
    wakeups.add(Signal::SIGHUP);
    loop {
        // Whatever has ended, the shell or an orphan re-parented here. A SIGCHLD that comes
        // after this stays pending (held) and ends the wait below at once.
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(status) if status.pid() == Some(shell) => return status,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                // No child at all: the shell cannot be waited for (it is gone).
                Err(_) => return WaitStatus::Exited(shell, i32::from(SETUP_FAILED)),
            }
        }
        // A SIGHUP from a job (it may signal its launcher) changes nothing while the runner
        // is there.
        if let Ok(Signal::SIGHUP) = wakeups.wait() {
            if getppid() != runner {
                kill_descendants(getpid());
            }
        }
    }
}

/// The most rounds of kill-and-reap: each round reaps at least one process, so a job with
/// more live processes than this is left to the runner's own sweep.
const MAX_SWEEP_ROUNDS: usize = 100_000;

/// Kills and reaps every child of this process (the job's leftovers, re-parented here) until
/// none is left.
fn sweep_children() {
    let me = getpid();
    for _ in 0..MAX_SWEEP_ROUNDS {
        let children = children_of(me);
        for child in &children {
            let _ = kill(*child, Signal::SIGKILL);
        }
        // Block only when a child was just killed: its exit ends the wait.
        let flags = if children.is_empty() {
            Some(WaitPidFlag::WNOHANG)
        } else {
            None
        };
        match waitpid(None, flags) {
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => {}
            // ECHILD: nothing left.
            Err(_) => return,
        }
    }
}

/// Ends this process as the shell ended: its exit code, or its signal.
fn exit_as(status: WaitStatus) -> ExitCode {
    match status {
        WaitStatus::Exited(_, code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        WaitStatus::Signaled(_, signal, _) => {
            // No core file of the launcher for the job's SIGSEGV or SIGXCPU.
            let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
            if held_signals().contains(signal) {
                let mut one = SigSet::empty();
                one.add(signal);
                let _ = raise(signal);
                let _ = one.thread_unblock();
            } else {
                let _ = raise(signal);
            }
            // Still here: a signal whose default is to be ignored (or SIGPIPE, which the
            // standard library ignores). The shell's convention says the rest.
            ExitCode::from(128u8.saturating_add(u8::try_from(signal as i32).unwrap_or(0)))
        }
        _ => ExitCode::from(SETUP_FAILED),
    }
}

/// A process's parent, from the text of `/proc/<pid>/stat` (the field after the state, which
/// follows the command name in parentheses; the name itself may hold `)` and spaces).
pub fn parent_in_stat(stat: &str) -> Option<i32> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_ascii_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// Every process on the host with its parent, from `/proc` (empty where there is no `/proc`).
fn process_parents() -> Vec<(Pid, Pid)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((Pid::from_raw(pid), Pid::from_raw(parent_in_stat(&stat)?)))
        })
        .collect()
}

fn children_of(parent: Pid) -> Vec<Pid> {
    process_parents()
        .into_iter()
        .filter(|(_, p)| *p == parent)
        .map(|(pid, _)| pid)
        .collect()
}

/// The processes under `root` (not `root` itself), given every process's parent.
pub fn descendants(root: i32, parents: &[(i32, i32)]) -> Vec<i32> {
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        next += 1;
        for (pid, p) in parents {
            if *p == parent && !found.contains(pid) {
                found.push(*pid);
            }
        }
    }
    found.remove(0);
    found
}

/// `SIGKILL` to every process under `root` (a launcher), `root` itself spared so that it reaps
/// them and sweeps what they leave. Returns how many were signalled.
pub fn kill_descendants(root: Pid) -> usize {
    let parents: Vec<(i32, i32)> = process_parents()
        .into_iter()
        .map(|(pid, parent)| (pid.as_raw(), parent.as_raw()))
        .collect();
    let under = descendants(root.as_raw(), &parents);
    for pid in &under {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    under.len()
}

/// The launchers this process has running, by pid: a child of the runner that is not one of
/// them is a stray (see [`launcher_ended`]). Held while a launcher is spawned, so that one
/// just forked is never taken for a stray.
static LAUNCHERS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Whether this process adopts strays ([`adopt_strays`]).
static ADOPTING: AtomicBool = AtomicBool::new(false);

/// Makes this process (the runner) a child subreaper too: a job of the runner's own user may
/// kill its launcher, and what it leaves behind then comes here instead of to `init`, to be
/// ended by [`launcher_ended`]. Only for a process whose children are all launchers.
pub fn adopt_strays() -> Result<(), String> {
    #[cfg(target_os = "linux")]
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|error| format!("prctl PR_SET_CHILD_SUBREAPER: {error}"))?;
    ADOPTING.store(true, Ordering::SeqCst);
    Ok(())
}

/// Spawns a launcher with `spawn` and notes its pid, both under the lock.
pub fn spawn_launcher<T>(
    spawn: impl FnOnce() -> std::io::Result<T>,
    pid: impl Fn(&T) -> Option<u32>,
) -> std::io::Result<T> {
    let mut launchers = LAUNCHERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let child = spawn()?;
    if let Some(id) = pid(&child).and_then(|id| i32::try_from(id).ok()) {
        launchers.push(id);
    }
    Ok(child)
}

/// Called once a launcher has been waited for: forgets it, and when this process adopts
/// strays, kills and reaps every child that is not a running launcher (what a job left after
/// its launcher was killed), until none is left.
pub fn launcher_ended(launcher: Pid) {
    let mut launchers = LAUNCHERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    launchers.retain(|pid| *pid != launcher.as_raw());
    if !ADOPTING.load(Ordering::SeqCst) {
        return;
    }
    let me = getpid();
    for _ in 0..MAX_SWEEP_ROUNDS {
        let strays: Vec<Pid> = children_of(me)
            .into_iter()
            .filter(|pid| !launchers.contains(&pid.as_raw()))
            .collect();
        if strays.is_empty() {
            return;
        }
        for stray in &strays {
            let _ = kill(*stray, Signal::SIGKILL);
        }
        // Each is this process's child and killed: the wait is short.
        for stray in &strays {
            let _ = waitpid(*stray, None);
        }
    }
}

/// Why a job cannot be run under the confinement it asks for on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unenforceable {
    /// `network: deny_all`, and no network namespace here.
    NetworkDenyAll,
}

impl fmt::Display for Unenforceable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NetworkDenyAll => f.write_str(
                "the job requires network deny_all, which this host cannot enforce (no network \
                 namespace: the runner needs root or unprivileged user namespaces)",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_arguments_round_trip() {
        let confinement = Confinement {
            cpu_seconds: Some(60),
            memory_mb: Some(512),
            deny_network: true,
            run_as: Some((1000, 100)),
            cgroups: vec![
                "/sys/fs/cgroup/unified/edgerunner-job-1-0".into(),
                "/sys/fs/cgroup/memory/a b/edgerunner-job-1-0".into(),
            ],
        };
        let mut args: Vec<OsString> = confinement.to_args().into_iter().map(Into::into).collect();
        assert_eq!(args.remove(0), LAUNCHER_ARG);
        args.extend(["sh", "-c", "echo --deny-network"].map(OsString::from));
        let (parsed, program) = Confinement::parse_args(&args).expect("parsed");
        assert_eq!(parsed, confinement);
        assert_eq!(program, ["sh", "-c", "echo --deny-network"]);

        let bare = Confinement::default().to_args();
        assert_eq!(bare, [LAUNCHER_ARG, "--"]);
    }

    #[test]
    fn malformed_launcher_arguments_are_refused() {
        let refused = |args: &[&str]| {
            let args: Vec<OsString> = args.iter().map(OsString::from).collect();
            Confinement::parse_args(&args).expect_err("refused")
        };
        assert!(refused(&["--cpu-seconds", "x", "--", "true"]).contains("number"));
        assert!(refused(&["--uid", "5", "--", "true"]).contains("together"));
        assert!(refused(&["--memory-mb", "1"]).contains("no program"));
        assert!(refused(&["--bogus", "--", "true"]).contains("unknown"));
        assert!(refused(&["--cgroup"]).contains("directory"));
        assert!(refused(&["--uid", "99999999999", "--gid", "1", "--", "t"]).contains("range"));
    }

    #[test]
    fn the_parent_is_read_past_a_command_name_with_parentheses_and_spaces() {
        assert_eq!(parent_in_stat("42 (sleep) S 7 42 42 0"), Some(7));
        assert_eq!(parent_in_stat("42 (a) b (c) R 9 1 1"), Some(9));
        assert_eq!(parent_in_stat("42 (trunc"), None);
        assert_eq!(parent_in_stat(""), None);
    }

    #[test]
    fn descendants_are_every_generation_under_the_root_and_nothing_else() {
        // 10 → 11 → 12 → 13, 10 → 14; 20 is another tree; 1 is init.
        let parents = [
            (10, 1),
            (11, 10),
            (12, 11),
            (13, 12),
            (14, 10),
            (20, 1),
            (21, 20),
        ];
        let mut under = descendants(10, &parents);
        under.sort_unstable();
        assert_eq!(under, [11, 12, 13, 14]);
        assert!(descendants(13, &parents).is_empty());
        // A cycle in a racy snapshot does not loop.
        assert_eq!(descendants(30, &[(31, 30), (30, 31)]), [31]);
    }

    #[test]
    fn the_host_record_names_what_is_enforced() {
        let host = HostIsolation {
            network_namespace: false,
            process_sweep: true,
            ..HostIsolation::default()
        };
        let value = host.to_value();
        assert_eq!(value["networkDenyAll"], false);
        assert_eq!(value["processSweep"], true);
        assert_eq!(value["session"], true);
        assert_eq!(value["processContainment"], "subreaper");
        assert_eq!(value["memoryLimit"], "rlimit");
        assert_eq!(
            value["rlimits"],
            serde_json::json!(["cpuSeconds", "memoryMb"])
        );
        assert!(host.job_cgroups().is_empty());

        let contained = HostIsolation {
            cgroup_bases: vec!["/cg/unified".into(), "/cg/memory/x".into()],
            memory_cgroup: true,
            ..host
        };
        let value = contained.to_value();
        assert_eq!(value["processContainment"], "cgroup");
        assert_eq!(value["memoryLimit"], "cgroup");
        assert_eq!(value["rlimits"], serde_json::json!(["cpuSeconds"]));
        // Each job its own name, the same in every hierarchy.
        let (first, second) = (contained.job_cgroups(), contained.job_cgroups());
        assert_eq!(first.len(), 2);
        assert_ne!(first, second);
        assert_eq!(first[0].file_name(), first[1].file_name());
        assert!(first[0].starts_with("/cg/unified"));
    }
}
