//! The SDK and the `edgerunner` binary against a server double on a loopback port.
//!
//! - A claim answer that fails local verification is refused before anything runs: the double
//!   hands out a real session (with a job-signing key derived as the server derives it), then
//!   one claim answer spoiled in one way, then `204`. The binary must report the refusal, never
//!   run the command, and never ask for the input, heartbeat, stream or complete. Each spoiled
//!   answer is one of the checks the SDK makes: payload hash, signature, key id, organization,
//!   claim identity, validity window; a replayed nonce is checked through the library.
//! - Sessions are exchanged again before they expire, and once after a `401`.
//! - Retries happen only where they are safe, and re-send exactly the same bytes: a chunk whose
//!   answer was lost counts as stored when the server says it already has it; a completion
//!   re-sent after a transient failure is the same completion; a claim that may have reached
//!   the server is never repeated. Of the admin's writes, only a reap pass (safe to repeat) is
//!   sent again after a lost answer.
//! - A genuine job runs only with the artifact its envelope signs: one that cannot be read or
//!   does not match completes `failed` and the command never runs; its files are owner-only in
//!   a fresh private directory.
//! - A session bound to another runner or organization than configured is never used.
//! - `runner enroll` proves possession of its key; the double checks the proof as the server
//!   will.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use edgerunner::client::{Decision, RunnerClient};
use edgerunner::heartbeat::{ClaimStatus, Heartbeat, HeartbeatConfig};
use edgerunner::http::{ClientError, Http};
use edgerunner::log_payload::log_lines;
use edgerunner::retry::RetryPolicy;
use edgerunner::session::{BootstrapToken, Credentials};
use edgerunner::stream::{pump_lines, BatchLimits, ChunkStream, LogLine, OutputStream};
use edgerunner_protocol::chunk::{ChunkIdentity, ChunkKind};
use edgerunner_protocol::completion::{Evidence, EvidenceId};
use edgerunner_protocol::envelope::{
    sign, ArtifactId, ClaimId, CredentialGeneration, DispatchAttempt, EnvelopeRequirements,
    Environment, IdempotencyKey, JobEnvelope, JobId, JobSigning, MasterSigningSecret, Nonce,
    OrganizationId, RunnerId, Subject, SubjectKind,
};
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::keypair::{verify_enrollment_signature, PublicKey};
use edgerunner_protocol::stable_json;
use edgerunner_protocol::state::CompletionStatus;
use edgerunner_protocol::time::{Timestamp, UnixMillis};
use serde_json::{json, Value};

const RUNNER: &str = "run_double";
const ORG: &str = "org_double";

fn now() -> UnixMillis {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    UnixMillis::new(i64::try_from(millis).expect("fits")).expect("representable")
}

fn later(seconds: i64) -> Timestamp {
    Timestamp::from_instant(now().checked_add_seconds(seconds).expect("representable"))
}

fn signing(master: &str) -> JobSigning {
    JobSigning::derive(
        &MasterSigningSecret::new(master.repeat(32)).expect("long enough"),
        &RunnerId::parse(RUNNER).expect("id"),
        CredentialGeneration(1),
    )
}

fn envelope(nonce: u8) -> JobEnvelope {
    JobEnvelope {
        organization_id: OrganizationId::parse(ORG).expect("id"),
        job_id: JobId::parse("job_double").expect("id"),
        claim_id: ClaimId::parse("clm_double").expect("id"),
        runner_id: RunnerId::parse(RUNNER).expect("id"),
        dispatch_attempt: DispatchAttempt::FIRST,
        idempotency_key: IdempotencyKey::parse("idem").expect("id"),
        subject: Subject {
            kind: SubjectKind::parse("prompt").expect("kind"),
            artifact_id: ArtifactId::parse("art_1").expect("id"),
            version_id: 1,
            content_hash: stable_json::hash(&json!({"template": "t"})),
            environment: Environment::Staging,
        },
        input_hash: stable_json::hash(&json!({"question": "2+2"})),
        requirements: EnvelopeRequirements::from_value(json!({
            "executionKind": "prompt", "runtime": "python3.12",
            "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 30, "outputBytes": 1048576},
        }))
        .expect("requirements"),
        issued_at: later(0),
        expires_at: later(300),
        nonce: Nonce::from_random([nonce; 32]),
    }
}

/// A claim answer for `envelope`, signed with `key`.
fn assignment(envelope: &JobEnvelope, key: &JobSigning) -> Value {
    let signed = sign(envelope, &key.secret, &key.key_id);
    json!({
        "claim": {
            "id": envelope.claim_id.as_str(),
            "jobId": envelope.job_id.as_str(),
            "runnerId": RUNNER,
            "dispatchAttempt": envelope.dispatch_attempt.get(),
            "issuedAt": envelope.issued_at.as_str(),
            "expiresAt": envelope.expires_at.as_str(),
            "leaseExpiresAt": later(60).as_str(),
        },
        "signedJob": signed.to_json(),
    })
}

/// The server's genuine key and the spoiled answers, each named by the refusal it must cause.
fn spoiled() -> Vec<(&'static str, Value)> {
    let key = signing("k");
    let mut altered = assignment(&envelope(1), &key);
    altered["signedJob"]["envelope"]["requirements"]["runtime"] = "python3.13".into();

    let mut rehashed = assignment(&envelope(2), &key);
    rehashed["signedJob"]["envelope"]["inputHash"] =
        stable_json::hash(&json!("other")).as_str().into();
    rehashed["signedJob"]["payloadHash"] = stable_json::hash(&rehashed["signedJob"]["envelope"])
        .as_str()
        .into();

    let foreign_key = assignment(&envelope(3), &signing("x"));

    let mut other_org = envelope(4);
    other_org.organization_id = OrganizationId::parse("org_elsewhere").expect("id");
    let other_org = assignment(&other_org, &key);

    let mut other_claim = assignment(&envelope(5), &key);
    other_claim["claim"]["id"] = "clm_someone_else".into();

    let mut expired = envelope(6);
    expired.issued_at = later(-600);
    expired.expires_at = later(-300);
    let expired = assignment(&expired, &key);

    vec![
        ("PAYLOAD_HASH_MISMATCH", altered),
        ("SIGNATURE_INVALID", rehashed),
        ("SIGNING_KEY_MISMATCH", foreign_key),
        ("ORGANIZATION_MISMATCH", other_org),
        ("CLAIM_ID_MISMATCH", other_claim),
        ("CLAIM_EXPIRED", expired),
    ]
}

/// One request the double received.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    bearer: Option<String>,
    body: String,
}

