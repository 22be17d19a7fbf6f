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

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_bootstrap_token_runner_streams_real_shell_output_as_a_valid_chain() {
    let setup = Setup::new("bootstrap").await;
    let base = base_url();
    let (runner_id, token) = setup.register(2);
    let input = lexical(r#"{"label": "été ✨", "weight": 1.50, "tiny": 1e-07}"#);
    let ok = setup.enqueue(&input, &requirements("prompt")).await;
    let bad = setup
        .enqueue(&json!({"fail": true}), &requirements("prompt"))
        .await;
    let command = r#"echo "job=$EDGERUNNER_JOB_ID attempt=$EDGERUNNER_ATTEMPT"; cat "$EDGERUNNER_INPUT"; echo; test -f "$EDGERUNNER_ARTIFACT" && echo artifact-ok; if grep -q '"fail"' "$EDGERUNNER_INPUT"; then echo failing >&2; exit 3; fi; i=0; while [ $i -lt 60 ]; do echo "line $i"; i=$((i+1)); done; echo done >&2"#;
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", command, "--exit-when-idle", "--batch-lines", "50"],
        &setup.env(&base, &runner_id, &token),
    );
    let status = runner.exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let completed: Vec<Value> = runner
        .events()
        .into_iter()
        .filter(|event| event["event"] == "job.completed")
        .collect();
    assert_eq!(completed.len(), 2, "{}", runner.log());

    // The successful job: its output, batched, chained and closed by the completion.
    let job_ok = job(&setup.org.admin_key, &ok).await;
    assert_eq!(job_ok["state"], "succeeded", "{job_ok}");
    let completion = accepted(&job_ok);
    assert_eq!(completion["status"], "succeeded");
    let (path, bundle) = setup.bundle(&ok);
    let payloads = payloads(&bundle);
    assert_eq!(payloads[0]["event"], "started", "{}", payloads[0]);
    let stdout = lines_of(&bundle, "stdout");
    assert_eq!(stdout[0], format!("job={ok} attempt=1"));
    let served: Value = serde_json::from_str(&stdout[1]).expect("the input file is JSON");
    assert_eq!(
        h(&served),
        h(&input),
        "the command read the input as enqueued"
    );
    assert_eq!(stdout[2], "artifact-ok");
    let expected: Vec<String> = (0..60).map(|i| format!("line {i}")).collect();
    assert_eq!(stdout[3..], expected[..]);
    assert_eq!(lines_of(&bundle, "stderr"), vec!["done".to_owned()]);
    let log_chunks: Vec<Vec<(String, String)>> = payloads.iter().filter_map(log_lines).collect();
    assert!(
        log_chunks.len() >= 2,
        "64 lines take more than one chunk of 50"
    );
    assert!(log_chunks.iter().all(|lines| lines.len() <= 50));
    let exit = exited(&bundle);
    assert_eq!(exit["exitCode"], 0);
    let stdout_bytes = format!("{}\n", stdout.join("\n"));
    let stdout_sha256 = sha256_hex(stdout_bytes.as_bytes());
    assert_eq!(exit["stdoutSha256"], stdout_sha256.as_str());
    assert_eq!(
        completion["resultHash"],
        h(&json!({"exitCode": 0, "stdoutSha256": stdout_sha256})).as_str(),
        "resultHash = H({{exitCode, stdoutSha256}})"
    );
    let last = bundle["stream"]
        .as_array()
        .and_then(|s| s.last())
        .expect("chunks");
    assert_eq!(completion["finalStreamChecksum"], last["checksum"]);
    let verified = setup.verify(&path, &[]);
    assert!(verified.status.success(), "{}", text(&verified));
    assert!(String::from_utf8_lossy(&verified.stdout).starts_with("OK job "));

    // Its evidence: a run the runner made, with the outcome recorded as a test result.
    let evidence = &completion["evidence"];
    let run_id = evidence["evaluationRunId"].as_str().expect("run id");
    let test_result = evidence["testResultIds"][0]
        .as_str()
        .expect("a test result");
    let run = get(
        &format!("/api/evidence/runs/{run_id}"),
        &setup.org.admin_key,
    )
    .await
    .expect(200);
    assert_eq!(run["testResults"][0]["id"], test_result);
    assert_eq!(run["testResults"][0]["status"], "passed");
    assert_eq!(run["attachedTo"]["jobId"], ok.as_str());

    // The failing job: exit 3 is `failed`, with its stderr streamed.
    let job_bad = job(&setup.org.admin_key, &bad).await;
    assert_eq!(job_bad["state"], "failed", "{job_bad}");
    assert_eq!(accepted(&job_bad)["status"], "failed");
    let (_, bundle) = setup.bundle(&bad);
    assert_eq!(exited(&bundle)["exitCode"], 3);
    assert_eq!(exited(&bundle)["ending"], "exited");
    assert!(lines_of(&bundle, "stderr").contains(&"failing".to_owned()));
}

