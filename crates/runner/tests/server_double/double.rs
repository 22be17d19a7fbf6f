//! The server double: a loopback HTTP server whose handler answers each request, the
//! signed envelopes and spoiled assignments it hands out, and an SDK client pointed at it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use edgerunner::client::RunnerClient;
use edgerunner::http::Http;
use edgerunner::retry::RetryPolicy;
use edgerunner::session::{BootstrapToken, Credentials};
use edgerunner_protocol::chunk::ChunkIdentity;
use edgerunner_protocol::envelope::{
    sign, ArtifactId, ClaimId, CredentialGeneration, DispatchAttempt, EnvelopeRequirements,
    Environment, IdempotencyKey, JobEnvelope, JobId, JobSigning, MasterSigningSecret, Nonce,
    OrganizationId, RunnerId, Subject, SubjectKind,
};
use edgerunner_protocol::stable_json;
use edgerunner_protocol::time::{Timestamp, UnixMillis};
use serde_json::{json, Value};

pub(crate) const RUNNER: &str = "run_double";
pub(crate) const ORG: &str = "org_double";

pub(crate) fn now() -> UnixMillis {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    UnixMillis::new(i64::try_from(millis).expect("fits")).expect("representable")
}

pub(crate) fn later(seconds: i64) -> Timestamp {
    Timestamp::from_instant(now().checked_add_seconds(seconds).expect("representable"))
}

pub(crate) fn signing(master: &str) -> JobSigning {
    JobSigning::derive(
        &MasterSigningSecret::new(master.repeat(32)).expect("long enough"),
        &RunnerId::parse(RUNNER).expect("id"),
        CredentialGeneration(1),
    )
}

pub(crate) fn envelope(nonce: u8) -> JobEnvelope {
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
pub(crate) fn assignment(envelope: &JobEnvelope, key: &JobSigning) -> Value {
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
pub(crate) fn spoiled() -> Vec<(&'static str, Value)> {
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

/// A double that hands out one genuine job, `envelope` (its `input_hash` must be the hash of
/// `input`), and answers everything else a job needs as the server would: the input, the
/// artifact read with `artifact`, heartbeats, chunks and the completion; then `204`. A request
/// for `path` is answered with `answer` instead.
pub(crate) fn one_job_double(
    envelope: &JobEnvelope,
    input: Value,
    artifact: (u16, Value),
    (path, answer): (&'static str, Option<(u16, Value)>),
) -> Double {
    let claim = assignment(envelope, &signing("k"));
    Double::start(Box::new(move |request, nth| {
        if let (true, Some((status, body))) = (request.path == path, &answer) {
            return (*status, Some(body.clone()));
        }
        match request.path.as_str() {
            "/api/remote-runners/session" => (200, Some(session_answer("erc_double", 600))),
            "/api/remote-runners/self" => (200, Some(self_answer())),
            "/api/remote-runners/claim" if nth == 0 => (200, Some(claim.clone())),
            "/api/remote-runners/claim" => (204, None),
            "/api/remote-runners/jobs/job_double/input" => (200, Some(input.clone())),
            "/api/remote-runners/jobs/job_double/artifact" => {
                (artifact.0, Some(artifact.1.clone()))
            }
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
        }
    }))
}

/// One request the double received.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    pub(crate) path: String,
    pub(crate) bearer: Option<String>,
    pub(crate) body: String,
}

pub(crate) type Handler = dyn Fn(&Received, usize) -> (u16, Option<Value>) + Send + Sync;

/// A server double on a loopback port. `handler` answers each request, given how many
/// requests to the same path came before it.
pub(crate) struct Double {
    pub(crate) url: String,
    pub(crate) requests: Arc<Mutex<Vec<Received>>>,
}

impl Double {
    pub(crate) fn start(handler: Box<Handler>) -> Self {
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
    pub(crate) fn with_claims(claims: Vec<Value>) -> Self {
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

    pub(crate) fn received(&self) -> Vec<Received> {
        self.requests.lock().expect("lock").clone()
    }

    pub(crate) fn paths(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.path).collect()
    }

    pub(crate) fn count(&self, path: &str) -> usize {
        self.paths().iter().filter(|p| p.as_str() == path).count()
    }
}

pub(crate) fn session_answer(token: &str, expires_in: i64) -> Value {
    session_for(RUNNER, ORG, token, expires_in)
}

pub(crate) fn session_for(runner: &str, org: &str, token: &str, expires_in: i64) -> Value {
    json!({
        "token": token,
        "claims": {
            "runnerId": runner, "organizationId": org, "scopes": ["runner:claim"],
            "issuedAt": later(0).as_str(), "expiresAt": later(expires_in).as_str(),
        },
        "jobSigning": signing("k").to_json(),
    })
}

pub(crate) fn self_answer() -> Value {
    json!({"id": RUNNER, "name": "double", "state": "active", "maxConcurrentJobs": 1})
}

pub(crate) fn serve(mut stream: TcpStream, seen: &Mutex<Vec<Received>>, handler: &Handler) {
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

pub(crate) fn scratch() -> PathBuf {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("random");
    let dir = std::env::temp_dir().join(format!("edgerunner-double-{}", hex::encode(bytes)));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

pub(crate) fn client(double: &Double) -> RunnerClient {
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

/// The payload of every log chunk the double received, in order.
pub(crate) fn streamed(double: &Double) -> Vec<Value> {
    double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/stream")
        .map(|r| serde_json::from_str::<Value>(&r.body).expect("JSON"))
        .map(|chunk| chunk["payload"].clone())
        .collect()
}

pub(crate) fn stream_identity() -> ChunkIdentity {
    ChunkIdentity {
        job_id: JobId::parse("job_double").expect("id"),
        claim_id: ClaimId::parse("clm_double").expect("id"),
        dispatch_attempt: DispatchAttempt::FIRST,
    }
}

/// `edgerunner runner start` as a bootstrap-token runner against `double`, until idle,
/// running `command` per job in a work directory under `dir`.
pub(crate) fn runner_start(double: &Double, dir: &std::path::Path, command: &str) -> Command {
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
