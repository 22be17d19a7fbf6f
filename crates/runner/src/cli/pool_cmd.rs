//! `edgerunner runner pool`: keeps between `--min` and `--max` one-job runner processes alive
//! on this machine, following the queue (issue 44).
//!
//! Each process is `edgerunner runner start --ephemeral` under a runner identity of its own,
//! which the pool registers just before it starts it (an admin registration with `ephemeral:
//! true`: the server drains the runner when it grants its job and revokes it once that job's
//! claim ended). So a job runs in a fresh process under a fresh identity, and nothing a job
//! leaves behind reaches the next one. The pool decides with [`crate::pool::decide`] from what
//! waits (`GET /api/remote-runners/queues`, the selected queues' `queued`) and what runs here;
//! processes started above the floor leave by `--idle-exit` when no job comes, which is how
//! the pool scales down (to zero with `--min 0`). A process that leaves without a job has its
//! runner drained by the pool, so the server retires that identity too.
//!
//! SIGTERM or SIGINT: the pool starts nothing more and passes the signal to its processes,
//! which drain (and hand back their jobs as `runner start` does), then exits 0 once they are
//! gone; a second signal is passed on as well.

use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use super::admin_cmd::{registration, RegisterArgs, RunnerFlags};
use super::secret_arg::Secret;
use super::CliError;
use crate::admin::AdminClient;
use crate::http::Http;
use crate::pool::{decide, status, PoolLimits, PoolStep, PoolView};

/// The admin key the pool registers runners and reads the queues with.
const API_KEY: Secret = Secret {
    flag: "--api-key",
    env: "EDGERUNNER_API_KEY",
};

/// How long the bootstrap token of a pool's runner lives: its process starts at once.
const TOKEN_TTL_SECONDS: u64 = 24 * 3600;

/// The `runner start` flags the pool sets for each process itself.
const OWN_FLAGS: [&str; 12] = [
    "--ephemeral",
    "--idle-exit",
    "--capacity",
    "--max-jobs",
    "--exit-when-idle",
    "--bootstrap-token",
    "--bootstrap-token-file",
    "--runner-id",
    "--server",
    "--config",
    "--key-file",
    "--log-format",
];

#[derive(Debug, Args)]
pub struct PoolArgs {
    /// The control plane's URL
    #[arg(long, env = "EVALGATE_BASE_URL")]
    pub server: Option<String>,
    /// A file holding an admin API key (erk_…) of the `admin` role: the pool registers a runner
    /// for each process and reads the queues with it; `-` for standard input
    /// [default: $EDGERUNNER_API_KEY]. Its processes never see it
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Refused: use EDGERUNNER_API_KEY or --api-key-file
    #[arg(long, hide = true)]
    pub api_key: Option<String>,
    /// Processes kept alive with nothing queued (0: the pool scales to zero)
    #[arg(long, default_value = "0")]
    pub min: u32,
    /// Processes alive at most
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max: u32,
    /// A queue (q_…) whose waiting jobs the pool follows; repeatable [default: every queue of
    /// the organization]
    #[arg(long = "queue", value_name = "QUEUE")]
    pub queues: Vec<String>,
    /// Seconds a process started above the floor waits for a job before it leaves
    #[arg(long, default_value = "30", value_parser = super::runner_cmd::positive_seconds)]
    pub idle_exit: Duration,
    /// Seconds between two looks at the queue
    #[arg(long, default_value = "5", value_parser = super::runner_cmd::positive_seconds)]
    pub interval: Duration,
    /// The runners' names and keys start with this
    #[arg(long, default_value = "pool")]
    pub name: String,
    /// What each runner the pool registers can run, and its tags
    #[command(flatten)]
    pub runner: RunnerFlags,
    /// What each process runs: `runner start` flags after `--` (at least `--exec COMMAND`);
    /// the pool sets its identity, --ephemeral, --idle-exit and --log-format itself
    #[arg(last = true, required = true, value_name = "START FLAGS")]
    pub start: Vec<String>,
}