#[tokio::test]
async fn exec_runs_a_relative_script_where_runner_start_was_invoked_with_the_job_dir_in_env() {
    use std::os::unix::fs::PermissionsExt as _;

    let setup = Setup::new("execdir").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let job_id = setup
        .enqueue(&json!({"task": "relative"}), &requirements("prompt"))
        .await;
    // A project directory holding the evaluation script, as an operator would run it.
    let project = setup.scratch.path("project");
    std::fs::create_dir_all(&project).expect("project directory");
    let script = project.join("evaluate.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         set -e\n\
         echo \"cwd=$(pwd -P)\"\n\
         echo \"workdir=$EDGERUNNER_WORKDIR\"\n\
         test \"$(dirname \"$EDGERUNNER_INPUT\")\" = \"$EDGERUNNER_WORKDIR\"\n\
         test \"$(dirname \"$EDGERUNNER_ARTIFACT\")\" = \"$EDGERUNNER_WORKDIR\"\n\
         grep -q relative \"$EDGERUNNER_INPUT\"\n\
         echo scratch > \"$EDGERUNNER_WORKDIR/result.txt\"\n\
         echo evaluated\n",
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    let mut runner = RunnerProcess::start_in(
        &setup.scratch,
        Some(&project),
        &["--exec", "./evaluate.sh", "--exit-when-idle"],
        &setup.env(&base, &runner_id, &token),
    );
    let status = runner.exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let job = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(job["state"], "succeeded", "{job}\n{}", runner.log());
    assert_eq!(exited_of(&setup, &job_id)["exitCode"], 0);

    let (_, bundle) = setup.bundle(&job_id);
    let stdout = lines_of(&bundle, "stdout");
    assert_eq!(stdout.len(), 3, "{stdout:?}");
    let project_real = project.canonicalize().expect("canonical");
    assert_eq!(
        stdout[0],
        format!("cwd={}", project_real.display()),
        "the command ran where runner start was invoked"
    );
    let workdir = stdout[1]
        .strip_prefix("workdir=")
        .expect("EDGERUNNER_WORKDIR was printed");
    assert!(!workdir.is_empty(), "EDGERUNNER_WORKDIR was set");
    let workdir = Path::new(workdir);
    assert!(
        workdir.starts_with(setup.scratch.path("work")),
        "the job's own directory is in the runner's private one: {}",
        workdir.display()
    );
    assert!(!workdir.starts_with(&project), "{}", workdir.display());
    assert!(!workdir.exists(), "removed after the job");
    assert!(
        !project.join("result.txt").exists(),
        "the job's files went to its own directory"
    );
    assert_eq!(stdout[2], "evaluated");
}

fn exited_of(setup: &Setup, job_id: &str) -> Value {
    exited(&setup.bundle(job_id).1)
}

#[tokio::test]
async fn a_key_pair_runner_enrolls_waits_for_approval_then_runs_its_job() {
    let setup = Setup::new("keypair").await;
    let base = base_url();
    let run_id = evaluation_run(&setup.org.admin_key).await;
    let job_id = setup
        .enqueue(
            &json!({"evaluationRunId": run_id.to_json(), "task": "keypair"}),
            &requirements("prompt"),
        )
        .await;
    let config = setup.scratch.path("config/runner.json");
    let config_arg = config.to_str().expect("UTF-8").to_owned();
    let name = unique("cli-keypair");
    let enroll_args = [
        "runner",
        "enroll",
        "--server",
        base.as_str(),
        "--organization",
        setup.org.id.as_str(),
        "--config",
        config_arg.as_str(),
        "--name",
        name.as_str(),
        "--execution-kind",
        "prompt",
        "--runtime",
        RUNTIME,
        "--json",
    ];
    let output = run(&setup.scratch, &enroll_args, &[]);
    assert!(output.status.success(), "{}", text(&output));
    let enrolled: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        enrolled["runner"]["state"], "pending_approval",
        "{enrolled}"
    );
    assert_eq!(enrolled["keyCreated"], true);
    let runner_id = enrolled["runner"]["id"].as_str().expect("id").to_owned();
    let fingerprint = enrolled["fingerprint"]
        .as_str()
        .expect("fingerprint")
        .to_owned();
    let key_file = PathBuf::from(enrolled["keyFile"].as_str().expect("key file"));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&key_file), 0o600, "the key is owner-only");
    assert_eq!(mode(&config), 0o600, "the config is owner-only");
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(
        record["fingerprint"],
        fingerprint.as_str(),
        "the admin sees the same fingerprint"
    );
    assert_eq!(record["identityModel"], "keypair");

    // The same key twice is refused, and the key is not replaced.
    let again = run(&setup.scratch, &enroll_args, &[]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already enrolled"),
        "{}",
        text(&again)
    );

    // It waits for approval, then claims, runs and completes with the job's own evidence.
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &[
            "--config",
            config_arg.as_str(),
            "--exec",
            "echo hello from $EDGERUNNER_JOB_ID",
            "--exit-when-idle",
        ],
        &[],
    );
    eventually(
        "the runner reports that it awaits approval",
        Duration::from_secs(30),
        || runner.has_event("runner.pending_approval"),
    )
    .await;
    assert_eq!(job(&setup.org.admin_key, &job_id).await["state"], "queued");
    let approved = admin(
        &setup.scratch,
        &setup.org,
        &[
            "runners",
            "approve",
            &runner_id,
            "--fingerprint",
            &fingerprint,
            "--reason",
            "fingerprint checked by e2e",
        ],
    );
    assert_eq!(approved["state"], "active", "{approved}");
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let job = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let completion = accepted(&job);
    assert_eq!(completion["runnerId"], runner_id.as_str());
    assert_eq!(completion["evidence"]["evaluationRunId"], run_id.to_json());
    let (_, bundle) = setup.bundle(&job_id);
    assert_eq!(
        lines_of(&bundle, "stdout"),
        vec![format!("hello from {job_id}")]
    );

    // A key that others could read is not used.
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let refused = run(
        &setup.scratch,
        &["runner", "whoami", "--config", config_arg.as_str()],
        &[],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("others could read it"),
        "{}",
        text(&refused)
    );
}

