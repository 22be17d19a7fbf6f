//! `edgerunner admin` as an operator uses it, against a real local server: `jobs logs` follows
//! a running job (driven here as a runner over HTTP) and exits by its outcome; the release
//! commands make, promote, show and list releases; `jobs enqueue` builds requirements from
//! flags, and a refusal names the field and the shape expected; `runners list` shows ages and
//! `jobs list --state` filters.
//!
//! The binary is `EDGERUNNER_BIN`; every test fails without it or without `BASE_URL`. Each test
//! makes its own organization; every wait is a bounded poll on a condition.

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

// ---------------------------------------------------------------------------------------------
// jobs logs
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn logs_follow_prints_a_running_jobs_lines_in_order_and_exits_zero_when_it_succeeds() {
    let org = bootstrap_org("cli-admin-logs-ok");
    let scratch = Scratch::new("logs-ok");
    let mut job = RunningJob::start(&org).await;
    let id = job.id();
    job.send(
        ChunkKind::Log,
        json!({ "event": "started", "command": "./evaluate.sh", "wallSeconds": 120 }),
    )
    .await;
    job.lines(&[
        ("stdout", "out 1"),
        ("stderr", "err 1"),
        ("stdout", "out 2"),
    ])
    .await;

    let mut follow = Background::start(
        &org,
        &scratch,
        &["jobs", "logs", &id, "--follow", "--interval", "0.2"],
    );
    // What is stored already is printed, while the job still runs.
    follow
        .until("the first lines", Duration::from_secs(20), |out, err| {
            out.contains("out 2") && err.contains("err 1")
        })
        .await;

    // Without --follow, a running job prints what is there and exits 3 (not finished).
    let snapshot = run(&org, &["jobs", "logs", &id]);
    assert_eq!(snapshot.status.code(), Some(3), "{}", shown(&snapshot));
    assert_eq!(stdout(&snapshot), "out 1\nout 2\n", "{}", shown(&snapshot));
    assert_eq!(
        stderr(&snapshot),
        "[attempt 1] started: ./evaluate.sh\nerr 1\n",
        "{}",
        shown(&snapshot)
    );

    // New chunks reach the follower as they are stored.
    let step: Value = serde_json::from_str(r#"{"step": 1, "score": 0.50}"#).expect("JSON");
    job.send(ChunkKind::Trajectory, step).await;
    // The runner's compact shape after the one-object-per-line shape: both read alike.
    job.segments(&[("stdout", "out 3"), ("stderr", "err 2")])
        .await;
    follow
        .until("the later lines", Duration::from_secs(20), |out, err| {
            out.contains("out 3") && err.contains("err 2")
        })
        .await;
    job.send(
        ChunkKind::Log,
        json!({ "event": "exited", "ending": "exited", "exitCode": 0, "signal": null,
                "killed": false, "durationMs": 42 }),
    )
    .await;
    job.complete(&org, CompletionStatus::Succeeded).await;

    let status = follow.exit(Duration::from_secs(20)).await;
    assert_eq!(
        status.code(),
        Some(0),
        "succeeded: {}\n{}",
        follow.out(),
        follow.err()
    );
    assert_eq!(
        follow.out(),
        "out 1\nout 2\n[trajectory] {\"score\":0.50,\"step\":1}\nout 3\n",
        "stdout: the job's stdout and trajectory, in order, each once"
    );
    assert_eq!(
        follow.err(),
        format!(
            "[attempt 1] started: ./evaluate.sh\nerr 1\nerr 2\n\
             [attempt 1] exited: exitCode=0 · 42 ms\n[job {id}] succeeded\n"
        ),
        "stderr: the job's stderr and the runner's events, in order, each once"
    );

    // `--json`: one object per line or chunk, in stream order, all on stdout.
    let output = run(&org, &["--json", "jobs", "logs", &id]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let objects: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let summary: Vec<(u64, String)> = objects
        .iter()
        .map(|o| {
            let what = match (&o["stream"], &o["event"]) {
                (Value::String(stream), _) => {
                    format!("{stream}:{}", o["line"].as_str().unwrap_or(""))
                }
                (_, Value::String(event)) => format!("event:{event}"),
                _ => format!("{}:{}", o["kind"].as_str().unwrap_or(""), o["payload"]),
            };
            (o["sequence"].as_u64().expect("sequence"), what)
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, "event:started".to_owned()),
            (1, "stdout:out 1".to_owned()),
            (1, "stderr:err 1".to_owned()),
            (1, "stdout:out 2".to_owned()),
            (2, "trajectory:{\"score\":0.50,\"step\":1}".to_owned()),
            (3, "stdout:out 3".to_owned()),
            (3, "stderr:err 2".to_owned()),
            (4, "event:exited".to_owned()),
        ],
        "{}",
        shown(&output)
    );
    assert!(objects.iter().all(|o| o["attempt"] == 1), "{objects:?}");

    // One attempt's stream: attempt 1 is all of it, attempt 2 never ran.
    let first = run(&org, &["jobs", "logs", &id, "--attempt", "1"]);
    assert_eq!(stdout(&first), follow.out(), "{}", shown(&first));
    let second = run(&org, &["jobs", "logs", &id, "--attempt", "2"]);
    assert_eq!(second.status.code(), Some(0), "{}", shown(&second));
    assert_eq!(stdout(&second), "", "{}", shown(&second));

    // Archived (its rows leave D1 for R2, issue 40), the job's logs read exactly as before.
    let plain = run(&org, &["jobs", "logs", &id]);
    let archived = post(
        &format!("/api/remote-runners/jobs/{id}/archive"),
        Some(&org.admin_key),
        &json!({}),
    )
    .await
    .expect(200);
    assert_eq!(archived["state"], "pruned", "{archived}");
    let again = run(&org, &["jobs", "logs", &id]);
    assert_eq!(again.status.code(), Some(0), "{}", shown(&again));
    assert_eq!(stdout(&again), stdout(&plain), "{}", shown(&again));
    assert_eq!(stderr(&again), stderr(&plain), "{}", shown(&again));
    let json_again = run(&org, &["--json", "jobs", "logs", &id]);
    assert_eq!(
        stdout(&json_again),
        stdout(&output),
        "{}",
        shown(&json_again)
    );
}

#[tokio::test]
async fn logs_follow_exits_one_when_the_job_fails() {
    let org = bootstrap_org("cli-admin-logs-failed");
    let scratch = Scratch::new("logs-failed");
    let mut job = RunningJob::start(&org).await;
    let id = job.id();
    let mut follow = Background::start(
        &org,
        &scratch,
        &["jobs", "logs", &id, "--follow", "--interval", "0.2"],
    );
    job.lines(&[("stderr", "Traceback: boom"), ("stdout", "partial")])
        .await;
    follow
        .until("the lines", Duration::from_secs(20), |out, err| {
            out.contains("partial") && err.contains("boom")
        })
        .await;
    job.lines(&[("stderr", "last words")]).await;
    job.complete(&org, CompletionStatus::Failed).await;

    let status = follow.exit(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(1), "failed: {}", follow.err());
    assert_eq!(follow.out(), "partial\n");
    assert_eq!(
        job_lines(&follow.err()),
        vec!["Traceback: boom", "last words"],
        "{}",
        follow.err()
    );
    assert!(
        follow.err().ends_with(&format!("[job {id}] failed\n")),
        "{}",
        follow.err()
    );

    // Read again after the end: the same lines, the same status.
    let again = run(&org, &["jobs", "logs", &id]);
    assert_eq!(again.status.code(), Some(1), "{}", shown(&again));
    assert_eq!(stdout(&again), "partial\n");

    // Another organization's job, or none at all: a clear refusal.
    let other = bootstrap_org("cli-admin-logs-other");
    let foreign = run(&other, &["jobs", "logs", &id]);
    assert_eq!(foreign.status.code(), Some(1), "{}", shown(&foreign));
    assert!(
        stderr(&foreign).contains("404 NOT_FOUND"),
        "{}",
        shown(&foreign)
    );
}

#[tokio::test]
async fn stream_pages_carry_the_jobs_state_as_of_the_page() {
    let org = bootstrap_org("cli-admin-stream-state");
    let mut job = RunningJob::start(&org).await;
    let id = job.id();
    let page = |after: &str| format!("/api/remote-runners/jobs/{id}/stream?after={after}");
    let read = get(&page("0.-1"), &org.admin_key).await.expect(200);
    assert_eq!(read["state"], "running", "{read}");
    assert_eq!(read["dispatchAttempt"], 1, "{read}");
    assert_eq!(read["chunks"], json!([]), "{read}");
    assert_eq!(read["cursor"], "0.-1", "{read}");

    job.lines(&[("stdout", "x")]).await;
    job.complete(&org, CompletionStatus::Succeeded).await;
    let read = get(&page("0.-1"), &org.admin_key).await.expect(200);
    assert_eq!(read["state"], "succeeded", "{read}");
    assert_eq!(read["more"], false, "{read}");
    assert_eq!(read["cursor"], "1.0", "{read}");
    let after = get(&page("1.0"), &org.admin_key).await.expect(200);
    assert_eq!(after["chunks"], json!([]), "{after}");
    assert_eq!(after["state"], "succeeded", "{after}");
}

// ---------------------------------------------------------------------------------------------
// Releases
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn releases_are_made_promoted_shown_and_listed_from_the_cli() {
    let org = bootstrap_org("cli-admin-releases");
    let scratch = Scratch::new("releases");
    let name = unique("greeter");

    let artifact = ok(
        &org,
        &[
            "releases",
            "create-artifact",
            "--kind",
            "prompt",
            "--name",
            &name,
        ],
    );
    let artifact = artifact.trim();
    assert!(artifact.starts_with("art_"), "the id alone: {artifact:?}");
    let again = run(
        &org,
        &[
            "releases",
            "create-artifact",
            "--kind",
            "prompt",
            "--name",
            &name,
        ],
    );
    assert_eq!(again.status.code(), Some(1), "{}", shown(&again));
    assert!(
        stderr(&again).contains("409 ARTIFACT_EXISTS"),
        "{}",
        shown(&again)
    );

    // From a file, number lexemes as written (they are hashed).
    let text = r#"{"template": "Bonjour {{name}} ✨", "temperature": 1.50, "tiny": 1e-07}"#;
    let file = scratch.path("content.json");
    std::fs::write(&file, text).expect("content file");
    let from_file = format!("@{}", file.display());
    let added = run(
        &org,
        &["releases", "add-version", artifact, "--content", &from_file],
    );
    assert!(added.status.success(), "{}", shown(&added));
    let v1 = stdout(&added).trim().to_owned();
    let v1_id: u64 = v1
        .parse()
        .unwrap_or_else(|_| panic!("a version id: {v1:?}"));
    let hash = h(&lexical(text));
    assert!(
        stderr(&added).contains(&hash),
        "the hash on stderr: {}",
        shown(&added)
    );
    // Inline.
    let v2 = ok(
        &org,
        &[
            "releases",
            "add-version",
            artifact,
            "--content",
            r#"{"template": "v2"}"#,
        ],
    );
    let v2_id: u64 = v2.trim().parse().expect("a version id");
    assert!(v2_id > v1_id);

    let version = ok_json(&org, &["releases", "show", &v1]);
    assert_eq!(version["contentHash"], hash.as_str(), "{version}");
    assert_eq!(version["content"], lexical(text), "{version}");
    assert_eq!(version["promotions"], json!([]), "{version}");

    let promoted = ok(
        &org,
        &["releases", "promote", &v1, "--environment", "staging"],
    );
    assert!(promoted.contains("promoted to staging"), "{promoted}");
    let first = ok_json(&org, &["releases", "promote", &v1, "--to", "staging"]);
    let repeat = ok_json(&org, &["releases", "promote", &v1, "--to", "staging"]);
    assert_eq!(first["promotedAt"], repeat["promotedAt"], "idempotent");
    ok(&org, &["releases", "promote", &v1, "--to", "prod"]);
    let wrong = run(&org, &["releases", "promote", &v1, "--to", "production"]);
    assert_eq!(wrong.status.code(), Some(1), "{}", shown(&wrong));
    assert!(
        stderr(&wrong).contains("422 INVALID_ENVIRONMENT"),
        "{}",
        shown(&wrong)
    );

    let shown_artifact = ok_json(&org, &["releases", "show", artifact]);
    let versions: Vec<(u64, Value)> = shown_artifact["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["id"].as_u64().expect("id"), v["promotions"].clone()))
        .collect();
    assert_eq!(
        versions,
        vec![(v2_id, json!([])), (v1_id, json!(["staging", "prod"]))],
        "newest first, with promotions"
    );
    let human = ok(&org, &["releases", "show", artifact]);
    assert!(
        human.contains(&name) && human.contains("staging, prod"),
        "{human}"
    );
    let human = ok(&org, &["releases", "show", &v1]);
    assert!(
        human.contains("\"temperature\": 1.50"),
        "content as stored: {human}"
    );

    // The list: this organization's artifacts, newest first, with their latest version.
    let scorer = ok(
        &org,
        &[
            "releases",
            "create-artifact",
            "--kind",
            "scorer",
            "--name",
            &name,
        ],
    );
    let scorer = scorer.trim();
    let listed = ok_json(&org, &["releases", "list"]);
    let rows: Vec<(String, String, Value)> = listed["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .map(|a| {
            (
                a["id"].as_str().expect("id").to_owned(),
                a["kind"].as_str().expect("kind").to_owned(),
                a["latestVersionId"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (scorer.to_owned(), "scorer".to_owned(), Value::Null),
            (artifact.to_owned(), "prompt".to_owned(), json!(v2_id)),
        ],
        "{listed}"
    );
    assert_eq!(listed["nextCursor"], Value::Null);
    let prompts = ok_json(&org, &["releases", "list", "--kind", "prompt"]);
    assert_eq!(
        prompts["artifacts"].as_array().map(Vec::len),
        Some(1),
        "{prompts}"
    );
    let page = ok_json(&org, &["releases", "list", "--limit", "1"]);
    let cursor = page["nextCursor"].as_str().expect("a next page").to_owned();
    let rest = get(
        &format!("/api/releases/artifacts?limit=1&cursor={cursor}"),
        &org.admin_key,
    )
    .await
    .expect(200);
    assert_eq!(rest["artifacts"][0]["id"], artifact, "{rest}");
    assert_eq!(rest["nextCursor"], Value::Null, "{rest}");
    get("/api/releases/artifacts?kind=model", &org.admin_key)
        .await
        .expect_error(422, "INVALID_KIND");
    get("/api/releases/artifacts?cursor=nope", &org.admin_key)
        .await
        .expect_error(422, "INVALID_CURSOR");
    // The page size is 1–1000: one past either end is refused, the ends are served.
    for limit in ["0", "1001"] {
        get(
            &format!("/api/releases/artifacts?limit={limit}"),
            &org.admin_key,
        )
        .await
        .expect_error(422, "INVALID_LIMIT");
    }
    for limit in ["1", "1000"] {
        get(
            &format!("/api/releases/artifacts?limit={limit}"),
            &org.admin_key,
        )
        .await
        .expect(200);
    }
    let human = ok(&org, &["releases", "list"]);
    assert!(
        human.contains(artifact) && human.contains(scorer),
        "{human}"
    );

    // Another organization sees none of it.
    let other = bootstrap_org("cli-admin-releases-other");
    let theirs = ok_json(&other, &["releases", "list"]);
    assert_eq!(theirs["artifacts"], json!([]), "{theirs}");
    let foreign = run(&other, &["releases", "show", artifact]);
    assert!(
        stderr(&foreign).contains("404 NOT_FOUND"),
        "{}",
        shown(&foreign)
    );
}

// ---------------------------------------------------------------------------------------------
// Enqueue with flags, and refusals that show the shape
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn enqueue_with_flags_stores_exactly_those_requirements() {
    let org = bootstrap_org("cli-admin-enqueue-flags");
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let version = release.version_id.to_string();
    let subject = [
        "--kind",
        "prompt",
        "--artifact",
        release.artifact_id.as_str(),
        "--version",
        version.as_str(),
        "--environment",
        "staging",
        "--input",
        r#"{"q": 1.50}"#,
    ];
    let enqueue = |key: &str, extra: &[&str]| {
        let mut args = vec!["jobs", "enqueue", "--idempotency-key", key];
        args.extend_from_slice(&subject);
        args.extend_from_slice(extra);
        run(&org, &[&["--json"], &args[..]].concat())
    };

    let key = unique("flags");
    let output = enqueue(
        &key,
        &[
            "--runtime",
            RUNTIME,
            "--cpu-seconds",
            "30",
            "--memory-mb",
            "256",
            "--wall-seconds",
            "90",
            "--output-bytes",
            "65536",
            "--network",
            "https://b.example.com",
            "--network",
            "https://A.example.com:443",
        ],
    );
    assert!(output.status.success(), "{}", shown(&output));
    let answer: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let stored = job(&org.admin_key, answer["id"].as_str().expect("job id")).await;
    assert_eq!(
        stored["requirements"],
        json!({
            "executionKind": "prompt",
            "runtime": RUNTIME,
            "limits": {"cpuSeconds": 30, "memoryMb": 256, "wallSeconds": 90, "outputBytes": 65536},
            "network": {"mode": "allowlist", "origins": ["https://a.example.com", "https://b.example.com"]},
            "streaming": false,
            "cancellation": false,
            "problemType": null,
            "external": false,
            "tags": [],
        }),
        "{stored}"
    );
    assert_eq!(
        stored["inputHash"],
        h(&lexical(r#"{"q": 1.50}"#)),
        "{stored}"
    );

    // deny_all, and the same job again by its key.
    let limits = [
        "--runtime",
        RUNTIME,
        "--cpu-seconds",
        "1",
        "--memory-mb",
        "1",
        "--wall-seconds",
        "1",
        "--output-bytes",
        "1",
    ];
    let deny_key = unique("deny");
    let deny = enqueue(
        &deny_key,
        &[&limits[..], &["--network", "deny_all"]].concat(),
    );
    assert!(deny.status.success(), "{}", shown(&deny));
    let deny: Value = serde_json::from_slice(&deny.stdout).expect("JSON");
    assert_eq!(deny["requirements"]["network"], json!({"mode": "deny_all"}));
    let replay = enqueue(&deny_key, &limits);
    let replay: Value = serde_json::from_slice(&replay.stdout).expect("JSON");
    assert_eq!(
        replay["id"], deny["id"],
        "no --network is deny_all: the same intent"
    );

    // A flag left out is named before anything is sent.
    let before = list_count(&org).await;
    let partial = enqueue(
        &unique("partial"),
        &["--runtime", RUNTIME, "--cpu-seconds", "1"],
    );
    assert_eq!(partial.status.code(), Some(1), "{}", shown(&partial));
    assert!(
        stderr(&partial).contains("missing --memory-mb, --wall-seconds, --output-bytes"),
        "{}",
        shown(&partial)
    );
    // The server's refusal names the field and the shape it expects.
    let document = run(
        &org,
        &[
            &["jobs", "enqueue", "--idempotency-key", &unique("doc")][..],
            &subject,
            &[
                "--requirements",
                &format!(r#"{{"executionKind": "prompt", "runtime": "{RUNTIME}"}}"#),
            ],
        ]
        .concat(),
    );
    assert_eq!(document.status.code(), Some(1), "{}", shown(&document));
    assert!(
        stderr(&document).contains(
            "422 INVALID_REQUIREMENTS: requirements.limits is required: \
             {\"cpuSeconds\": n, \"memoryMb\": n, \"wallSeconds\": n, \"outputBytes\": n}"
        ),
        "{}",
        shown(&document)
    );
    let origin = enqueue(
        &unique("origin"),
        &[&limits[..], &["--network", "http://plain.example"]].concat(),
    );
    assert_eq!(origin.status.code(), Some(1), "{}", shown(&origin));
    assert!(
        stderr(&origin).contains("requirements.network.origins[0]")
            && stderr(&origin).contains("https"),
        "{}",
        shown(&origin)
    );
    assert_eq!(
        list_count(&org).await,
        before,
        "no job was made by a refusal"
    );

    // Over HTTP: no requirements at all, and limits of the wrong type.
    let body = |requirements: Value| {
        let mut body = enqueue_body(
            &unique("http"),
            &release,
            "staging",
            &json!({}),
            &json!(null),
        );
        body["requirements"] = requirements;
        body
    };
    let mut missing = body(Value::Null);
    missing
        .as_object_mut()
        .expect("object")
        .remove("requirements");
    let reply = edgerunner_e2e::jobs::enqueue(&org.admin_key, &missing).await;
    reply.expect_error(422, "INVALID_REQUIREMENTS");
    let message = reply.json()["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.starts_with("requirements is required: {\"executionKind\": "),
        "{message}"
    );
    for field in [
        "\"runtime\"",
        "\"limits\"",
        "\"cpuSeconds\"",
        "\"outputBytes\"",
    ] {
        assert!(message.contains(field), "{field} in {message}");
    }
    let mut wrong = requirements("prompt");
    wrong["limits"] = json!([60, 512, 120, 1024]);
    let reply = edgerunner_e2e::jobs::enqueue(&org.admin_key, &body(wrong)).await;
    reply.expect_error(422, "INVALID_REQUIREMENTS");
    let message = reply.json()["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.starts_with("requirements.limits must be an object: {\"cpuSeconds\": n,"),
        "{message}"
    );
}

async fn list_count(org: &Org) -> usize {
    get("/api/remote-runners/jobs?limit=500", &org.admin_key)
        .await
        .expect(200)["jobs"]
        .as_array()
        .map_or(0, Vec::len)
}

// ---------------------------------------------------------------------------------------------
// Runner ages and the job state filter
// ---------------------------------------------------------------------------------------------

/// The cells of the table row whose first cell is `id` (cells are two or more spaces apart).
fn row_of(table: &str, id: &str) -> Vec<String> {
    table
        .lines()
        .find(|line| line.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("no row for {id}:\n{table}"))
        .split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .map(str::to_owned)
        .collect()
}

fn column(table: &str, name: &str) -> usize {
    let header = table.lines().next().expect("a header");
    header
        .split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .position(|cell| cell == name)
        .unwrap_or_else(|| panic!("no column {name}: {header}"))
}

fn is_recent(age: &str) -> bool {
    age == "just now"
        || age
            .strip_suffix(" s ago")
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n < 60)
}

#[tokio::test]
async fn runners_list_shows_heartbeat_ages_and_jobs_list_filters_by_state() {
    let org = bootstrap_org("cli-admin-ages");
    let (idle, _) = register_simple_runner(&org, &unique("idle")).await;
    let running = RunningJob::start(&org).await;
    let busy = running.runner.id.clone();
    // A second job stays queued: the only runner is at capacity.
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let queued = enqueue_job(
        &org.admin_key,
        &release,
        &json!({}),
        &requirements("prompt"),
    )
    .await;
    let queued = queued["id"].as_str().expect("job id").to_owned();

    let table = ok(&org, &["runners", "list"]);
    let heartbeat = column(&table, "LAST HEARTBEAT");
    let seen = column(&table, "LAST SEEN");
    let idle_row = row_of(&table, &idle);
    assert_eq!(idle_row[heartbeat], "never", "{table}");
    let busy_row = row_of(&table, &busy);
    assert!(is_recent(&busy_row[heartbeat]), "{table}");
    assert!(is_recent(&busy_row[seen]), "{table}");

    let ids = |args: &[&str]| -> Vec<String> {
        let answer = ok_json(&org, args);
        answer["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| j["id"].as_str().expect("id").to_owned())
            .collect()
    };
    assert_eq!(
        ids(&["jobs", "list", "--state", "running"]),
        vec![running.id()]
    );
    assert_eq!(
        ids(&["jobs", "list", "--state", "queued"]),
        vec![queued.clone()]
    );
    assert_eq!(
        ids(&["jobs", "list", "--state", "succeeded"]),
        Vec::<String>::new()
    );
    assert_eq!(ids(&["jobs", "list"]).len(), 2);
    let human = ok(&org, &["jobs", "list", "--state", "running"]);
    assert!(
        human.contains(&running.id()) && !human.contains(&queued),
        "{human}"
    );

    let wrong = run(&org, &["jobs", "list", "--state", "done"]);
    assert_eq!(
        wrong.status.code(),
        Some(2),
        "a usage error: {}",
        shown(&wrong)
    );
    assert!(
        stderr(&wrong).contains("cancel_requested"),
        "{}",
        shown(&wrong)
    );
}

// ---------------------------------------------------------------------------------------------
// Enrollment policy and tokens
// ---------------------------------------------------------------------------------------------

/// `edgerunner runner enroll` of a fresh key into `org`, with `EDGERUNNER_ENROLLMENT_TOKEN`
/// set to `token` when given.
fn enroll_runner(scratch: &Scratch, org: &Org, token: Option<&str>) -> Output {
    let config = scratch.path(&unique("runner")).join("runner.json");
    let mut command = Command::new(required_env("EDGERUNNER_BIN"));
    command
        .args([
            "runner",
            "enroll",
            "--server",
            &base_url(),
            "--organization",
            &org.id,
        ])
        .arg("--config")
        .arg(&config)
        .args(["--execution-kind", "prompt", "--runtime", RUNTIME, "--json"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null());
    if let Some(token) = token {
        command.env("EDGERUNNER_ENROLLMENT_TOKEN", token);
    }
    command.output().expect("edgerunner runs")
}

#[tokio::test]
async fn enrollment_policy_and_tokens_are_set_issued_listed_and_revoked_from_the_cli() {
    let org = bootstrap_org("cli-enrollment");
    let scratch = Scratch::new("enrollment");
    assert_eq!(
        ok(&org, &["enrollment", "policy"]).trim(),
        format!("enrollment policy of {}: open", org.id)
    );
    assert_eq!(
        ok_json(&org, &["enrollment", "policy", "token"])["policy"],
        "token"
    );

    // Without a token the runner is refused, and told what to do.
    let refused = enroll_runner(&scratch, &org, None);
    assert_eq!(refused.status.code(), Some(1), "{}", shown(&refused));
    assert!(
        stderr(&refused).contains("ENROLLMENT_TOKEN_REQUIRED")
            && stderr(&refused).contains("EDGERUNNER_ENROLLMENT_TOKEN"),
        "{}",
        shown(&refused)
    );

    // A token for one enrollment, printed once with how to use it.
    let created = ok(
        &org,
        &[
            "enrollment",
            "tokens",
            "create",
            "--name",
            "rack 4",
            "--uses",
            "1",
            "--expires-in",
            "2h",
        ],
    );
    let token = created
        .split_whitespace()
        .find(|word| word.starts_with("ere_") && word.len() == 68)
        .unwrap_or_else(|| panic!("no token printed: {created}"))
        .to_owned();
    assert!(
        created.contains(&format!("EDGERUNNER_ENROLLMENT_TOKEN={token}")),
        "{created}"
    );
    let listed = ok(&org, &["enrollment", "tokens", "list"]);
    assert!(
        !listed.contains(&token[12..]),
        "the list shows no secret: {listed}"
    );
    assert!(
        listed.contains("rack 4") && listed.contains("0/1") && listed.contains("live"),
        "{listed}"
    );

    let enrolled = enroll_runner(&scratch, &org, Some(&token));
    assert!(enrolled.status.success(), "{}", shown(&enrolled));
    let answer: Value = serde_json::from_slice(&enrolled.stdout).expect("JSON");
    assert_eq!(answer["runner"]["state"], "pending_approval", "{answer}");
    // Its one use is spent: a second runner with it is refused.
    let again = enroll_runner(&scratch, &org, Some(&token));
    assert_eq!(again.status.code(), Some(1), "{}", shown(&again));
    assert!(
        stderr(&again).contains("ENROLLMENT_TOKEN_INVALID"),
        "{}",
        shown(&again)
    );

    let tokens = ok_json(&org, &["enrollment", "tokens", "list"]);
    let first = &tokens["enrollmentTokens"][0];
    assert_eq!(
        (first["uses"].clone(), first["state"].clone()),
        (json!(1), json!("used_up")),
        "{tokens}"
    );
    assert!(!tokens.to_string().contains(&token[12..]));

    // Revoke a live one: the runner holding it is refused.
    let second = ok_json(&org, &["enrollment", "tokens", "create", "--uses", "5"]);
    let second_token = second["enrollmentToken"]
        .as_str()
        .expect("token")
        .to_owned();
    let second_id = second["id"].as_str().expect("id").to_owned();
    let revoked = ok(&org, &["enrollment", "tokens", "revoke", &second_id]);
    assert!(
        revoked.contains(&format!("enrollment token {second_id} revoked")),
        "{revoked}"
    );
    let refused = enroll_runner(&scratch, &org, Some(&second_token));
    assert!(
        stderr(&refused).contains("ENROLLMENT_TOKEN_INVALID"),
        "{}",
        shown(&refused)
    );
    let twice = run(&org, &["enrollment", "tokens", "revoke", &second_id]);
    assert_eq!(twice.status.code(), Some(1), "{}", shown(&twice));
    assert!(stderr(&twice).contains("NOT_FOUND"), "{}", shown(&twice));

    // Closed refuses every runner (answered as a token policy is, so that a stranger cannot
    // tell them apart); open lets them in without a token.
    ok(&org, &["enrollment", "policy", "closed"]);
    let closed = enroll_runner(&scratch, &org, None);
    assert!(
        stderr(&closed).contains("ENROLLMENT_TOKEN_REQUIRED"),
        "{}",
        shown(&closed)
    );
    ok(&org, &["enrollment", "policy", "open"]);
    let open = enroll_runner(&scratch, &org, None);
    assert!(open.status.success(), "{}", shown(&open));

    // Bounds are usage errors before anything is sent (exit 2).
    for bad in [
        &["enrollment", "tokens", "create", "--uses", "1001"][..],
        &["enrollment", "tokens", "create", "--expires-in", "31d"],
        &["enrollment", "policy", "sometimes"],
    ] {
        let output = run(&org, bad);
        assert_eq!(output.status.code(), Some(2), "{bad:?}: {}", shown(&output));
    }
}
