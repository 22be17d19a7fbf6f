//! The `edgerunner` binary end to end, against a real local server: it enrolls a key-pair
//! runner and, separately, starts with a bootstrap token; runs real shell jobs whose output
//! arrives as a valid chain; terminates a job cancelled mid-run and records it cancelled;
//! stops a job over its wall time and reports it failed; drains on SIGTERM and gives work back
//! on a second signal; and `edgerunner verify` accepts a real custody bundle and names the
//! broken link in a tampered one. (A tampered envelope served by a test double is refused
//! before execution: `crates/runner/tests/tampered_envelope.rs`.)
//!
//! The binary is `EDGERUNNER_BIN` (scripts/test builds it and sets it); every test fails
//! without it or without `BASE_URL`. Each test makes its own organization and scratch
//! directory; every wait is bounded.

mod control;
mod ephemeral;
mod pool;
mod runs;
mod signals;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::{payload_hash, StreamChunk};
use edgerunner_protocol::stable_json;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// The binary
// ---------------------------------------------------------------------------------------------

fn bin() -> PathBuf {
    PathBuf::from(required_env("EDGERUNNER_BIN"))
}

/// `edgerunner ARGS` with a clean environment (none of the caller's EVALGATE_* or config).
fn command(scratch: &Scratch, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(bin());
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("XDG_CONFIG_HOME", scratch.path("xdg"))
        .stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

fn run(scratch: &Scratch, args: &[&str], env: &[(&str, &str)]) -> Output {
    command(scratch, args, env)
        .output()
        .expect("edgerunner runs")
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `edgerunner admin --json ARGS` with the org's admin key; the answer's JSON.
fn admin(scratch: &Scratch, org: &Org, args: &[&str]) -> Value {
    let base = base_url();
    let mut all = vec!["admin", "--server", base.as_str(), "--json"];
    all.extend_from_slice(args);
    let output = run(scratch, &all, &[("EDGERUNNER_API_KEY", &org.admin_key)]);
    assert!(
        output.status.success(),
        "edgerunner {args:?}: {}",
        text(&output)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "edgerunner {args:?} printed non-JSON ({e}): {}",
            text(&output)
        )
    })
}