#[tokio::test]
async fn a_job_cancelled_mid_run_is_terminated_and_recorded_cancelled() {
    let setup = Setup::new("cancel").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let job_id = setup
        .enqueue(&json!({"task": "cancel"}), &requirements("prompt"))
        .await;
    let pid_file = setup.scratch.path("pid");
    // Ignores SIGTERM, so the runner must kill it after the grace period.
    let command = format!(
        "trap '' TERM; echo $$ > {}; echo started; while true; do sleep 0.2; done",
        pid_file.display()
    );
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &[
            "--exec",
            &command,
            "--exit-when-idle",
            "--heartbeat-interval",
            "0.5",
            "--grace",
            "1",
        ],
        &setup.env(&base, &runner_id, &token),
    );
    let pid = started_command(&pid_file).await;
    assert!(pid_alive(&pid));
    let cancelled_at = Instant::now();
    let answer = admin(
        &setup.scratch,
        &setup.org,
        &[
            "jobs",
            "cancel",
            &job_id,
            "--reason",
            "e2e: no longer needed",
        ],
    );
    assert_eq!(answer["state"], "cancel_requested", "{answer}");
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(20),
        "cancellation surfaced promptly"
    );
    assert!(!pid_alive(&pid), "the command was terminated");

    let job = job_in_state(&setup.org, &job_id, &["cancelled"], Duration::from_secs(10)).await;
    assert_eq!(accepted(&job)["status"], "cancelled");
    let (path, bundle) = setup.bundle(&job_id);
    let exit = exited(&bundle);
    assert_eq!(exit["ending"], "cancelled", "{exit}");
    assert_eq!(
        exit["killed"], true,
        "SIGTERM was ignored, so it was killed: {exit}"
    );
    assert_eq!(exit["cancelReason"], "e2e: no longer needed");
    assert_eq!(lines_of(&bundle, "stdout"), vec!["started".to_owned()]);
    let verified = setup.verify(&path, &[]);
    assert!(verified.status.success(), "{}", text(&verified));
}

#[tokio::test]
async fn a_job_over_its_wall_time_is_stopped_and_reported_failed() {
    let setup = Setup::new("walltime").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let job_id = setup
        .enqueue(&json!({"task": "slow"}), &requirements_with_wall(2))
        .await;
    let pid_file = setup.scratch.path("pid");
    let command = format!(
        "echo $$ > {}; echo sleeping; sleep 30; echo never",
        pid_file.display()
    );
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", &command, "--exit-when-idle", "--grace", "1"],
        &setup.env(&base, &runner_id, &token),
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let pid = std::fs::read_to_string(&pid_file).expect("the command ran");
    assert!(!pid_alive(&pid), "the command was stopped");

    let job = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(job["state"], "failed", "{job}");
    assert_eq!(accepted(&job)["status"], "failed");
    let (_, bundle) = setup.bundle(&job_id);
    let exit = exited(&bundle);
    assert_eq!(exit["ending"], "wall_time_exceeded", "{exit}");
    assert_eq!(exit["exitCode"], Value::Null, "ended by a signal: {exit}");
    let duration = exit["durationMs"].as_u64().expect("duration");
    assert!(
        (2000..15_000).contains(&duration),
        "stopped at the limit: {exit}"
    );
    assert_eq!(lines_of(&bundle, "stdout"), vec!["sleeping".to_owned()]);
}