/// One runner process of the pool.
struct Process {
    child: Child,
    runner_id: String,
    token_file: PathBuf,
    /// It printed `job.claimed`: it runs (or ran) its one job.
    claimed: Arc<AtomicBool>,
    /// Started to keep the floor: it waits for a job without an idle exit.
    floor: bool,
}

/// What the pool remembers between looks.
struct Pool {
    admin: AdminClient,
    server: String,
    args: PoolArgs,
    limits: PoolLimits,
    /// The pool's private directory (0700) of token files (0600), one per process.
    secrets: PathBuf,
    processes: Vec<Process>,
    started: u64,
    failed_in_a_row: u32,
    last_failure: Option<Instant>,
    queued: u64,
}

/// The start flags refused because the pool sets them.
fn refused_flag(start: &[String]) -> Option<&'static str> {
    start.iter().find_map(|arg| {
        OWN_FLAGS
            .into_iter()
            .find(|flag| arg == flag || arg.starts_with(&format!("{flag}=")))
    })
}

/// The jobs waiting in `selected` queues of a queues answer (every queue when none is named).
fn queued_in(answer: &Value, selected: &[String]) -> u64 {
    answer["queues"]
        .as_array()
        .map(|queues| {
            queues
                .iter()
                .filter(|q| {
                    selected.is_empty()
                        || q["id"]
                            .as_str()
                            .is_some_and(|id| selected.iter().any(|s| s == id))
                })
                .filter_map(|q| q["jobs"]["queued"].as_u64())
                .sum()
        })
        .unwrap_or(0)
}