type Handler = dyn Fn(&Received, usize) -> (u16, Option<Value>) + Send + Sync;

/// A server double on a loopback port. `handler` answers each request, given how many
/// requests to the same path came before it.
struct Double {
    url: String,
    requests: Arc<Mutex<Vec<Received>>>,
}

impl Double {
    fn start(handler: Box<Handler>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let handler: Arc<Handler> = Arc::from(handler);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = Arc::clone(&seen);
                let handler = Arc::clone(&handler);
                std::thread::spawn(move || serve(stream, &seen, handler.as_ref()));
            }
        });
        Self { url, requests }
    }

    /// A session, then the given claim answers in order, then `204`; `200` to anything else.
    fn with_claims(claims: Vec<Value>) -> Self {
        Self::start(Box::new(move |request, nth| match request.path.as_str() {
            "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
            "/api/remote-runners/self" => (200, Some(self_answer())),
            "/api/remote-runners/claim" => match claims.get(nth) {
                Some(answer) => (200, Some(answer.clone())),
                None => (204, None),
            },
            _ => (200, Some(json!({"cancelRequested": false}))),
        }))
    }

    fn received(&self) -> Vec<Received> {
        self.requests.lock().expect("lock").clone()
    }

    fn paths(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.path).collect()
    }

    fn count(&self, path: &str) -> usize {
        self.paths().iter().filter(|p| p.as_str() == path).count()
    }
}

fn session_answer(token: &str, expires_in: i64) -> Value {
    session_for(RUNNER, ORG, token, expires_in)
}

fn session_for(runner: &str, org: &str, token: &str, expires_in: i64) -> Value {
    json!({
        "token": token,
        "claims": {
            "runnerId": runner, "organizationId": org, "scopes": ["runner:claim"],
            "issuedAt": later(0).as_str(), "expiresAt": later(expires_in).as_str(),
        },
        "jobSigning": signing("k").to_json(),
    })
}

fn self_answer() -> Value {
    json!({"id": RUNNER, "name": "double", "state": "active", "maxConcurrentJobs": 1})
}

fn serve(mut stream: TcpStream, seen: &Mutex<Vec<Received>>, handler: &Handler) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_owned();
        let mut length = 0;
        let mut bearer = None;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
                if name.eq_ignore_ascii_case("authorization") {
                    bearer = value.trim().strip_prefix("Bearer ").map(str::to_owned);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let received = Received {
            path: path.clone(),
            bearer,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        let nth = {
            let mut seen = seen.lock().expect("lock");
            let nth = seen.iter().filter(|r| r.path == path).count();
            seen.push(received.clone());
            nth
        };
        let (status, answer) = handler(&received, nth);
        let text = answer.map(|a| a.to_string()).unwrap_or_default();
        let head = format!(
            "HTTP/1.1 {status} Double\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            text.len()
        );
        if stream.write_all(head.as_bytes()).is_err() || stream.write_all(text.as_bytes()).is_err()
        {
            return;
        }
    }
}