#[tokio::test]
async fn verify_accepts_a_real_bundle_and_names_the_broken_link_in_a_tampered_one() {
    let setup = Setup::new("verify").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let job_id = setup
        .enqueue(&json!({"task": "verify"}), &requirements("prompt"))
        .await;
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo one; echo two", "--exit-when-idle"],
        &setup.env(&base, &runner_id, &token),
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let (path, bundle) = setup.bundle(&job_id);
    assert!(
        bundle["stream"].as_array().map_or(0, Vec::len) >= 3,
        "{bundle}"
    );

    let verified = setup.verify(&path, &[]);
    assert!(verified.status.success(), "{}", text(&verified));
    // With the runner's job-signing secret, the envelope's HMAC is checked too.
    let session = jobs::Runner::connect(&runner_id, &token).await;
    let secret = session.signing.secret.expose().to_owned();
    let secret_file = setup.scratch.path("signing-secret");
    std::fs::write(&secret_file, format!("{secret}\n")).expect("write the secret");
    let signed = setup.verify(
        &path,
        &[
            "--signing-secret-file",
            secret_file.to_str().expect("UTF-8"),
        ],
    );
    assert!(signed.status.success(), "{}", text(&signed));
    // On the command line, where every local user reads it: refused, and the secret unused.
    let refused = setup.verify(&path, &["--signing-secret", &secret]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--signing-secret-file"),
        "{}",
        text(&refused)
    );
    assert!(
        String::from_utf8_lossy(&signed.stdout).contains("1 signature verified"),
        "{}",
        text(&signed)
    );
    let json_report = setup.verify(&path, &["--json"]);
    let report: Value = serde_json::from_slice(&json_report.stdout).expect("JSON report");
    assert_eq!(report["valid"], true, "{report}");

    // A forged log chunk, re-hashed so that it is consistent in itself: the next link breaks.
    let mut forged = bundle.clone();
    forged["stream"][1]["payload"]["segments"][0]["text"] = "forged\n".into();
    let mut chunk = StreamChunk::from_json(&forged["stream"][1]).expect("a chunk");
    chunk.payload_hash = payload_hash(&chunk.payload);
    chunk.checksum = chunk.expected_checksum();
    forged["stream"][1] = chunk.to_json();
    let forged_path = setup.scratch.path("forged.json");
    std::fs::write(&forged_path, forged.to_string()).expect("write");
    let refused = setup.verify(&forged_path, &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(stdout.starts_with("FAILED job "), "{}", text(&refused));
    assert!(
        stdout.contains(
            "stream attempt 1 sequence 2: previousChecksum does not match sequence 1's checksum"
        ),
        "{}",
        text(&refused)
    );

    // A changed envelope is named by its claim.
    let mut altered = bundle.clone();
    altered["claims"][0]["signedJob"]["envelope"]["inputHash"] =
        stable_json::hash(&json!("another input")).as_str().into();
    let altered_path = setup.scratch.path("altered.json");
    std::fs::write(&altered_path, altered.to_string()).expect("write");
    let refused = setup.verify(&altered_path, &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let claim_id = bundle["claims"][0]["id"].as_str().expect("claim id");
    assert!(
        String::from_utf8_lossy(&refused.stdout)
            .contains(&format!("claim {claim_id} (attempt 1): payloadHash ")),
        "{}",
        text(&refused)
    );
}

#[tokio::test]
async fn sigterm_drains_running_work_and_a_second_signal_gives_it_back() {
    let setup = Setup::new("shutdown").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let env = setup.env(&base, &runner_id, &token);

    // First: SIGTERM while a job runs lets it finish and complete, then the runner exits.
    let finishing = setup
        .enqueue(&json!({"task": "finish"}), &requirements("prompt"))
        .await;
    let pid_file = setup.scratch.path("pid-finishing");
    let command = format!("echo $$ > {}; sleep 2; echo finished", pid_file.display());
    let mut runner = RunnerProcess::start(&setup.scratch, &["--exec", &command], &env);
    eventually("the first command starts", Duration::from_secs(60), || {
        pid_file.exists()
    })
    .await;
    runner.signal("TERM");
    let status = runner.exit(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert!(runner.has_event("runner.draining"), "{}", runner.log());
    let finished = job(&setup.org.admin_key, &finishing).await;
    assert_eq!(
        finished["state"], "succeeded",
        "drained, not abandoned: {finished}"
    );

    // Then: a second signal stops the running command and gives the job back uncompleted;
    // its lease lapses and the server requeues it.
    let given_back = setup
        .enqueue(&json!({"task": "give back"}), &requirements("prompt"))
        .await;
    let pid_file = setup.scratch.path("pid-stubborn");
    let command = format!(
        "trap '' TERM; echo $$ > {}; while true; do sleep 0.2; done",
        pid_file.display()
    );
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &[
            "--exec",
            &command,
            "--grace",
            "1",
            "--lease-seconds",
            "15",
            "--heartbeat-interval",
            "2",
        ],
        &env,
    );
    let pid = started_command(&pid_file).await;
    runner.signal("TERM");
    eventually("the runner drains", Duration::from_secs(10), || {
        runner.has_event("runner.draining")
    })
    .await;
    assert!(pid_alive(&pid), "draining lets the job run");
    runner.signal("TERM");
    let status = runner.exit(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert!(runner.has_event("job.given_back"), "{}", runner.log());
    assert!(!pid_alive(&pid), "the command was stopped");
    // Handed back before the process exited: queued now, not after its 15 s lease, and the
    // runner is not marked lost.
    let requeued = handed_back(&setup.org, &given_back, &runner_id).await;
    assert_eq!(
        requeued["dispatchAttempt"], 1,
        "requeued for a new attempt: {requeued}"
    );
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active", "not lost: {record}");
}

#[tokio::test]
async fn a_runner_restarted_after_sigkill_hands_back_its_old_claim_and_claims_again() {
    let setup = Setup::new("restart").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let env = setup.env(&base, &runner_id, &token);
    let job_id = setup
        .enqueue(&json!({"task": "restart"}), &requirements("prompt"))
        .await;

    // The first process takes the job and is killed mid-run; its command goes with it.
    let pid_file = setup.scratch.path("pid-killed");
    let first_command = format!(
        "echo $$ > {}; while true; do sleep 0.2; done",
        pid_file.display()
    );
    let mut first = RunnerProcess::start(
        &setup.scratch,
        &["--exec", &first_command, "--lease-seconds", "120"],
        &env,
    );
    eventually("the first command starts", Duration::from_secs(60), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|pid| !pid.trim().is_empty())
    })
    .await;
    let pid = std::fs::read_to_string(&pid_file).expect("pid");
    first.signal("KILL");
    first.exit(Duration::from_secs(10)).await;
    let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
    let held = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(
        held["state"], "running",
        "the killed process still holds it: {held}"
    );

    // The second process, same identity and capacity 1: it hands the old claim back, claims
    // the job again at attempt 2 and completes it, long before the 120 s lease would lapse.
    let mut second = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo second", "--max-jobs", "1"],
        &env,
    );
    let status = second.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", second.log());
    let events = second.events();
    let handed = events
        .iter()
        .position(|e| e["event"] == "claim.handed_back")
        .unwrap_or_else(|| panic!("no hand-back: {}", second.log()));
    let claimed = events
        .iter()
        .position(|e| e["event"] == "job.claimed")
        .unwrap_or_else(|| panic!("no claim: {}", second.log()));
    assert!(
        handed < claimed,
        "hand back first, then claim: {}",
        second.log()
    );
    assert!(
        !events.iter().any(|e| e["code"] == "RUNNER_AT_CAPACITY"),
        "the restart never met its own old claim's capacity: {}",
        second.log()
    );
    let done = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["dispatchAttempt"], 2, "{done}");
    let timeline = done["events"].as_array().expect("events");
    let released: Vec<&Value> = timeline
        .iter()
        .filter(|e| e["type"] == "job.released")
        .collect();
    assert_eq!(released.len(), 1, "{done}");
    assert_eq!(released[0]["attempt"], 1, "{done}");
    assert!(
        released[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("restarted")),
        "{done}"
    );
    assert!(
        !timeline.iter().any(|e| e["type"] == "job.lease_lost"),
        "no lease had to lapse: {done}"
    );
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active", "never lost: {record}");
}

