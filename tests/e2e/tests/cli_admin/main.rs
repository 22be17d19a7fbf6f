//! `edgerunner admin` as an operator uses it, against a real local server: `jobs logs` follows
//! a running job (driven here as a runner over HTTP) and exits by its outcome; the release
//! commands make, promote, show and list releases; `jobs enqueue` builds requirements from
//! flags, and a refusal names the field and the shape expected; `runners list` shows ages and
//! `jobs list --state` filters.
//!
//! The binary is `EDGERUNNER_BIN`; every test fails without it or without `BASE_URL`. Each test
//! makes its own organization; every wait is a bounded poll on a condition.

mod enqueue;
mod lists;
mod logs;
mod releases;

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::{ChunkKind, ChunkWriter};
use edgerunner_protocol::completion::Completion;
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// The binary
// ---------------------------------------------------------------------------------------------

/// `edgerunner admin --server BASE ARGS` with the key in the environment and nothing else of
/// the caller's.
fn admin_command(org: &Org, args: &[&str]) -> Command {
    let mut command = Command::new(required_env("EDGERUNNER_BIN"));
    command
        .args(["admin", "--server", &base_url()])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("EDGERUNNER_API_KEY", &org.admin_key)
        .stdin(Stdio::null());
    command
}

fn run(org: &Org, args: &[&str]) -> Output {
    admin_command(org, args).output().expect("edgerunner runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn shown(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(output),
        stderr(output)
    )
}

/// Runs `args`, expecting success; its stdout.
fn ok(org: &Org, args: &[&str]) -> String {
    let output = run(org, args);
    assert!(output.status.success(), "{args:?}: {}", shown(&output));
    stdout(&output)
}

/// Runs `args` with `--json`, expecting success; the answer.
fn ok_json(org: &Org, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = ok(org, &all);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{args:?} printed non-JSON ({e}): {text}"))
}

/// A running `edgerunner admin …` whose stdout and stderr go to files read while it runs.
struct Background {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Background {
    fn start(org: &Org, scratch: &Scratch, args: &[&str]) -> Self {
        let stdout = scratch.path(&unique("stdout"));
        let stderr = scratch.path(&unique("stderr"));
        let child = admin_command(org, args)
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("edgerunner starts");
        Self {
            child,
            stdout,
            stderr,
        }
    }

    fn out(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    fn err(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Waits for the process to exit, at most `limit`.
    async fn exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "edgerunner did not exit within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                self.out(),
                self.err()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Polls until `check(stdout, stderr)` holds, at most `limit`; the process must still run.
    async fn until(&mut self, what: &str, limit: Duration, check: impl Fn(&str, &str) -> bool) {
        let deadline = Instant::now() + limit;
        while !check(&self.out(), &self.err()) {
            assert!(
                self.exited().is_none(),
                "{what}: edgerunner exited first\nstdout:\n{}\nstderr:\n{}",
                self.out(),
                self.err()
            );
            assert!(
                Instant::now() < deadline,
                "{what}: not within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                self.out(),
                self.err()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A job driven as a runner would
// ---------------------------------------------------------------------------------------------

/// One queued job claimed by a fresh runner and heartbeated into `running`.
struct RunningJob {
    runner: Runner,
    claimed: Claimed,
    writer: ChunkWriter,
}

impl RunningJob {
    async fn start(org: &Org) -> Self {
        let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
        enqueue_job(
            &org.admin_key,
            &release,
            &json!({ "q": 1 }),
            &requirements("prompt"),
        )
        .await;
        let mut runner = Runner::simple(org, &["prompt"], 1).await;
        let claimed = runner.claim_job().await;
        let beat = runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
        assert_eq!(beat["state"], "running", "first heartbeat: {beat}");
        let writer = claimed.writer();
        Self {
            runner,
            claimed,
            writer,
        }
    }

    fn id(&self) -> String {
        self.claimed.job_id()
    }

    async fn send(&mut self, kind: ChunkKind, payload: Value) {
        let chunk = self.writer.next(kind, payload, timestamp_now());
        let reply = self.runner.stream(&chunk.to_json()).await;
        assert_eq!(reply.expect(200)["accepted"], true, "{reply:?}");
    }

    async fn lines(&mut self, lines: &[(&str, &str)]) {
        let lines: Vec<Value> = lines
            .iter()
            .map(|(stream, line)| json!({ "stream": stream, "line": line }))
            .collect();
        self.send(ChunkKind::Log, json!({ "lines": lines })).await;
    }

    /// The same lines in the runner's compact shape: one segment per run of one stream.
    async fn segments(&mut self, lines: &[(&str, &str)]) {
        let mut segments: Vec<Value> = Vec::new();
        for (stream, line) in lines {
            match segments.last_mut() {
                Some(last) if last["stream"] == *stream => {
                    let text = format!("{}{line}\n", last["text"].as_str().unwrap_or(""));
                    last["text"] = text.into();
                }
                _ => segments.push(json!({ "stream": stream, "text": format!("{line}\n") })),
            }
        }
        self.send(ChunkKind::Log, json!({ "segments": segments }))
            .await;
    }

    async fn complete(&self, org: &Org, status: CompletionStatus) {
        let evidence = bare_evidence(&org.admin_key).await;
        let completion = match status {
            CompletionStatus::Succeeded => self
                .claimed
                .succeeded(self.writer.final_checksum(), evidence),
            status => Completion::seal(self.claimed.fields(
                status,
                None,
                self.writer.final_checksum().cloned(),
                evidence,
            ))
            .to_json(),
        };
        let reply = self.runner.complete(&completion).await;
        assert_eq!(reply.expect(200)["decision"], "accepted", "{reply:?}");
    }
}

/// The lines of `text` that are not the CLI's own marks (`[attempt N] …`, `[job …] …`).
fn job_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| !line.starts_with("[attempt ") && !line.starts_with("[job "))
        .collect()
}
