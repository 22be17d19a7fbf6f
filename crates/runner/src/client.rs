//! [`RunnerClient`]: the runner endpoints, as the EvalGate SDK's `RemoteRunnerWorker` calls
//! them, with its guarantees and a few more.
//!
//! - A session is exchanged on first use and again 30 s before it expires; a `401` drops it,
//!   exchanges a new one and repeats the request once (a refused request did nothing).
//! - [`RunnerClient::claim`] verifies every assignment before returning it ([`verify_assignment`]:
//!   key id, organization, claim identity, served target, validity window, payload hash, HMAC,
//!   nonce) against the session the claim was made with; a refused one is an error and never
//!   reaches code that could run it.
//! - Requests whose repetition cannot change their meaning are retried with backoff on
//!   transient failures: session exchange, heartbeat, the *same* chunk, the *same* completion,
//!   input and artifact reads. An exact replay that the server already stored is success
//!   (`STREAM_DUPLICATE_CHECKSUM`, completion decision `duplicate`). A claim is retried only
//!   when it certainly never reached the server.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use edgerunner_protocol::chunk::{ChunkIdentity, StreamChunk};
use edgerunner_protocol::completion::{Completion, CompletionFields, Evidence};
use edgerunner_protocol::envelope::{
    verify_assignment, ClaimId, DispatchAttempt, JobEnvelope, JobId, Nonce, NonceStore, RunnerId,
    ServedTarget, VerifiedAssignment,
};
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::keypair::{sign_challenge, Challenge};
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use reqwest::Method;
use serde_json::{json, Value};

use crate::clock::{timestamp_now, Clock, SystemClock};
use crate::http::{check, Answer, ClientError, Http};
use crate::retry::{retry, RetryPolicy};
use crate::session::{Credentials, ExpectedBinding, Session};

const SESSION: &str = "/api/remote-runners/session";
const CHALLENGE: &str = "/api/remote-runners/challenge";
const CLAIM: &str = "/api/remote-runners/claim";
const HEARTBEAT: &str = "/api/remote-runners/heartbeat";
const STREAM: &str = "/api/remote-runners/stream";
const RELEASE: &str = "/api/remote-runners/release";
const SELF_CLAIMS: &str = "/api/remote-runners/self/claims";
const COMPLETE: &str = "/api/remote-runners/complete";

/// The longest wall time a job is given, whatever its requirements say: a year (a runner's
/// own capability document declares a day by default, and an honest server offers no job
/// past what the runner declares).
pub const MAX_WALL_SECONDS: u64 = 365 * 86_400;

/// The longest long poll the server accepts (`waitSeconds`).
pub const MAX_CLAIM_WAIT_SECONDS: u32 = 25;

/// A runner's connection to the control plane. Share it as `Arc<RunnerClient>`: the session
/// and the nonces seen are kept inside.
pub struct RunnerClient {
    http: Http,
    credentials: Credentials,
    expected: ExpectedBinding,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    nonces: Mutex<Box<dyn NonceStore + Send>>,
    served_targets: Vec<ServedTarget>,
    clock: Arc<dyn Clock>,
    retry: RetryPolicy,
}

impl RunnerClient {
    /// A bootstrap-token client refuses sessions for any runner but the one its token names;
    /// [`RunnerClient::with_expected_binding`] says what else the configuration knows.
    pub fn new(http: Http, credentials: Credentials) -> Self {
        let expected = ExpectedBinding {
            runner_id: credentials.runner_id().cloned(),
            organization_id: None,
        };
        Self {
            http,
            credentials,
            expected,
            session: tokio::sync::Mutex::new(None),
            nonces: Mutex::new(Box::new(HashSet::<Nonce>::new())),
            served_targets: Vec::new(),
            clock: Arc::new(SystemClock),
            retry: RetryPolicy::DEFAULT,
        }
    }

    /// Declares the target versions this runner serves: sent with every claim, and any other
    /// target's job is refused before it runs.
    pub fn with_served_targets(mut self, targets: Vec<ServedTarget>) -> Self {
        self.served_targets = targets;
        self
    }