#[tokio::test]
async fn a_completion_refused_for_its_evidence_is_reported_and_the_claim_handed_back() {
    let setup = Setup::new("evidence-refused").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let env = setup.env(&base, &runner_id, &token);
    // Two jobs naming the same evaluation run: the first completion takes it into custody, so
    // the second one's completion is refused.
    let run = evaluation_run(&setup.org.admin_key).await;
    let first = setup
        .enqueue(
            &json!({"n": 1, "evaluationRunId": run.to_json()}),
            &requirements("prompt"),
        )
        .await;
    let second = setup
        .enqueue(
            &json!({"n": 2, "evaluationRunId": run.to_json()}),
            &requirements("prompt"),
        )
        .await;
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo done", "--max-jobs", "2"],
        &env,
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert_eq!(
        job(&setup.org.admin_key, &first).await["state"],
        "succeeded"
    );

    let refused = runner
        .events()
        .into_iter()
        .find(|e| e["event"] == "job.completion_failed")
        .unwrap_or_else(|| panic!("the refusal is reported: {}", runner.log()));
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("EVIDENCE_ALREADY_ATTACHED") && reason.contains(&first),
        "the refusal says whose custody the run is in: {refused}"
    );
    assert!(reason.contains("handed back"), "{refused}");
    let requeued = job(&setup.org.admin_key, &second).await;
    assert_eq!(
        requeued["state"], "queued",
        "handed back, not held: {requeued}"
    );
    assert!(
        requeued["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["type"] == "job.released"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("EVIDENCE_ALREADY_ATTACHED"))),
        "{requeued}"
    );
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["activeClaims"], 0, "its capacity is free: {record}");
}