fn scratch() -> PathBuf {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("random");
    let dir = std::env::temp_dir().join(format!("edgerunner-double-{}", hex::encode(bytes)));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

#[test]
fn a_spoiled_assignment_is_refused_and_never_run() {
    for (code, answer) in spoiled() {
        let double = Double::with_claims(vec![answer]);
        let dir = scratch();
        let marker = dir.join("ran");
        let output = runner_start(&double, &dir, &format!("touch {}", marker.display()))
            .output()
            .expect("edgerunner runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{code}: {stderr}");
        let refusal = stderr
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|event| event["event"] == "claim.refused")
            .unwrap_or_else(|| panic!("{code}: no claim.refused event in\n{stderr}"));
        assert_eq!(refusal["code"], code, "{stderr}");
        assert!(
            refusal["message"]
                .as_str()
                .is_some_and(|m| m.contains("it was not run")),
            "{refusal}"
        );
        assert!(!marker.exists(), "{code}: the command ran");
        let paths = double.paths();
        for forbidden in ["/input", "/artifact", "/heartbeat", "/stream", "/complete"] {
            assert!(
                paths.iter().all(|path| !path.ends_with(forbidden)),
                "{code}: the runner called {forbidden} after refusing: {paths:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The input the job double serves: it names its evaluation run, so no evidence is created.
fn job_input() -> Value {
    json!({"question": "2+2", "evaluationRunId": "evr_double"})
}

/// The artifact content the envelope's `contentHash` signs.
fn job_artifact_content() -> Value {
    json!({"template": "t"})
}

/// A server double with one genuine job whose artifact read is answered with `artifact`;
/// everything else a job needs is answered as the server would.
fn job_double(artifact: (u16, Value)) -> Double {
    let mut envelope = envelope(21);
    envelope.input_hash = stable_json::hash(&job_input());
    let claim = assignment(&envelope, &signing("k"));
    Double::start(Box::new(move |request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/self" => (200, Some(self_answer())),
        "/api/remote-runners/claim" if nth == 0 => (200, Some(claim.clone())),
        "/api/remote-runners/claim" => (204, None),
        "/api/remote-runners/jobs/job_double/input" => (200, Some(job_input())),
        "/api/remote-runners/jobs/job_double/artifact" => (artifact.0, Some(artifact.1.clone())),
        "/api/remote-runners/heartbeat" => (
            200,
            Some(json!({
                "cancelRequested": false, "state": "running",
                "leaseExpiresAt": later(60).as_str(),
            })),
        ),
        "/api/remote-runners/complete" => (
            200,
            Some(json!({"decision": "accepted", "rationale": "first", "jobState": "done"})),
        ),
        _ => (200, Some(json!({"accepted": true}))),
    }))
}

/// `edgerunner runner start` as a bootstrap-token runner against `double`, until idle,
/// running `command` per job in a work directory under `dir`.
fn runner_start(double: &Double, dir: &std::path::Path, command: &str) -> Command {
    let mut start = Command::new(env!("CARGO_BIN_EXE_edgerunner"));
    start
        .args([
            "runner",
            "start",
            "--exit-when-idle",
            "--poll-interval",
            "0.1",
        ])
        .args(["--log-format", "json", "--exec", command])
        .arg("--work-dir")
        .arg(dir.join("work"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("XDG_CONFIG_HOME", dir)
        .env("EVALGATE_BASE_URL", &double.url)
        .env("EVALGATE_RUNNER_ID", RUNNER)
        .env("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", "erb_double")
        .stdin(Stdio::null());
    start
}

/// [`runner_start`] with `extra` arguments, expecting success; its log.
fn start_runner(double: &Double, dir: &std::path::Path, command: &str, extra: &[&str]) -> String {
    let output = runner_start(double, dir, command)
        .args(extra)
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    stderr
}

/// The completions the double received.
fn completions(double: &Double) -> Vec<Value> {
    double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/complete")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect()
}

fn refusals(double: &Double) -> Vec<String> {
    double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/stream")
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .filter(|chunk| chunk["payload"]["event"] == "refused")
        .map(|chunk| chunk["payload"]["reason"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_job_whose_artifact_cannot_be_read_fails_and_its_command_never_runs() {
    let unreadable = [
        (
            404,
            json!({"error": {"code": "NOT_FOUND", "message": "no bound artifact"}}),
        ),
        (
            403,
            json!({"error": {"code": "FORBIDDEN", "message": "not yours"}}),
        ),
        (200, json!("not an artifact document")),
    ];
    for artifact in unreadable {
        let label = artifact.1.to_string();
        let double = job_double(artifact);
        let dir = scratch();
        let marker = dir.join("ran");
        let stderr = start_runner(&double, &dir, &format!("touch {}", marker.display()), &[]);
        assert!(
            !marker.exists(),
            "{label}: the command ran without its artifact"
        );
        let sent = completions(&double);
        assert_eq!(sent.len(), 1, "{label}: one completion\n{stderr}");
        assert_eq!(sent[0]["status"], "failed", "{label}");
        assert_eq!(sent[0]["resultHash"], Value::Null, "{label}: nothing ran");
        let reasons = refusals(&double);
        assert_eq!(reasons.len(), 1, "{label}: {reasons:?}");
        assert!(
            reasons[0].contains("artifact"),
            "{label}: the reason names the artifact: {reasons:?}"
        );
        assert!(
            stderr.contains("job.inputs_refused"),
            "{label}: reported\n{stderr}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_job_runs_only_with_the_artifact_its_envelope_signs() {
    let genuine = json!({
        "versionId": 1,
        "contentHash": stable_json::hash(&job_artifact_content()).as_str(),
        "content": job_artifact_content(),
    });
    let mut spoiled = genuine.clone();
    spoiled["content"]["template"] = "other".into();

    let double = job_double((200, spoiled));
    let dir = scratch();
    let marker = dir.join("ran");
    start_runner(&double, &dir, &format!("touch {}", marker.display()), &[]);
    assert!(!marker.exists(), "a spoiled artifact must not run");
    assert_eq!(completions(&double)[0]["status"], "failed");
    assert!(refusals(&double)[0].contains("not the signed contentHash"));
    let _ = std::fs::remove_dir_all(&dir);

    let double = job_double((200, genuine));
    let dir = scratch();
    let copy = dir.join("artifact-seen");
    start_runner(
        &double,
        &dir,
        &format!("cp \"$EDGERUNNER_ARTIFACT\" {}", copy.display()),
        &[],
    );
    assert_eq!(completions(&double)[0]["status"], "succeeded");
    let seen: Value =
        serde_json::from_slice(&std::fs::read(&copy).expect("the command ran")).expect("JSON");
    assert_eq!(seen, job_artifact_content());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn job_files_live_in_a_fresh_private_runner_directory() {
    use std::os::unix::fs::PermissionsExt;

    let genuine = json!({
        "versionId": 1,
        "contentHash": stable_json::hash(&job_artifact_content()).as_str(),
        "content": job_artifact_content(),
    });
    let double = job_double((200, genuine));
    let dir = scratch();
    let seen = dir.join("workdir-seen");
    start_runner(
        &double,
        &dir,
        &format!("echo \"$EDGERUNNER_WORKDIR\" > {}", seen.display()),
        &["--keep-work"],
    );
    assert_eq!(completions(&double)[0]["status"], "succeeded");
    let job_dir = PathBuf::from(std::fs::read_to_string(&seen).expect("ran").trim());
    let runner_dir = job_dir.parent().expect("inside the runner directory");
    assert_eq!(runner_dir.parent(), Some(dir.join("work").as_path()));
    let name = runner_dir.file_name().expect("named").to_string_lossy();
    assert!(
        name.strip_prefix("edgerunner-").is_some_and(
            |suffix| suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_alphanumeric())
        ),
        "{name}"
    );
    let job_name = job_dir.file_name().expect("named").to_string_lossy();
    assert!(job_name.starts_with("job_double-1-"), "{job_name}");
    let mode = |path: &std::path::Path| {
        std::fs::symlink_metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode(runner_dir), 0o700);
    assert_eq!(mode(&job_dir), 0o700);
    assert_eq!(mode(&job_dir.join("input.json")), 0o600);
    assert_eq!(mode(&job_dir.join("artifact.json")), 0o600);
    assert_eq!(mode(&job_dir.join("tmp")), 0o700, "the job's TMPDIR");
    assert_eq!(
        serde_json::from_slice::<Value>(&std::fs::read(job_dir.join("input.json")).expect("kept"))
            .expect("JSON"),
        job_input()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The job's environment as `env` printed it, one `NAME=value` per entry.
fn job_env_after(
    double: &Double,
    dir: &std::path::Path,
    extra_env: &[(&str, &str)],
    args: &[&str],
) -> Vec<String> {
    let seen = dir.join("env-seen");
    let output = runner_start(
        double,
        dir,
        &format!(
            "env > {}; echo \"tmp=$(cd \"$TMPDIR\" && pwd)\" >> {}",
            seen.display(),
            seen.display()
        ),
    )
    .envs(extra_env.iter().copied())
    .args(args)
    .output()
    .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    assert_eq!(completions(double)[0]["status"], "succeeded", "{stderr}");
    std::fs::read_to_string(&seen)
        .expect("the job ran")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_job_gets_a_clean_environment_and_exactly_what_pass_env_names() {
    const API_KEY: &str = "erk_runner_admin_key_never_for_jobs";
    let secrets = [
        ("EDGERUNNER_API_KEY", API_KEY),
        ("LC_MESSAGES", "C"),
        ("PASSED_MARKER", "passed-value"),
        ("UNNAMED_MARKER", "unnamed-value"),
    ];
    let genuine = json!({
        "versionId": 1,
        "contentHash": stable_json::hash(&job_artifact_content()).as_str(),
        "content": job_artifact_content(),
    });
    let dir = scratch();
    let env = job_env_after(
        &job_double((200, genuine.clone())),
        &dir,
        &secrets,
        &["--pass-env", "PASSED_MARKER"],
    );
    let all = env.join("\n");
    for secret in [
        "erb_double",
        API_KEY,
        "unnamed-value",
        "EVALGATE_",
        "XDG_CONFIG_HOME",
    ] {
        assert!(!all.contains(secret), "{secret} reached the job:\n{all}");
    }
    for given in [
        "PASSED_MARKER=passed-value",
        "LC_MESSAGES=C",
        "EDGERUNNER_JOB_ID=job_double",
    ] {
        assert!(
            env.iter().any(|line| line == given),
            "{given} missing:\n{all}"
        );
    }
    let workdir = env
        .iter()
        .find_map(|line| line.strip_prefix("EDGERUNNER_WORKDIR="))
        .expect("EDGERUNNER_WORKDIR");
    let tmp = env
        .iter()
        .find_map(|line| line.strip_prefix("tmp="))
        .expect("TMPDIR existed");
    assert_eq!(tmp, format!("{workdir}/tmp"), "TMPDIR is the job's own");
    let _ = std::fs::remove_dir_all(&dir);

    // The control: without --pass-env the marker stays with the runner.
    let dir = scratch();
    let env = job_env_after(&job_double((200, genuine)), &dir, &secrets, &[]);
    assert!(!env.join("\n").contains("passed-value"), "{env:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pass_env_refuses_a_runner_credential_with_a_usage_error_before_connecting() {
    let double = Double::with_claims(Vec::new());
    let dir = scratch();
    for (args, names) in [
        (
            vec!["--pass-env", "EVALGATE_RUNNER_BOOTSTRAP_TOKEN"],
            "EVALGATE_RUNNER_BOOTSTRAP_TOKEN",
        ),
        (
            vec!["--pass-env", "EDGERUNNER_EVIDENCE_API_KEY"],
            "EDGERUNNER_EVIDENCE_API_KEY",
        ),
        (vec!["--pass-env", "not-a-name"], "not-a-name"),
    ] {
        let output = runner_start(&double, &dir, "true")
            .args(&args)
            .output()
            .expect("edgerunner runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{stderr}");
        assert!(!stderr.contains("erb_double"), "{stderr}");
    }
    // Past the bound, with the config file's names counted too.
    let config = dir.join("runner.json");
    let names: Vec<String> = (0..40).map(|i| format!("FILE_{i}")).collect();
    std::fs::write(&config, json!({ "passEnv": names }).to_string()).expect("config");
    let mut flags = Vec::new();
    for i in 0..25 {
        flags.push("--pass-env".to_owned());
        flags.push(format!("FLAG_{i}"));
    }
    let output = runner_start(&double, &dir, "true")
        .arg("--config")
        .arg(&config)
        .args(&flags)
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("65 variables"), "{stderr}");
    assert!(
        double.received().is_empty(),
        "nothing was sent: {:?}",
        double.paths()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_config_file_inside_the_directory_jobs_run_in_is_refused() {
    let double = Double::with_claims(Vec::new());
    let dir = scratch();
    let config = dir.join("xdg").join("edgerunner").join("runner.json");
    std::fs::create_dir_all(config.parent().expect("parent")).expect("dirs");
    std::fs::write(&config, json!({ "passEnv": ["LANG"] }).to_string()).expect("config");
    let output = runner_start(&double, &dir, "true")
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .current_dir(&dir)
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("config file") && stderr.contains("runner.json"),
        "{stderr}"
    );
    assert!(double.received().is_empty(), "nothing was sent");
    // The control: the same runner started elsewhere runs.
    let elsewhere = dir.join("project");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    let output = runner_start(&double, &dir, "true")
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .current_dir(&elsewhere)
        .output()
        .expect("edgerunner runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A job cannot read the runner's environment from `/proc/<runner>/environ` (nor attach to
/// it): the runner is not dumpable. Runner and job are one unprivileged user here (a root
/// test runs the runner as `nobody`, since root may read any process).
#[test]
fn a_job_cannot_read_the_runners_environment_through_proc() {
    use std::os::unix::process::CommandExt;

    let genuine = json!({
        "versionId": 1,
        "contentHash": stable_json::hash(&job_artifact_content()).as_str(),
        "content": job_artifact_content(),
    });
    let double = job_double((200, genuine));
    let dir = scratch();
    let command = "echo \"parent=$PPID\"; \
                   tr '\\0' '\\n' < /proc/$$/environ | grep -q EDGERUNNER_JOB_ID && echo own-environ-read; \
                   tr '\\0' '\\n' < /proc/$PPID/environ 2>/dev/null || echo runner-environ-refused";
    let mut start = runner_start(&double, &dir, command);
    if nix::unistd::geteuid().is_root() {
        let nobody = nix::unistd::User::from_name("nobody")
            .expect("passwd")
            .expect("a user nobody");
        std::fs::create_dir_all(dir.join("work")).expect("work");
        std::os::unix::fs::chown(dir.join("work"), Some(nobody.uid.as_raw()), None).expect("chown");
        start.uid(nobody.uid.as_raw()).gid(nobody.gid.as_raw());
    }
    let child = start
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("edgerunner starts");
    let runner_pid = child.id();
    let output = child.wait_with_output().expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(completions(&double)[0]["status"], "succeeded", "{stderr}");
    let printed: Vec<String> = streamed(&double)
        .iter()
        .filter_map(log_lines)
        .flatten()
        .map(|line| line.line)
        .collect();
    assert!(
        !printed.iter().any(|l| l.contains("erb_double")),
        "{printed:?}"
    );
    // The controls: /proc is there to read, and the parent asked about is the runner.
    assert!(
        printed.contains(&format!("parent={runner_pid}")),
        "{printed:?}"
    );
    assert!(
        printed.iter().any(|l| l == "own-environ-read"),
        "{printed:?}"
    );
    assert!(
        printed.iter().any(|l| l == "runner-environ-refused"),
        "{printed:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--run-as` is for a runner running as root: there it runs the command as that user with
/// the job's directory handed over; anywhere else it is refused before anything is sent.
#[test]
fn run_as_runs_the_command_as_another_user_only_for_a_root_runner() {
    let genuine = json!({
        "versionId": 1,
        "contentHash": stable_json::hash(&job_artifact_content()).as_str(),
        "content": job_artifact_content(),
    });
    let double = job_double((200, genuine));
    let dir = scratch();
    let command = "echo \"uid=$(id -u) gid=$(id -g) groups=$(id -G) home=$HOME\"; \
                   test -O \"$EDGERUNNER_WORKDIR\" && test -O \"$TMPDIR\" && echo owns-workdir; \
                   cat \"$EDGERUNNER_INPUT\" > /dev/null && echo reads-input; \
                   ls \"$EDGERUNNER_WORKDIR/..\" 2>/dev/null || echo cannot-list-runner-dir";
    let root = nix::unistd::geteuid().is_root();
    if !root {
        let output = runner_start(&double, &dir, command)
            .args(["--run-as", "nobody"])
            .output()
            .expect("edgerunner runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("root"), "{stderr}");
        assert!(double.received().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let refused = runner_start(&double, &dir, command)
        .args(["--run-as", "root"])
        .output()
        .expect("edgerunner runs");
    assert_eq!(
        refused.status.code(),
        Some(2),
        "running jobs as root is no separation"
    );
    // The work directory's parent and the start directory must be reachable by the user.
    std::fs::create_dir_all(dir.join("work")).expect("work");
    for path in [&dir, &dir.join("work")] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let output = runner_start(&double, &dir, command)
        .args(["--run-as", "nobody"])
        .current_dir(&dir)
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(completions(&double)[0]["status"], "succeeded", "{stderr}");
    let nobody = nix::unistd::User::from_name("nobody")
        .expect("passwd")
        .expect("a user nobody");
    let printed: Vec<String> = streamed(&double)
        .iter()
        .filter_map(log_lines)
        .flatten()
        .map(|line| line.line)
        .collect();
    let gid = nobody.gid.as_raw();
    assert!(
        printed.contains(&format!(
            "uid={} gid={gid} groups={gid} home={}",
            nobody.uid,
            nobody.dir.display()
        )),
        "{printed:?}"
    );
    for line in ["owns-workdir", "reads-input", "cannot-list-runner-dir"] {
        assert!(printed.iter().any(|l| l == line), "{line}: {printed:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_session_for_another_runner_or_organization_is_refused_and_never_used() {
    use edgerunner::session::ExpectedBinding;

    let org = |id: &str| Some(OrganizationId::parse(id).expect("id"));
    let runner = |id: &str| Some(RunnerId::parse(id).expect("id"));
    // (the session the server issues, what the configuration says, what the refusal names)
    let cases = [
        (
            (RUNNER, "org_elsewhere"),
            ExpectedBinding {
                runner_id: None,
                organization_id: org(ORG),
            },
            "organization org_elsewhere",
        ),
        (
            ("run_elsewhere", ORG),
            ExpectedBinding {
                runner_id: None,
                organization_id: org(ORG),
            },
            "runner run_elsewhere",
        ),
        (
            ("run_elsewhere", ORG),
            ExpectedBinding {
                runner_id: runner(RUNNER),
                organization_id: None,
            },
            "runner run_elsewhere",
        ),
    ];
    for ((issued_runner, issued_org), expected, named) in cases {
        let issued = session_for(issued_runner, issued_org, "erc_foreign", 600);
        let double = Double::start(Box::new(move |request, _| match request.path.as_str() {
            "/api/remote-runners/session" => (200, Some(issued.clone())),
            _ => (200, Some(self_answer())),
        }));
        let client = client(&double).with_expected_binding(expected);
        let error = client.whoami().await.expect_err("refused");
        assert!(
            matches!(error, ClientError::IdentityMismatch(_)),
            "{named}: {error:?}"
        );
        assert!(error.to_string().contains(named), "{error}");
        assert!(error.to_string().contains("not used"), "{error}");
        assert!(
            double
                .received()
                .iter()
                .all(|r| r.bearer.as_deref() != Some("erc_foreign")),
            "{named}: the foreign session was used: {:?}",
            double.paths()
        );
        assert_eq!(double.count("/api/remote-runners/self"), 0);
    }

    // The same sessions are fine for a runner configured as what they name.
    let double = Double::start(Box::new(|request, _| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        _ => (200, Some(self_answer())),
    }));
    let client = client(&double).with_expected_binding(ExpectedBinding {
        runner_id: runner(RUNNER),
        organization_id: org(ORG),
    });
    client.whoami().await.expect("a matching session is used");
}

#[test]
fn runner_start_refuses_a_session_for_another_organization_and_claims_nothing() {
    let double = Double::with_claims(vec![assignment(&envelope(31), &signing("k"))]);
    let dir = scratch();
    let marker = dir.join("ran");
    let output = runner_start(&double, &dir, &format!("touch {}", marker.display()))
        .env("EVALGATE_ORGANIZATION_ID", "org_configured")
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "bound to organization org_double, but this runner is configured for org_configured"
        ),
        "{stderr}"
    );
    assert!(!marker.exists());
    assert_eq!(double.count("/api/remote-runners/claim"), 0);
    assert_eq!(double.count("/api/remote-runners/self"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The double's `POST /api/remote-runners/enroll`, as the server will check it: the body's
/// `signature` must be the enrolling key's proof for the organization it names.
fn enroll_answer(request: &Received) -> (u16, Option<Value>) {
    let refuse = |message: &str| {
        (
            400,
            Some(json!({"error": {"code": "ENROLLMENT_PROOF_INVALID", "message": message}})),
        )
    };
    let Ok(body) = serde_json::from_str::<Value>(&request.body) else {
        return refuse("not JSON");
    };
    let (Some(key), Some(org), Some(signature)) = (
        body["publicKey"].as_str(),
        body["organizationId"].as_str(),
        body["signature"].as_str(),
    ) else {
        return refuse("publicKey, organizationId and signature are required");
    };
    let Ok(key) = PublicKey::from_base64(key) else {
        return refuse("not a public key");
    };
    match verify_enrollment_signature(&key, org, signature) {
        Ok(possession) => (
            201,
            Some(json!({"runner": {
                "id": "run_enrolled", "state": "pending_approval",
                "fingerprint": possession.fingerprint().as_str(),
            }})),
        ),
        Err(error) => refuse(&error.to_string()),
    }
}

#[test]
fn runner_enroll_proves_possession_of_the_key_it_enrolls() {
    let double = Double::start(Box::new(|request, _| match request.path.as_str() {
        "/api/remote-runners/enroll" => enroll_answer(request),
        _ => (404, None),
    }));
    let dir = scratch();
    let config = dir.join("runner.json");
    let output = Command::new(env!("CARGO_BIN_EXE_edgerunner"))
        .args([
            "runner",
            "enroll",
            "--server",
            &double.url,
            "--organization",
            ORG,
        ])
        .args([
            "--execution-kind",
            "prompt",
            "--runtime",
            "python3.12",
            "--json",
        ])
        .arg("--config")
        .arg(&config)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let printed: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(printed["runner"]["id"], "run_enrolled");

    let sent: Vec<Value> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/enroll")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect();
    assert_eq!(sent.len(), 1);
    let key = edgerunner::keyfile::load(&dir.join("runner.key")).expect("the key it made");
    let public = key.public_key();
    assert_eq!(sent[0]["publicKey"], public.to_base64());
    let signature = sent[0]["signature"].as_str().expect("a signature");
    let possession =
        verify_enrollment_signature(&public, ORG, signature).expect("the proof verifies");
    assert_eq!(possession.fingerprint(), &public.fingerprint());
    assert_eq!(printed["fingerprint"], public.fingerprint().as_str());
    assert!(
        verify_enrollment_signature(&public, "org_elsewhere", signature).is_err(),
        "the proof is for this organization only"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_replayed_nonce_is_refused_by_the_sdk() {
    let genuine = assignment(&envelope(9), &signing("k"));
    let double = Double::with_claims(vec![genuine.clone(), genuine]);
    let client = RunnerClient::new(
        Http::new(&double.url).expect("url"),
        Credentials::Bootstrap {
            runner_id: RunnerId::parse(RUNNER).expect("id"),
            token: BootstrapToken::new("erb_double").expect("token"),
        },
    )
    .with_retry(RetryPolicy::NONE);
    let first = client.claim().await.expect("the first is genuine");
    assert_eq!(
        first.map(|a| a.job_id().as_str().to_owned()),
        Some("job_double".into())
    );
    match client.claim().await {
        Err(ClientError::Refused(error)) => assert_eq!(error.code(), "NONCE_REPLAYED"),
        other => panic!("expected a refused replay, got {other:?}"),
    }
    assert!(matches!(client.claim().await, Ok(None)));
}

fn client(double: &Double) -> RunnerClient {
    RunnerClient::new(
        Http::new(&double.url).expect("url"),
        Credentials::Bootstrap {
            runner_id: RunnerId::parse(RUNNER).expect("id"),
            token: BootstrapToken::new("erb_double").expect("token"),
        },
    )
    .with_retry(RetryPolicy {
        attempts: 3,
        initial: std::time::Duration::from_millis(5),
        max: std::time::Duration::from_millis(10),
    })
}

#[tokio::test]
async fn a_session_is_exchanged_again_thirty_seconds_before_it_expires() {
    // The first session expires in 20 s (inside the 30 s margin), the second in 10 minutes.
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" if nth == 0 => (200, Some(session_answer("erc_short", 20))),
        "/api/remote-runners/session" => (200, Some(session_answer("erc_long", 600))),
        _ => (200, Some(self_answer())),
    }));
    let client = client(&double);
    for _ in 0..3 {
        client.whoami().await.expect("an answer");
    }
    assert_eq!(double.count("/api/remote-runners/session"), 2);
    let bearers: Vec<Option<String>> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/self")
        .map(|r| r.bearer)
        .collect();
    assert_eq!(
        bearers,
        vec![
            Some("erc_short".to_owned()),
            Some("erc_long".to_owned()),
            Some("erc_long".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_401_exchanges_a_new_session_and_repeats_the_request_once() {
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (
            200,
            Some(session_answer(
                if nth == 0 { "erc_revoked" } else { "erc_fresh" },
                600,
            )),
        ),
        _ if request.bearer.as_deref() == Some("erc_revoked") => (
            401,
            Some(
                json!({"error": {"code": "AUTHENTICATION_FAILED", "message": "generation moved"}}),
            ),
        ),
        _ => (200, Some(self_answer())),
    }));
    let client = client(&double);
    client.whoami().await.expect("answered after a new session");
    assert_eq!(
        double.paths(),
        vec![
            "/api/remote-runners/session",
            "/api/remote-runners/self",
            "/api/remote-runners/session",
            "/api/remote-runners/self"
        ]
    );
}

#[tokio::test]
async fn a_chunk_whose_answer_was_lost_is_resent_identically_and_counts_as_stored() {
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        // The first chunk is stored but its answer is lost (502); the retry finds it stored.
        "/api/remote-runners/stream" if nth == 0 => (502, None),
        "/api/remote-runners/stream" if nth == 1 => (
            409,
            Some(json!({"error": {"code": "STREAM_DUPLICATE_CHECKSUM", "message": "stored"}})),
        ),
        _ => (200, Some(json!({"accepted": true}))),
    }));
    let client = Arc::new(client(&double));
    let identity = ChunkIdentity {
        job_id: JobId::parse("job_double").expect("id"),
        claim_id: ClaimId::parse("clm_double").expect("id"),
        dispatch_attempt: DispatchAttempt::FIRST,
    };
    let mut stream = ChunkStream::new(Arc::clone(&client), identity);
    let first = stream
        .send(
            ChunkKind::Log,
            json!({"lines": [{"stream": "stdout", "line": "a"}]}),
        )
        .await
        .expect("stored");
    stream
        .send(
            ChunkKind::Log,
            json!({"lines": [{"stream": "stdout", "line": "b"}]}),
        )
        .await
        .expect("stored");
    let sent: Vec<Value> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/stream")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect();
    assert_eq!(sent.len(), 3);
    assert_eq!(
        sent[0], sent[1],
        "the retry is the same chunk, byte for byte"
    );
    assert_eq!(sent[2]["sequence"], 1);
    assert_eq!(sent[2]["previousChecksum"], first.as_str());
    assert_eq!(stream.len(), 2);
}

#[tokio::test]
async fn a_completion_is_resent_unchanged_and_a_duplicate_decision_settles_it() {
    let genuine = assignment(&envelope(11), &signing("k"));
    let double = Double::start(Box::new(move |request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/claim" => (200, Some(genuine.clone())),
        "/api/remote-runners/complete" if nth == 0 => (503, None),
        "/api/remote-runners/complete" => (
            200,
            Some(
                json!({"decision": "duplicate", "rationale": "exact replay", "jobState": "succeeded"}),
            ),
        ),
        _ => (200, Some(json!({}))),
    }));
    let client = client(&double);
    let assignment = client.claim().await.expect("verified").expect("a job");
    let completion = assignment.completion(
        CompletionStatus::Succeeded,
        Some(stable_json::hash(&json!({"exitCode": 0}))),
        None,
        Evidence {
            evaluation_run_id: EvidenceId::Text("evr_1".into()),
            test_result_ids: vec![],
            cost_record_ids: vec![],
            model_call_ids: vec![],
            trace_id: None,
            extra: serde_json::Map::new(),
        },
    );
    let answer = client.complete(&completion).await.expect("decided");
    assert_eq!(answer.decision, Decision::Duplicate);
    assert!(answer.is_settled());
    let bodies: Vec<String> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/complete")
        .map(|r| r.body)
        .collect();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], bodies[1], "never a different completion");
    let sent: Value = serde_json::from_str(&bodies[0]).expect("JSON");
    assert_eq!(sent["completionChecksum"], completion.checksum().as_str());
}

#[tokio::test]
async fn a_claim_without_an_answer_is_asked_again_with_the_same_request_id() {
    // Two tries get no answer (the grant may have happened); the third is answered. The server
    // answers a repeated requestId with the claim it granted, so repeating is safe.
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/claim" if nth < 2 => (502, None),
        _ => (204, None),
    }));
    let client = client(&double);
    assert!(client
        .claim()
        .await
        .expect("answered on the third try")
        .is_none());
    let request_ids = |double: &Double| -> Vec<Value> {
        double
            .received()
            .into_iter()
            .filter(|r| r.path == "/api/remote-runners/claim")
            .map(|r| serde_json::from_str::<Value>(&r.body).expect("JSON")["requestId"].clone())
            .collect()
    };
    let ids = request_ids(&double);
    assert_eq!(ids.len(), 3);
    let first = ids[0].as_str().expect("a requestId");
    assert!(
        first.len() == 32 && first.chars().all(|c| c.is_ascii_hexdigit()),
        "{first}"
    );
    assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    // The next claim is a new request with a key of its own.
    assert!(client.claim().await.expect("answered").is_none());
    let ids = request_ids(&double);
    assert_eq!(ids.len(), 4);
    assert_ne!(ids[3], ids[0]);
}

#[tokio::test]
async fn a_long_poll_sends_its_wait_and_a_plain_claim_sends_none() {
    let double = Double::start(Box::new(|request, _| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        _ => (204, None),
    }));
    let client = client(&double);
    assert!(client.claim_waiting(10).await.expect("answered").is_none());
    assert!(client.claim_waiting(99).await.expect("answered").is_none());
    assert!(client.claim().await.expect("answered").is_none());
    let waits: Vec<Value> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/claim")
        .map(|r| serde_json::from_str::<Value>(&r.body).expect("JSON")["waitSeconds"].clone())
        .collect();
    // Capped at the server's 25 s; absent (not 0) without a wait, as the published SDK sends.
    assert_eq!(waits, [json!(10), json!(25), Value::Null]);
}

#[tokio::test]
async fn a_claim_refused_for_good_is_not_repeated() {
    let double = Double::start(Box::new(|request, _| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        _ => (
            422,
            Some(json!({"error": {"code": "INVALID_SERVED_TARGETS", "message": "no"}})),
        ),
    }));
    let client = client(&double);
    let error = client.claim().await.expect_err("refused");
    assert_eq!(error.status(), Some(422));
    assert_eq!(double.count("/api/remote-runners/claim"), 1);
}

#[tokio::test]
async fn chunks_of_unknown_fate_are_kept_in_order_and_refused_ones_leave_the_chain() {
    // Three tries of the first chunk get no useful answer; later everything is stored, except
    // the chunk whose payload says "refuse me".
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/stream" if nth < 3 => (502, None),
        "/api/remote-runners/stream" if request.body.contains("refuse me") => (
            422,
            Some(json!({"error": {"code": "STREAM_PAYLOAD_TOO_LARGE", "message": "too big"}})),
        ),
        _ => (200, Some(json!({"accepted": true}))),
    }));
    let client = Arc::new(client(&double));
    let identity = ChunkIdentity {
        job_id: JobId::parse("job_double").expect("id"),
        claim_id: ClaimId::parse("clm_double").expect("id"),
        dispatch_attempt: DispatchAttempt::FIRST,
    };
    let mut stream = ChunkStream::new(Arc::clone(&client), identity);
    let error = stream
        .send(ChunkKind::Log, json!({"n": 0}))
        .await
        .expect_err("no answer after the retries");
    assert!(error.is_transient());
    assert_eq!(stream.unsettled(), 1, "kept to be sent again");
    let second = stream
        .send(ChunkKind::Log, json!({"n": 1}))
        .await
        .expect("both stored");
    assert_eq!(stream.unsettled(), 0);
    assert!(stream
        .send(ChunkKind::Log, json!({"n": "refuse me"}))
        .await
        .is_err());
    assert_eq!(stream.len(), 2, "the refused chunk left the chain");
    assert_eq!(stream.final_checksum(), Some(second.clone()));
    stream
        .send(ChunkKind::Log, json!({"n": 3}))
        .await
        .expect("stored");

    let sent: Vec<Value> = double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/stream")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect();
    let sequences: Vec<u64> = sent
        .iter()
        .map(|c| c["sequence"].as_u64().expect("n"))
        .collect();
    assert_eq!(sequences, vec![0, 0, 0, 0, 1, 2, 2]);
    assert!(
        sent[..4].iter().all(|chunk| chunk == &sent[0]),
        "the same chunk each time"
    );
    assert_eq!(sent[6]["payload"], json!({"n": 3}));
    assert_eq!(sent[6]["previousChecksum"], second.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_go_on_while_the_job_hogs_its_thread_and_cancellation_surfaces() {
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/heartbeat" => (
            200,
            Some(json!({
                "cancelRequested": nth >= 4,
                "cancelReason": "operator asked",
                "state": if nth >= 4 { "cancel_requested" } else { "running" },
                "leaseExpiresAt": later(60).as_str(),
            })),
        ),
        _ => (200, Some(json!({}))),
    }));
    let client = Arc::new(client(&double));
    let heartbeat = Heartbeat::spawn(
        Arc::clone(&client),
        ClaimId::parse("clm_double").expect("id"),
        HeartbeatConfig {
            interval: std::time::Duration::from_millis(50),
            extend_seconds: 60,
        },
        ClaimStatus::default(),
    );
    let mut status = heartbeat.status();
    // A job that never yields: it blocks this task's thread outright.
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(
        double.count("/api/remote-runners/heartbeat") >= 5,
        "heartbeats kept going: {}",
        double.count("/api/remote-runners/heartbeat")
    );
    let seen = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        status.wait_for(|s| s.cancel_requested.is_some()),
    )
    .await
    .expect("cancellation surfaced")
    .expect("heartbeat alive")
    .clone();
    assert_eq!(
        seen.cancel_requested,
        Some(Some("operator asked".to_owned()))
    );
    assert!(seen.beats >= 5);
}

fn stream_identity() -> ChunkIdentity {
    ChunkIdentity {
        job_id: JobId::parse("job_double").expect("id"),
        claim_id: ClaimId::parse("clm_double").expect("id"),
        dispatch_attempt: DispatchAttempt::FIRST,
    }
}

/// The payload of every log chunk the double received, in order.
fn streamed(double: &Double) -> Vec<Value> {
    double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/stream")
        .map(|r| serde_json::from_str::<Value>(&r.body).expect("JSON"))
        .map(|chunk| chunk["payload"].clone())
        .collect()
}

#[tokio::test]
async fn a_chatty_job_is_not_held_back_by_its_log_and_its_chunks_are_full() {
    use std::sync::atomic::{AtomicBool, Ordering};

    // The server holds every chunk's answer until the gate opens: the job's output must all be
    // read meanwhile (it fits the queue), then go out in chunks filled to the byte bound.
    let gate = Arc::new(AtomicBool::new(false));
    let held = Arc::clone(&gate);
    let double = Double::start(Box::new(move |request, _| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        _ => {
            while !held.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            (200, Some(json!({"accepted": true})))
        }
    }));
    let client = Arc::new(client(&double));
    let mut stream = ChunkStream::new(Arc::clone(&client), stream_identity());
    let (lines, received) = tokio::sync::mpsc::channel(1024);
    const LINES: u64 = 200_000;
    let producer = tokio::spawn(async move {
        for n in 1..=LINES {
            let line = LogLine {
                stream: OutputStream::Stdout,
                line: n.to_string(),
            };
            lines.send(line).await.expect("the pump reads");
        }
    });
    // No deadline cuts a batch here (on a loaded machine the producer can pause for longer
    // than the default 250 ms): only the byte bound and the end of the output do.
    let limits = BatchLimits {
        max_delay: std::time::Duration::from_secs(3600),
        ..BatchLimits::DEFAULT
    };
    let pump = pump_lines(&mut stream, received, limits, None);
    let opener = async {
        tokio::time::timeout(std::time::Duration::from_secs(30), producer)
            .await
            .expect("every line was read while no chunk had been answered")
            .expect("producer");
        gate.store(true, Ordering::SeqCst);
    };
    let (report, ()) = tokio::join!(pump, opener);
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.lines_sent, LINES);
    let chunks = streamed(&double);
    assert_eq!(report.chunks, chunks.len() as u64);
    let numbers: Vec<u64> = chunks
        .iter()
        .flat_map(|payload| log_lines(payload).expect("a log payload"))
        .map(|line| line.line.parse().expect("a number"))
        .collect();
    assert_eq!(
        numbers,
        (1..=LINES).collect::<Vec<_>>(),
        "every line, in order"
    );
    let sizes: Vec<usize> = chunks
        .iter()
        .map(|payload| stable_json::stable_json(payload).len())
        .collect();
    assert_eq!(report.payload_bytes, sizes.iter().sum::<usize>() as u64);
    assert!(
        sizes.iter().all(|&size| size <= limits.max_bytes),
        "{sizes:?}"
    );
    // Every chunk but the last is full.
    let full = limits.max_bytes - 64;
    let all_but_last = &sizes[..sizes.len() - 1];
    assert!(all_but_last.iter().all(|&size| size > full), "{sizes:?}");
    assert!(
        chunks.len() <= (report.payload_bytes as usize).div_ceil(full) + 2,
        "{} chunks for {} bytes",
        chunks.len(),
        report.payload_bytes
    );
}

#[tokio::test]
async fn once_the_server_says_the_stream_is_full_no_more_log_chunks_are_sent() {
    let double = Double::start(Box::new(|request, nth| match request.path.as_str() {
        "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
        "/api/remote-runners/stream" if nth >= 2 => (
            409,
            Some(json!({"error": {"code": "STREAM_BYTES_LIMIT", "message": "full"}})),
        ),
        _ => (200, Some(json!({"accepted": true}))),
    }));
    let client = Arc::new(client(&double));
    let mut stream = ChunkStream::new(Arc::clone(&client), stream_identity());
    let (lines, received) = tokio::sync::mpsc::channel(1024);
    // Ten lines per chunk, sent one batch at a time.
    let limits = BatchLimits {
        max_lines: 10,
        ..BatchLimits::DEFAULT
    };
    let producer = async move {
        for n in 0..100 {
            let line = LogLine {
                stream: OutputStream::Stderr,
                line: format!("line {n}"),
            };
            lines.send(line).await.expect("the pump reads");
        }
    };
    let (report, ()) = tokio::join!(pump_lines(&mut stream, received, limits, None), producer);
    let requests = streamed(&double).len();
    assert_eq!(requests, 3, "two stored, one refused, then none");
    assert_eq!(report.chunks, 2);
    assert_eq!(report.lines_sent, 20);
    assert_eq!(report.lines_over_stream_limit, 80);
    assert_eq!(report.lines_lost, 0);
    assert_eq!(
        report.error.as_ref().and_then(|e| e.code()),
        Some(ErrorCode::StreamBytesLimit)
    );
    assert_eq!(stream.len(), 2, "the refused chunk left the chain");
}

/// A reap pass whose answer was lost (a proxy's bare `503`) is sent again: a pass is safe to
/// repeat. A cancel whose answer was lost is not: it may have reached the server.
#[tokio::test]
async fn a_reap_pass_whose_answer_was_lost_is_repeated_and_a_cancel_is_not() {
    let double = Double::start(Box::new(|request, nth| {
        match (request.path.as_str(), nth) {
            (_, 0) => (503, None),
            ("/api/remote-runners/jobs/reap", _) => (
                200,
                Some(
                    json!({"examined": 1, "requeued": 1, "ended": 0, "unchanged": 0, "failed": 0, "more": false}),
                ),
            ),
            _ => (200, Some(json!({}))),
        }
    }));
    let admin =
        edgerunner::admin::AdminClient::new(Http::new(&double.url).expect("http"), "erk_double")
            .expect("admin");
    let report = admin
        .reap(Some(10))
        .await
        .expect("the repeated pass answers");
    assert_eq!(report["requeued"], 1);
    assert_eq!(double.count("/api/remote-runners/jobs/reap"), 2);
    let received = double.received();
    let bodies: Vec<&str> = received
        .iter()
        .filter(|r| r.path == "/api/remote-runners/jobs/reap")
        .map(|r| r.body.as_str())
        .collect();
    assert_eq!(bodies, [r#"{"limit":10}"#; 2]);

    let error = admin
        .cancel_job("job_1", "not needed")
        .await
        .expect_err("a lost cancel answer is an error");
    assert_eq!(error.status(), Some(503));
    assert_eq!(double.count("/api/remote-runners/jobs/job_1/cancel"), 1);
}