/// A short random suffix for runner keys, unique enough across hosts and restarts.
fn suffix() -> Result<String, CliError> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).map_err(|e| CliError::Input(format!("no randomness: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

pub async fn run(args: PoolArgs) -> Result<ExitCode, CliError> {
    if let Some(flag) = refused_flag(&args.start) {
        return Err(CliError::Input(format!(
            "{flag} is the pool's to set for each process; leave it out of the start flags"
        )));
    }
    if !args
        .start
        .iter()
        .any(|a| a == "--exec" || a.starts_with("--exec="))
    {
        return Err(CliError::Input(
            "say what each process runs: -- --exec COMMAND [runner start flags]".into(),
        ));
    }
    let server = args.server.clone().ok_or_else(|| {
        CliError::Input("no server: pass --server URL or set EVALGATE_BASE_URL".into())
    })?;
    let api_key = API_KEY.read(args.api_key_file.as_deref(), args.api_key.as_deref())?;
    let admin = AdminClient::new(Http::new(&server)?, api_key.as_deref().unwrap_or(""))?;
    let secrets = std::env::temp_dir().join(format!(
        "edgerunner-pool-{}-{}",
        std::process::id(),
        suffix()?
    ));
    private_dir(&secrets)?;
    let limits = PoolLimits::new(args.min, args.max);
    let mut pool = Pool {
        admin,
        server,
        args,
        limits,
        secrets,
        processes: Vec::new(),
        started: 0,
        failed_in_a_row: 0,
        last_failure: None,
        queued: 0,
    };
    let outcome = pool.run().await;
    let _ = std::fs::remove_dir_all(&pool.secrets);
    outcome
}

fn private_dir(path: &Path) -> Result<(), CliError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|e| CliError::Input(format!("cannot make {}: {e}", path.display())))
}

impl Pool {
    async fn run(&mut self) -> Result<ExitCode, CliError> {
        let io = |e: std::io::Error| CliError::Input(format!("cannot watch signals: {e}"));
        let mut term = signal(SignalKind::terminate()).map_err(io)?;
        let mut int = signal(SignalKind::interrupt()).map_err(io)?;
        let mut last_line = String::new();
        loop {
            self.reap().await;
            match self.admin.queues().await {
                Ok(answer) => self.queued = queued_in(&answer, &self.args.queues),
                Err(err) => eprintln!("pool: the queues could not be read ({err}); as before"),
            }
            let view = self.view();
            let step = decide(&self.limits, &view);
            let line = status(&self.limits, &view, step);
            if line != last_line {
                eprintln!("{line}");
                last_line = line;
            }
            if let PoolStep::Start(n) = step {
                for _ in 0..n {
                    if let Err(err) = self.start().await {
                        eprintln!("pool: a process did not start: {err}");
                        self.failed(Instant::now());
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(self.args.interval) => {}
                _ = term.recv() => return self.stop(Signal::SIGTERM, &mut term, &mut int).await,
                _ = int.recv() => return self.stop(Signal::SIGINT, &mut term, &mut int).await,
            }
        }
    }

    fn view(&self) -> PoolView {
        let alive = u32::try_from(self.processes.len()).unwrap_or(u32::MAX);
        let busy = self
            .processes
            .iter()
            .filter(|p| p.claimed.load(Ordering::Relaxed))
            .count();
        PoolView {
            queued: self.queued,
            alive,
            busy: u32::try_from(busy).unwrap_or(u32::MAX),
            failed_in_a_row: self.failed_in_a_row,
            since_last_failure: self.last_failure.map(|at| at.elapsed()),
        }
    }

    fn failed(&mut self, at: Instant) {
        self.failed_in_a_row = self.failed_in_a_row.saturating_add(1);
        self.last_failure = Some(at);
    }

    /// Registers a runner for one job and starts its process.
    async fn start(&mut self) -> Result<(), CliError> {
        let floor_alive = self.processes.iter().filter(|p| p.floor).count();
        let floor = u32::try_from(floor_alive).unwrap_or(u32::MAX) < self.limits.min;
        self.started += 1;
        let key = format!("{}-{}-{}", self.args.name, self.started, suffix()?);
        let body = registration(&RegisterArgs {
            name: key.clone(),
            runner_key: key,
            runner: self.args.runner.clone(),
            max_concurrent_jobs: None,
            bootstrap_token_ttl: Some(TOKEN_TTL_SECONDS),
            ephemeral: true,
            identity_dir: None,
        })?;
        let answer = self.admin.register_runner(&body).await?;
        let (Some(runner_id), Some(token)) = (
            answer["runner"]["id"].as_str(),
            answer["bootstrapToken"].as_str(),
        ) else {
            return Err(CliError::Input(format!(
                "the registration answered no runner id and token: {answer}"
            )));
        };
        let token_file = self.secrets.join(format!("{runner_id}.token"));
        if let Err(err) = write_private(&token_file, token) {
            self.retire(runner_id).await;
            return Err(err);
        }
        let mut command = Command::new(
            std::env::current_exe()
                .map_err(|e| CliError::Input(format!("cannot find this program: {e}")))?,
        );
        command
            .args(["runner", "start", "--ephemeral", "--log-format", "json"])
            .arg("--bootstrap-token-file")
            .arg(&token_file);
        if !floor {
            command
                .arg("--idle-exit")
                .arg(format!("{}", self.args.idle_exit.as_secs_f64()));
        }
        command
            .args(&self.args.start)
            .env("EVALGATE_BASE_URL", &self.server)
            .env("EVALGATE_RUNNER_ID", runner_id)
            .env_remove("EDGERUNNER_API_KEY")
            .env_remove("EVALGATE_RUNNER_BOOTSTRAP_TOKEN")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(false);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                let _ = std::fs::remove_file(&token_file);
                self.retire(runner_id).await;
                return Err(CliError::Input(format!("cannot start a runner: {err}")));
            }
        };
        let claimed = Arc::new(AtomicBool::new(false));
        if let Some(stderr) = child.stderr.take() {
            let claimed = Arc::clone(&claimed);
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if serde_json::from_str::<Value>(&line)
                        .is_ok_and(|event| event["event"] == "job.claimed")
                    {
                        claimed.store(true, Ordering::Relaxed);
                    }
                    eprintln!("{line}");
                }
            });
        }
        self.processes.push(Process {
            child,
            runner_id: runner_id.to_owned(),
            token_file,
            claimed,
            floor,
        });
        Ok(())
    }

    /// Forgets the processes that exited: one that took its job counts as a good start; one
    /// that left without a job has its runner drained (the server then retires it), and
    /// counts as a failed start unless it left by its idle exit (status 0).
    async fn reap(&mut self) {
        let mut ended = Vec::new();
        let mut index = 0;
        while index < self.processes.len() {
            match self.processes[index].child.try_wait() {
                Ok(Some(status)) => ended.push((self.processes.remove(index), status)),
                Ok(None) => index += 1,
                Err(err) => {
                    eprintln!("pool: cannot see process {index}: {err}");
                    index += 1;
                }
            }
        }
        for (process, exit) in ended {
            self.ended(process, exit).await;
        }
    }

    async fn ended(&mut self, process: Process, exit: ExitStatus) {
        let _ = std::fs::remove_file(&process.token_file);
        if process.claimed.load(Ordering::Relaxed) {
            self.failed_in_a_row = 0;
            return;
        }
        self.retire(&process.runner_id).await;
        if exit.success() {
            self.failed_in_a_row = 0;
        } else {
            eprintln!(
                "pool: runner {} left without a job ({exit})",
                process.runner_id
            );
            self.failed(Instant::now());
        }
    }

    /// Drains a runner that will take no job: the server revokes it on its next pass.
    async fn retire(&self, runner_id: &str) {
        if let Err(err) = self
            .admin
            .set_runner_status(runner_id, "draining", "pool: left without a job")
            .await
        {
            eprintln!("pool: runner {runner_id} could not be drained: {err}");
        }
    }

    /// Passes `first` to every process, then waits for all of them, passing on any further
    /// signal, and exits 0.
    async fn stop(
        &mut self,
        first: Signal,
        term: &mut tokio::signal::unix::Signal,
        int: &mut tokio::signal::unix::Signal,
    ) -> Result<ExitCode, CliError> {
        eprintln!(
            "pool: stopping {} process(es); their jobs finish or go back",
            self.processes.len()
        );
        self.signal_all(first);
        loop {
            self.reap().await;
            if self.processes.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = term.recv() => self.signal_all(Signal::SIGTERM),
                _ = int.recv() => self.signal_all(Signal::SIGINT),
            }
        }
    }

    fn signal_all(&self, signal: Signal) {
        for process in &self.processes {
            if let Some(pid) = process.child.id().and_then(|id| i32::try_from(id).ok()) {
                let _ = kill(Pid::from_raw(pid), signal);
            }
        }
    }
}

fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))?;
    file.write_all(text.as_bytes())
        .map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_pool_sets_each_processs_identity_and_lifetime_itself() {
        let start = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        assert_eq!(refused_flag(&start(&["--exec", "./run.sh"])), None);
        assert_eq!(
            refused_flag(&start(&["--exec", "x", "--idle-exit", "3"])),
            Some("--idle-exit")
        );
        assert_eq!(
            refused_flag(&start(&["--bootstrap-token-file=/t"])),
            Some("--bootstrap-token-file")
        );
        assert_eq!(
            refused_flag(&start(&["--exec", "x", "--capacity", "2"])),
            Some("--capacity")
        );
        // A flag's value is not a flag.
        assert_eq!(
            refused_flag(&start(&["--exec", "echo --ephemeral-ish"])),
            None
        );
    }

    #[test]
    fn the_queued_jobs_of_the_selected_queues() {
        let answer = json!({"queues": [
            {"id": "q_a", "jobs": {"queued": 3, "claimed": 1}},
            {"id": "q_b", "jobs": {"queued": 2}},
            {"id": "q_c", "jobs": {}},
        ]});
        assert_eq!(queued_in(&answer, &[]), 5);
        assert_eq!(queued_in(&answer, &["q_b".to_owned()]), 2);
        assert_eq!(queued_in(&answer, &["q_a".into(), "q_c".into()]), 3);
        assert_eq!(queued_in(&answer, &["q_none".to_owned()]), 0);
        assert_eq!(queued_in(&json!({}), &[]), 0);
    }
}