// ---------------------------------------------------------------------------------------------
// Ephemeral runners and idle exit (issue 44)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_ephemeral_runner_takes_exactly_one_job_and_exits_0_whatever_its_outcome() {
    let setup = Setup::new("ephemeral").await;
    let base = base_url();
    // Declared capacity 3: --ephemeral takes one job all the same.
    let (runner_id, token) = setup.register(3);
    let env = setup.env(&base, &runner_id, &token);
    let first = setup
        .enqueue(&json!({"n": 1}), &requirements("prompt"))
        .await;
    let second = setup
        .enqueue(&json!({"n": 2}), &requirements("prompt"))
        .await;
    let mut runner =
        RunnerProcess::start(&setup.scratch, &["--exec", "exit 3", "--ephemeral"], &env);
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(
        status.success(),
        "exit 0 although its job failed: {status}: {}",
        runner.log()
    );
    let claimed = runner
        .events()
        .into_iter()
        .filter(|e| e["event"] == "job.claimed")
        .count();
    assert_eq!(claimed, 1, "{}", runner.log());
    assert_eq!(job(&setup.org.admin_key, &first).await["state"], "failed");
    assert_eq!(
        job(&setup.org.admin_key, &second).await["state"],
        "queued",
        "the next job is the next runner's"
    );
    let stopped = runner
        .events()
        .into_iter()
        .find(|e| e["event"] == "runner.stopped")
        .unwrap_or_else(|| panic!("no stop line: {}", runner.log()));
    assert_eq!(stopped["claimed"], 1, "{stopped}");
    assert_eq!(stopped["failed"], 1, "{stopped}");
}

#[tokio::test]
async fn a_runner_exits_0_once_no_job_came_for_its_idle_time_counted_from_its_last_job() {
    let setup = Setup::new("idle-exit").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let env = setup.env(&base, &runner_id, &token);
    // Queued before it starts: the runner runs it, then waits its idle time from its end.
    let queued = setup
        .enqueue(&json!({"task": "one"}), &requirements("prompt"))
        .await;
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo done", "--idle-exit", "2"],
        &env,
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert_eq!(
        job(&setup.org.admin_key, &queued).await["state"],
        "succeeded"
    );
    let events: Vec<String> = runner
        .events()
        .iter()
        .filter_map(|e| e["event"].as_str().map(str::to_owned))
        .collect();
    let completed = events
        .iter()
        .position(|e| e == "job.completed")
        .unwrap_or_else(|| panic!("the job completed: {}", runner.log()));
    let idle = events
        .iter()
        .position(|e| e == "runner.idle_exit")
        .unwrap_or_else(|| panic!("it left for being idle: {}", runner.log()));
    assert!(
        completed < idle,
        "idle only after its job: {}",
        runner.log()
    );
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active", "left, not lost: {record}");
}

#[tokio::test]
async fn sigterm_hands_an_ephemeral_runners_job_back_at_once() {
    let setup = Setup::new("ephemeral-sigterm").await;
    let base = base_url();
    // Registered for one job as well: the hand-back spends its identity all the same.
    let (runner_id, token) = setup.register_with(&["--ephemeral"]);
    let env = setup.env(&base, &runner_id, &token);
    let given_back = setup
        .enqueue(&json!({"task": "give back"}), &requirements("prompt"))
        .await;
    let pid_file = setup.scratch.path("pid-ephemeral");
    let command = format!(
        "echo $$ > {}; while true; do sleep 0.2; done",
        pid_file.display()
    );
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &[
            "--exec",
            &command,
            "--ephemeral",
            "--idle-exit",
            "60",
            "--drain-timeout",
            "0",
            "--grace",
            "1",
        ],
        &env,
    );
    let pid = started_command(&pid_file).await;
    runner.signal("TERM");
    let status = runner.exit(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert!(runner.has_event("job.given_back"), "{}", runner.log());
    assert!(!pid_alive(&pid), "the command was stopped");
    handed_back(&setup.org, &given_back, &runner_id).await;
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "draining", "{record}");
    assert_eq!(record["activeClaims"], 0, "{record}");
    edgerunner_e2e::recovery::fire_cron().await;
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "revoked", "{record}");
    assert_eq!(
        job(&setup.org.admin_key, &given_back).await["state"],
        "queued",
        "its job waits for the next runner"
    );
}