    /// The runner and organization a session must be bound to, where the configuration knows
    /// them; a session for another is refused and never used. What `expected` leaves `None`
    /// stays as it was (the bootstrap token's runner id).
    pub fn with_expected_binding(mut self, expected: ExpectedBinding) -> Self {
        if expected.runner_id.is_some() {
            self.expected.runner_id = expected.runner_id;
        }
        if expected.organization_id.is_some() {
            self.expected.organization_id = expected.organization_id;
        }
        self
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn with_retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Replaces the in-memory nonce set (e.g. with one that survives restarts).
    pub fn with_nonce_store(mut self, store: Box<dyn NonceStore + Send>) -> Self {
        self.nonces = Mutex::new(store);
        self
    }

    pub fn http(&self) -> &Http {
        &self.http
    }

    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    // -----------------------------------------------------------------------------------------
    // Session
    // -----------------------------------------------------------------------------------------

    /// The current session, exchanging a new one when there is none or it is about to expire.
    pub async fn session(&self) -> Result<Arc<Session>, ClientError> {
        let mut held = self.session.lock().await;
        if let Some(session) = held.as_ref() {
            if !session.needs_refresh(self.clock.now()) {
                return Ok(Arc::clone(session));
            }
        }
        let fresh = Arc::new(
            retry(self.retry, ClientError::is_transient, || {
                self.exchange_once()
            })
            .await?,
        );
        *held = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// Forgets `stale` (unless another task already replaced it), so that the next call
    /// exchanges a new session.
    async fn invalidate(&self, stale: &Session) {
        let mut held = self.session.lock().await;
        if held
            .as_ref()
            .is_some_and(|current| current.token() == stale.token())
        {
            *held = None;
        }
    }

    async fn exchange_once(&self) -> Result<Session, ClientError> {
        match &self.credentials {
            Credentials::Bootstrap { runner_id, token } => {
                let body =
                    json!({ "runnerId": runner_id.as_str(), "bootstrapToken": token.expose() });
                let answer = self
                    .http
                    .send(Method::POST, SESSION, None, Some(&body))
                    .await?;
                Session::from_json(
                    &answer.json("POST /api/remote-runners/session")?,
                    &self.expected,
                )
            }
            Credentials::KeyPair(key) => {
                let fingerprint = key.public_key().fingerprint();
                let answer = self
                    .http
                    .send(
                        Method::POST,
                        CHALLENGE,
                        None,
                        Some(&json!({ "fingerprint": fingerprint.as_str() })),
                    )
                    .await?;
                let body = answer.json("POST /api/remote-runners/challenge")?;
                let challenge = body["challenge"]
                    .as_str()
                    .and_then(|text| Challenge::parse(text).ok())
                    .ok_or_else(|| ClientError::Malformed {
                        what: "POST /api/remote-runners/challenge".into(),
                        detail: "no well-formed `challenge` in the answer".into(),
                    })?;
                let body = json!({
                    "fingerprint": fingerprint.as_str(),
                    "challenge": challenge.as_str(),
                    "signature": sign_challenge(key, &challenge),
                });
                let answer = self
                    .http
                    .send(Method::POST, SESSION, None, Some(&body))
                    .await?;
                Session::from_json(
                    &answer.json("POST /api/remote-runners/session")?,
                    &self.expected,
                )
            }
        }
    }

    /// One runner request with the current credential; on `401`, one more with a new one.
    async fn runner_request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(Arc<Session>, Answer), ClientError> {
        let what = format!("{method} {path}");
        let session = self.session().await?;
        let answer = self
            .http
            .raw(method.clone(), path, Some(session.token()), body)
            .await?;
        if answer.status != 401 {
            return Ok((session, check(&what, answer)?));
        }
        self.invalidate(&session).await;
        let session = self.session().await?;
        let answer = self
            .http
            .raw(method, path, Some(session.token()), body)
            .await?;
        Ok((session, check(&what, answer)?))
    }

    // -----------------------------------------------------------------------------------------
    // Runner endpoints
    // -----------------------------------------------------------------------------------------

    /// Asks for a job. `None` when no compatible job is queued (`204`). The assignment is
    /// verified before it is returned; a refusal is [`ClientError::Refused`] and the job must
    /// not run (its claim lapses on the server and the job is requeued).
    pub async fn claim(&self) -> Result<Option<Assignment>, ClientError> {
        self.claim_waiting(0).await
    }

    /// [`RunnerClient::claim`] as a long poll: the server holds the claim until a compatible
    /// job is queued or `wait_seconds` (at most 25) pass; 0 answers at once.
    pub async fn claim_waiting(
        &self,
        wait_seconds: u32,
    ) -> Result<Option<Assignment>, ClientError> {
        let mut body = json!({ "requestId": claim_request_id()? });
        if wait_seconds > 0 {
            body["waitSeconds"] = wait_seconds.min(MAX_CLAIM_WAIT_SECONDS).into();
        }
        if !self.served_targets.is_empty() {
            body["servedTargets"] = self
                .served_targets
                .iter()
                .map(ServedTarget::to_json)
                .collect::<Vec<_>>()
                .into();
        }
        // A claim whose answer was lost holds a job: asked again with the same requestId, the
        // server answers that same claim (API.md), so any transient failure is repeated.
        let (session, answer) = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::POST, CLAIM, Some(&body))
        })
        .await?;
        if answer.status == 204 {
            return Ok(None);
        }
        let raw = answer.json("POST /api/remote-runners/claim")?;
        self.verify(raw, &session).map(Some)
    }

    /// Verifies a claim answer against `session` and records its nonce.
    pub fn verify(&self, raw: Value, session: &Session) -> Result<Assignment, ClientError> {
        let binding = session.binding(&self.served_targets);
        let now = self.clock.now();
        let verified = {
            let mut nonces = self.nonces.lock().unwrap_or_else(PoisonError::into_inner);
            verify_assignment(&raw, &binding, now, nonces.as_mut()).map_err(ClientError::Refused)?
        };
        Ok(Assignment {
            lease_expires_at: raw["claim"]["leaseExpiresAt"].as_str().map(str::to_owned),
            raw,
            verified,
        })
    }

    /// Extends the claim's lease by `extend_seconds` (15–120) and learns whether cancellation
    /// was requested. The first heartbeat moves the job to `running`.
    pub async fn heartbeat(
        &self,
        claim_id: &ClaimId,
        extend_seconds: u32,
    ) -> Result<HeartbeatAnswer, ClientError> {
        let body = json!({ "claimId": claim_id.as_str(), "extendSeconds": extend_seconds });
        let (_, answer) = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::POST, HEARTBEAT, Some(&body))
        })
        .await?;
        let value = answer.json("POST /api/remote-runners/heartbeat")?;
        Ok(HeartbeatAnswer {
            cancel_requested: value["cancelRequested"].as_bool().unwrap_or(false),
            cancel_reason: value["cancelReason"].as_str().map(str::to_owned),
            state: value["state"].as_str().map(str::to_owned),
            lease_expires_at: value["leaseExpiresAt"].as_str().map(str::to_owned),
        })
    }

    /// Sends one chunk, repeating exactly the same chunk on transient failures.
    pub async fn stream(&self, chunk: &StreamChunk) -> Result<StreamAck, ClientError> {
        let body = chunk.to_json();
        let sent = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::POST, STREAM, Some(&body))
        })
        .await;
        match sent {
            Ok(_) => Ok(StreamAck::Stored),
            // Our own earlier try landed and only its answer was lost.
            Err(error) if error.code() == Some(ErrorCode::StreamDuplicateChecksum) => {
                Ok(StreamAck::AlreadyStored)
            }
            Err(error) => Err(error),
        }
    }

    /// Sends the completion, repeating exactly the same completion on transient failures.
    /// Every recorded decision is an `Ok` (`conflict` and `stale` included: the server kept
    /// them); refusals that were not recorded are errors.
    pub async fn complete(&self, completion: &Completion) -> Result<CompletionAnswer, ClientError> {
        let body = completion.to_json();
        let sent = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::POST, COMPLETE, Some(&body))
        })
        .await;
        match sent {
            Ok((_, answer)) => {
                CompletionAnswer::from_json(&answer.json("POST /api/remote-runners/complete")?)
            }
            Err(ClientError::Api {
                status: 409,
                code: Some(code),
                body,
                ..
            }) if matches!(
                ErrorCode::parse(&code),
                Some(ErrorCode::CompletionConflict | ErrorCode::CompletionStale)
            ) =>
            {
                CompletionAnswer::from_json(&body["decision"])
            }
            Err(error) => Err(error),
        }
    }

    /// The job's input snapshot exactly as enqueued (only while holding its active claim):
    /// the bytes as served, and their JSON.
    pub async fn job_input(&self, job_id: &JobId) -> Result<(String, Value), ClientError> {
        let path = format!("/api/remote-runners/jobs/{}/input", job_id.as_str());
        let (_, answer) = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::GET, &path, None)
        })
        .await?;
        let value = answer.json(&format!("GET {path}"))?;
        Ok((answer.text, value))
    }

    /// The bound release version: `{"versionId", "contentHash", "content"}`.
    pub async fn job_artifact(&self, job_id: &JobId) -> Result<Value, ClientError> {
        let path = format!("/api/remote-runners/jobs/{}/artifact", job_id.as_str());
        let (_, answer) = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::GET, &path, None)
        })
        .await?;
        answer.json(&format!("GET {path}"))
    }

    /// `POST` to a job-bound evidence route of the job this runner holds
    /// (`/api/remote-runners/jobs/{job}/evidence/…`). Creating evidence is not idempotent, so only
    /// a request that never left is repeated.
    pub async fn job_evidence(
        &self,
        job_id: &JobId,
        rest: &str,
        body: &Value,
    ) -> Result<Value, ClientError> {
        let path = format!(
            "/api/remote-runners/jobs/{}/evidence/{rest}",
            job_id.as_str()
        );
        let (_, answer) = retry(self.retry, ClientError::never_sent, || {
            self.runner_request(Method::POST, &path, Some(body))
        })
        .await?;
        answer.json(&format!("POST {path}"))
    }

    /// `GET /api/remote-runners/self`: this runner's record.
    pub async fn whoami(&self) -> Result<Value, ClientError> {
        let (_, answer) = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::GET, "/api/remote-runners/self", None)
        })
        .await?;
        answer.json("GET /api/remote-runners/self")
    }

    /// Hands a claim this runner holds back: the job is requeued at once (or ends, at its last
    /// attempt), and this runner is not marked lost. Returns the job's state after it.
    pub async fn release(&self, claim_id: &str, reason: &str) -> Result<String, ClientError> {
        let body = json!({ "claimId": claim_id, "reason": reason });
        let (_, answer) = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::POST, RELEASE, Some(&body))
        })
        .await?;
        let value = answer.json("POST /api/remote-runners/release")?;
        Ok(value["state"].as_str().unwrap_or_default().to_owned())
    }

    /// The ids of the claims this runner's identity holds now (`GET …/self/claims`).
    pub async fn held_claims(&self) -> Result<Vec<String>, ClientError> {
        let (_, answer) = retry(self.retry, ClientError::is_transient, || {
            self.runner_request(Method::GET, SELF_CLAIMS, None)
        })
        .await?;
        let value = answer.json("GET /api/remote-runners/self/claims")?;
        Ok(value["claims"]
            .as_array()
            .map(|claims| {
                claims
                    .iter()
                    .filter_map(|c| c["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// `POST /api/remote-runners/enroll` (no credential): registers a key-pair runner, which
/// waits in `pending_approval` until an admin approves its fingerprint.
/// A fresh idempotency key for one claim: 128 random bits as 32 hex digits.
fn claim_request_id() -> Result<String, ClientError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|error| ClientError::Config(format!("no randomness for a claim: {error}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

pub async fn enroll(http: &Http, body: &Value) -> Result<Value, ClientError> {
    let answer = http
        .send(Method::POST, "/api/remote-runners/enroll", None, Some(body))
        .await?;
    answer.json("POST /api/remote-runners/enroll")
}

/// A verified claim: the only way code gets a job to run.
#[derive(Clone, Debug)]
pub struct Assignment {
    /// The claim answer exactly as received.
    pub raw: Value,
    pub verified: VerifiedAssignment,
    pub lease_expires_at: Option<String>,
}

impl Assignment {
    pub fn envelope(&self) -> &JobEnvelope {
        self.verified.envelope()
    }

    pub fn job_id(&self) -> &JobId {
        &self.envelope().job_id
    }

    pub fn claim_id(&self) -> &ClaimId {
        self.verified.claim_id()
    }

    pub fn attempt(&self) -> DispatchAttempt {
        self.envelope().dispatch_attempt
    }

    pub fn runner_id(&self) -> &RunnerId {
        &self.envelope().runner_id
    }

    /// The claim identity every chunk carries.
    pub fn identity(&self) -> ChunkIdentity {
        let envelope = self.envelope();
        ChunkIdentity {
            job_id: envelope.job_id.clone(),
            claim_id: envelope.claim_id.clone(),
            dispatch_attempt: envelope.dispatch_attempt,
        }
    }

    /// The job's `requirements.limits.wallSeconds`, when it set one; at most
    /// [`MAX_WALL_SECONDS`], so that no number a server sends overflows the deadline made of it.
    pub fn wall_seconds(&self) -> Option<u64> {
        self.envelope()
            .requirements
            .as_map()
            .get("limits")
            .and_then(|limits| limits.get("wallSeconds"))
            .and_then(Value::as_u64)
            .map(|seconds| seconds.min(MAX_WALL_SECONDS))
    }

    /// The job's `requirements.limits.outputBytes`, when it set one.
    pub fn output_bytes(&self) -> Option<u64> {
        self.envelope()
            .requirements
            .as_map()
            .get("limits")
            .and_then(|limits| limits.get("outputBytes"))
            .and_then(Value::as_u64)
    }

    /// A sealed completion for this claim, bound to the signed envelope's identity and input
    /// hash, stamped now. Seal it once and send that same value however often it takes.
    pub fn completion(
        &self,
        status: CompletionStatus,
        result_hash: Option<Sha256Hex>,
        final_stream_checksum: Option<Sha256Hex>,
        evidence: Evidence,
    ) -> Completion {
        Completion::seal(CompletionFields::for_claim(
            self.envelope(),
            status,
            result_hash,
            final_stream_checksum,
            evidence,
            timestamp_now(),
        ))
    }

    /// Whether `input` is the input the envelope signed (`H(input) = inputHash`).
    pub fn input_matches(&self, input: &Value) -> bool {
        stable_json::hash(input) == self.envelope().input_hash
    }
}

/// What a heartbeat learned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub cancel_requested: bool,
    pub cancel_reason: Option<String>,
    pub state: Option<String>,
    pub lease_expires_at: Option<String>,
}

/// A chunk the server holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamAck {
    Stored,
    /// An earlier try of the same chunk was stored; its answer was lost.
    AlreadyStored,
}

/// The server's recorded decision about a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Accepted,
    /// An exact replay of the accepted completion (ours, after a lost answer).
    Duplicate,
    Conflict,
    Stale,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Duplicate => "duplicate",
            Self::Conflict => "conflict",
            Self::Stale => "stale",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletionAnswer {
    pub decision: Decision,
    pub rationale: String,
    pub completion_id: Option<String>,
    pub job_state: Option<String>,
}

impl CompletionAnswer {
    fn from_json(value: &Value) -> Result<Self, ClientError> {
        let decision = match value["decision"].as_str() {
            Some("accepted") => Decision::Accepted,
            Some("duplicate") => Decision::Duplicate,
            Some("conflict") => Decision::Conflict,
            Some("stale") => Decision::Stale,
            other => {
                return Err(ClientError::Malformed {
                    what: "POST /api/remote-runners/complete".into(),
                    detail: format!("unknown decision {other:?}"),
                })
            }
        };
        Ok(Self {
            decision,
            rationale: value["rationale"].as_str().unwrap_or_default().to_owned(),
            completion_id: value["completionId"].as_str().map(str::to_owned),
            job_state: value["jobState"].as_str().map(str::to_owned),
        })
    }

    /// Whether the server now holds this completion as the job's outcome.
    pub fn is_settled(&self) -> bool {
        matches!(self.decision, Decision::Accepted | Decision::Duplicate)
    }
}