/// `admin runners register` for a fresh runner of kind prompt and the suite's runtime, with
/// `flags` besides: the command's arguments.
fn registration(flags: &[&str]) -> Vec<String> {
    let name = unique("cli-runner");
    let mut args: Vec<String> = [
        "runners",
        "register",
        "--name",
        &name,
        "--runner-key",
        &name,
        "--execution-kind",
        "prompt",
        "--runtime",
        RUNTIME,
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .collect();
    args.extend(flags.iter().map(|flag| (*flag).to_owned()));
    args
}

/// A running `edgerunner runner start`, its stderr (JSON lines) in a file.
struct RunnerProcess {
    child: Child,
    stderr: PathBuf,
}

impl RunnerProcess {
    fn start(scratch: &Scratch, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in(scratch, None, args, env)
    }

    /// `runner start` with `dir` as its current directory (the test's own when `None`).
    fn start_in(
        scratch: &Scratch,
        dir: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let stderr = scratch.path(&unique("runner-stderr"));
        let work = scratch.path("work");
        let mut all = vec![
            "runner",
            "start",
            "--log-format",
            "json",
            "--poll-interval",
            "0.2",
            "--work-dir",
            work.to_str().expect("UTF-8 path"),
        ];
        all.extend_from_slice(args);
        let mut command = command(scratch, &all, env);
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("edgerunner starts");
        Self { child, stderr }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn events(&self) -> Vec<Value> {
        self.log()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    fn has_event(&self, name: &str) -> bool {
        self.events().iter().any(|event| event["event"] == name)
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the process to exit, at most `limit`.
    async fn exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "edgerunner did not exit within {limit:?}; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for RunnerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `check` every 100 ms until it holds, at most `limit`.
async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn job_in_state(org: &Org, job_id: &str, states: &[&str], limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let job = job(&org.admin_key, job_id).await;
        if states.iter().any(|state| job["state"] == *state) {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {job_id} is {} after {limit:?}, not one of {states:?}: {job}",
            job["state"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn pid_alive(pid: &str) -> bool {
    Path::new("/proc").join(pid.trim()).exists()
}

/// The pid a job's command wrote to `pid_file` once it started (at most 60 s).
async fn started_command(pid_file: &Path) -> String {
    eventually("the command starts", Duration::from_secs(60), || {
        std::fs::read_to_string(pid_file).is_ok_and(|pid| !pid.trim().is_empty())
    })
    .await;
    std::fs::read_to_string(pid_file).expect("pid")
}

/// Job `job_id` as runner `runner_id` handed it back: queued again at once with nothing
/// completed, its release recorded, no lease left to lapse.
async fn handed_back(org: &Org, job_id: &str, runner_id: &str) -> Value {
    let requeued = job(&org.admin_key, job_id).await;
    assert_eq!(
        requeued["completions"].as_array().map(Vec::len),
        Some(0),
        "not completed: {requeued}"
    );
    assert_eq!(
        requeued["state"], "queued",
        "handed back at once: {requeued}"
    );
    let events = requeued["events"].as_array().expect("events");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "job.released" && e["runnerId"] == runner_id),
        "{requeued}"
    );
    assert!(
        !events.iter().any(|e| e["type"] == "job.lease_lost"),
        "{requeued}"
    );
    requeued
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

struct Setup {
    org: Org,
    release: Release,
    scratch: Scratch,
}

impl Setup {
    async fn new(name: &str) -> Self {
        let org = bootstrap_org(&format!("cli-{name}"));
        let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
        Self {
            org,
            release,
            scratch: Scratch::new(name),
        }
    }

    /// Registers a bootstrap-token runner with the CLI; returns its id and token.
    fn register(&self, capacity: u32) -> (String, String) {
        self.register_with(&["--max-concurrent-jobs", &capacity.to_string()])
    }

    /// A runner registered through `admin runners register` with `flags` besides its name,
    /// kind and runtime: its id and bootstrap token.
    fn register_with(&self, flags: &[&str]) -> (String, String) {
        let args = registration(flags);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let answer = admin(&self.scratch, &self.org, &args);
        let id = answer["runner"]["id"]
            .as_str()
            .expect("runner id")
            .to_owned();
        let token = answer["bootstrapToken"].as_str().expect("token").to_owned();
        (id, token)
    }

    async fn enqueue(&self, input: &Value, requirements: &Value) -> String {
        let job = enqueue_job(&self.org.admin_key, &self.release, input, requirements).await;
        job["id"].as_str().expect("job id").to_owned()
    }

    /// The bootstrap-token environment of runner `id`. No API key: the runner makes each job's
    /// evaluation run with its own credential, through the job it holds.
    fn env<'a>(&'a self, base: &'a str, id: &'a str, token: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![
            ("EVALGATE_BASE_URL", base),
            ("EVALGATE_RUNNER_ID", id),
            ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token),
        ]
    }

    /// The job's custody bundle, fetched with `edgerunner admin jobs bundle -o FILE`.
    fn bundle(&self, job_id: &str) -> (PathBuf, Value) {
        let path = self.scratch.path(&format!("{job_id}.bundle.json"));
        let base = base_url();
        let output = run(
            &self.scratch,
            &[
                "admin",
                "--server",
                &base,
                "jobs",
                "bundle",
                job_id,
                "-o",
                path.to_str().expect("UTF-8"),
            ],
            &[("EDGERUNNER_API_KEY", &self.org.admin_key)],
        );
        assert!(output.status.success(), "bundle: {}", text(&output));
        let bundle = serde_json::from_str(&std::fs::read_to_string(&path).expect("bundle file"))
            .expect("bundle JSON");
        (path, bundle)
    }

    fn verify(&self, path: &Path, extra: &[&str]) -> Output {
        let mut args = vec!["verify", path.to_str().expect("UTF-8")];
        args.extend_from_slice(extra);
        run(&self.scratch, &args, &[])
    }
}

fn requirements_with_wall(wall_seconds: u64) -> Value {
    let mut requirements = requirements("prompt");
    requirements["limits"] = limits(60, 512, wall_seconds, 1_048_576);
    requirements
}

/// The payloads of the bundle's stream chunks (one attempt), in order.
fn payloads(bundle: &Value) -> Vec<Value> {
    bundle["stream"]
        .as_array()
        .expect("stream")
        .iter()
        .map(|chunk| chunk["payload"].clone())
        .collect()
}

/// A log payload's lines as (stream, line), in order: `None` unless it is one. The runner
/// writes `{"segments": [{"stream", "text", "truncated"?}]}`, `text` being each line followed
/// by a newline.
fn log_lines(payload: &Value) -> Option<Vec<(String, String)>> {
    let segments = payload["segments"].as_array()?;
    let mut lines = Vec::new();
    for segment in segments {
        let stream = segment["stream"].as_str().expect("a segment's stream");
        let text = segment["text"].as_str().expect("a segment's text");
        let body = text
            .strip_suffix('\n')
            .expect("a segment's text ends its last line");
        lines.extend(body.split('\n').map(|l| (stream.to_owned(), l.to_owned())));
    }
    Some(lines)
}

/// Every output line the stream carries for `stream` ("stdout" or "stderr"), in order.
fn lines_of(bundle: &Value, stream: &str) -> Vec<String> {
    payloads(bundle)
        .iter()
        .filter_map(log_lines)
        .flatten()
        .filter(|(from, _)| from == stream)
        .map(|(_, line)| line)
        .collect()
}

fn exited(bundle: &Value) -> Value {
    let payloads = payloads(bundle);
    let last = payloads.last().expect("a stream").clone();
    assert_eq!(
        last["event"], "exited",
        "the stream ends with the exit: {last}"
    );
    last
}

fn accepted(job: &Value) -> Value {
    let completions = job["completions"].as_array().expect("completions");
    assert_eq!(completions.len(), 1, "one completion: {job}");
    assert_eq!(completions[0]["decision"], "accepted", "{job}");
    completions[0].clone()
}