#[tokio::test]
async fn a_runner_registered_ephemeral_takes_one_job_and_the_server_retires_it() {
    let setup = Setup::new("ephemeral-registered").await;
    let base = base_url();
    let key = setup.org.admin_key.clone();
    // One job needs a capacity of one, and the flag is a boolean.
    for body in [
        json!({"ephemeral": true, "maxConcurrentJobs": 2}),
        json!({"ephemeral": "yes"}),
    ] {
        let mut registration = json!({
            "name": unique("one-job"), "runnerKey": unique("one-job"),
            "capabilities": {"executionKinds": ["prompt"], "runtimes": [RUNTIME]},
        });
        for (field, value) in body.as_object().expect("an object") {
            registration[field] = value.clone();
        }
        post("/api/remote-runners", Some(&key), &registration)
            .await
            .expect_error(422, "INVALID_FIELD");
    }
    let (runner_id, token) = setup.register_with(&["--ephemeral"]);
    let record = runner_record(&key, &runner_id).await;
    assert_eq!(record["ephemeral"], true, "{record}");
    assert_eq!(record["maxConcurrentJobs"], 1, "{record}");
    // Beside its admin state: whether it talks to the server.
    assert_eq!(
        record["connection"],
        json!({"status": "never_connected", "since": null}),
        "{record}"
    );
    let first = setup
        .enqueue(&json!({"n": 1}), &requirements("prompt"))
        .await;
    let second = setup
        .enqueue(&json!({"n": 2}), &requirements("prompt"))
        .await;
    let env = setup.env(&base, &runner_id, &token);
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo done", "--ephemeral"],
        &env,
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert_eq!(job(&key, &first).await["state"], "succeeded");
    assert_eq!(job(&key, &second).await["state"], "queued");

    // Its grant drained it: spent, it is offered nothing, and no admin puts it back to work.
    let record = runner_record(&key, &runner_id).await;
    assert_eq!(record["state"], "draining", "{record}");
    assert_eq!(
        record["stateReason"], "ephemeral: took its one job",
        "{record}"
    );
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["actions"], json!(["rotate", "revoke"]), "{record}");
    assert_eq!(record["connection"]["status"], "online", "{record}");
    patch(
        &format!("/api/remote-runners/{runner_id}"),
        &key,
        &json!({"status": "active", "reason": "one more job"}),
    )
    .await
    .expect_error(409, "ILLEGAL_RUNNER_TRANSITION");

    // The cron pass retires it, with its event; its token opens no session again.
    edgerunner_e2e::recovery::fire_cron().await;
    let record = runner_record(&key, &runner_id).await;
    assert_eq!(record["state"], "revoked", "{record}");
    assert_eq!(
        record["stateReason"], "ephemeral: its one job ended",
        "{record}"
    );
    let events = get(&format!("/api/remote-runners/{runner_id}/events"), &key)
        .await
        .expect(200);
    let revoked: Vec<&Value> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "runner.revoked")
        .collect();
    assert_eq!(revoked.len(), 1, "{events}");
    assert_eq!(revoked[0]["actor"], "system:cron", "{events}");
    let mut again = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo again", "--ephemeral"],
        &env,
    );
    let status = again.exit(Duration::from_secs(60)).await;
    assert!(
        !status.success(),
        "a revoked runner started: {}",
        again.log()
    );
    assert_eq!(job(&key, &second).await["state"], "queued");

    // Not seen for 20 minutes (moved back here): offline since its last sight.
    let moved = d1_rows(&d1(&format!(
        "UPDATE runners SET last_seen_at = last_seen_at - 20 * 60000 WHERE id = {} RETURNING id",
        sql_text(&runner_id)
    )));
    assert_eq!(moved.len(), 1, "{moved:?}");
    let record = runner_record(&key, &runner_id).await;
    assert_eq!(record["connection"]["status"], "offline", "{record}");
    assert_eq!(
        record["connection"]["since"], record["lastSeenAt"],
        "{record}"
    );

    // Its record stays for its day; once its job is archived and the day is over (moved back
    // here), the cron pass deletes it.
    edgerunner_e2e::archive::archive(&key, &first)
        .await
        .expect(200);
    edgerunner_e2e::recovery::fire_cron().await;
    assert_eq!(
        get_runner(&key, &runner_id).await.status,
        200,
        "kept for its day"
    );
    let moved = d1_rows(&d1(&format!(
        "UPDATE runners SET revoked_at = revoked_at - 2 * 86400000 WHERE id = {} RETURNING id",
        sql_text(&runner_id)
    )));
    assert_eq!(moved.len(), 1, "{moved:?}");
    edgerunner_e2e::recovery::fire_cron().await;
    assert_eq!(get_runner(&key, &runner_id).await.status, 404, "deleted");

    // For a pod's init container: the identity as files, the token never printed.
    use std::os::unix::fs::PermissionsExt as _;
    let dir = setup.scratch.path("identity");
    std::fs::create_dir_all(&dir).expect("identity dir");
    let register = registration(&[
        "--ephemeral",
        "--identity-dir",
        dir.to_str().expect("UTF-8 path"),
    ]);
    let register: Vec<&str> = register.iter().map(String::as_str).collect();
    let answer = admin(&setup.scratch, &setup.org, &register);
    assert_eq!(answer.get("bootstrapToken"), None, "{answer}");
    let id = std::fs::read_to_string(dir.join("runner-id")).expect("runner-id");
    assert_eq!(answer["runner"]["id"], id.as_str(), "{answer}");
    assert_eq!(answer["runner"]["ephemeral"], true, "{answer}");
    let token_file = dir.join("bootstrap-token");
    let mode = std::fs::metadata(&token_file)
        .expect("token")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let whoami = run(
        &setup.scratch,
        &[
            "runner",
            "whoami",
            "--server",
            &base,
            "--runner-id",
            &id,
            "--bootstrap-token-file",
            token_file.to_str().expect("UTF-8 path"),
        ],
        &[],
    );
    assert!(whoami.status.success(), "{}", text(&whoami));
    // An identity is never overwritten, and nothing is registered then.
    let count = |answer: Value| answer["runners"].as_array().map(Vec::len);
    let before = count(
        get("/api/remote-runners?limit=1000", &key)
            .await
            .expect(200),
    );
    let mut again = vec!["admin", "--server", base.as_str(), "--json"];
    again.extend_from_slice(&register);
    let refused = run(&setup.scratch, &again, &[("EDGERUNNER_API_KEY", &key)]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("holds an identity already"),
        "{}",
        text(&refused)
    );
    let after = count(
        get("/api/remote-runners?limit=1000", &key)
            .await
            .expect(200),
    );
    assert_eq!(before, after);
}

/// The organization's runners whose names start with `prefix` (a pool's), as listed.
async fn runners_named(key: &str, prefix: &str) -> Vec<Value> {
    let runners = get("/api/remote-runners?limit=1000", key).await.expect(200);
    runners["runners"]
        .as_array()
        .expect("runners")
        .iter()
        .filter(|r| r["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .cloned()
        .collect()
}

/// The status lines `runner pool` printed so far (its own lines, not its processes').
fn pool_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("pool "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_pool_follows_its_queue_from_its_floor_and_back_one_fresh_runner_per_job() {
    let setup = Setup::new("pool").await;
    let base = base_url();
    let key = setup.org.admin_key.clone();
    let prefix = unique("pool");
    let work = setup.scratch.path("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let log = setup.scratch.path("pool.log");
    let floor = "pool 1-3: 1 alive (0 busy) · 0 queued · wants 1";
    let mut pool = command(
        &setup.scratch,
        &[
            "runner",
            "pool",
            "--min",
            "1",
            "--max",
            "3",
            "--idle-exit",
            "2",
            "--interval",
            "0.3",
            "--name",
            &prefix,
            "--execution-kind",
            "prompt",
            "--runtime",
            RUNTIME,
            "--",
            "--exec",
            "sleep 1; echo done",
            "--poll-interval",
            "0.2",
            "--work-dir",
            work.to_str().expect("UTF-8 path"),
        ],
        &[("EVALGATE_BASE_URL", &base), ("EDGERUNNER_API_KEY", &key)],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("pool log"))
    .spawn()
    .expect("the pool starts");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // Its floor: one process, waiting.
    eventually("the pool keeps its floor", Duration::from_secs(30), || {
        pool_lines(&log).iter().any(|l| l == floor)
    })
    .await;
    // Three jobs: three processes run them (the floor's and two more), each its own runner.
    let mut jobs = Vec::new();
    for n in 0..3 {
        jobs.push(
            setup
                .enqueue(&json!({"n": n}), &requirements("prompt"))
                .await,
        );
    }
    for id in &jobs {
        job_in_state(&setup.org, id, &["succeeded"], Duration::from_secs(90)).await;
    }
    assert!(
        pool_lines(&log).iter().any(|l| l.contains("· starting ")),
        "{}",
        log_text()
    );
    let claims: Vec<Value> = log_text()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == "job.claimed")
        .collect();
    assert_eq!(claims.len(), 3, "{}", log_text());
    // And back to its floor once they are done.
    eventually(
        "the pool comes back to its floor",
        Duration::from_secs(60),
        || pool_lines(&log).iter().filter(|l| *l == floor).count() >= 2,
    )
    .await;
    let pooled = runners_named(&key, &prefix).await;
    let ran: Vec<&Value> = pooled.iter().filter(|r| r["completedJobs"] == 1).collect();
    assert_eq!(ran.len(), 3, "one runner per job: {pooled:?}");
    assert!(pooled.iter().all(|r| r["ephemeral"] == true), "{pooled:?}");
    assert!(
        ran.iter()
            .all(|r| r["state"] == "draining" || r["state"] == "revoked"),
        "{ran:?}"
    );

    // SIGTERM: its floor process leaves without a job and the pool drains its runner.
    let status = Command::new("kill")
        .args(["-TERM", &pool.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = pool.try_wait().expect("try_wait") {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not stop: {}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "{exit}: {}", log_text());
    edgerunner_e2e::recovery::fire_cron().await;
    let left: Vec<Value> = runners_named(&key, &prefix)
        .await
        .into_iter()
        .filter(|r| r["state"] != "revoked")
        .collect();
    assert!(
        left.is_empty(),
        "every runner of the pool is retired: {left:?}"
    );
}
