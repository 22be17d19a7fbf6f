//! Helpers for the jobs suites (`tests/jobs.rs`): a release to run, evidence rows to attach,
//! enqueue/inspect/cancel with an API key, and [`jobs::Runner`], a registered runner holding a
//! session that claims (verifying every assignment as the SDK does), heartbeats, streams and
//! completes. Kept in one module so that its names cannot collide with other helpers here.

use std::collections::HashSet;
use std::time::{SystemTime, UNIX_EPOCH};

use edgerunner_protocol::chunk::{ChunkIdentity, ChunkWriter};
use edgerunner_protocol::completion::{Completion, CompletionFields, Evidence, EvidenceId};
use edgerunner_protocol::envelope::{
    verify_assignment, AssignmentError, ClaimId, DispatchAttempt, JobId, JobSigning, Nonce,
    OrganizationId, RunnerId, ServedTarget, SessionBinding, VerifiedAssignment,
};
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use edgerunner_protocol::time::{Timestamp, UnixMillis};
use serde_json::{json, Map, Value};

use crate::{get, now_ms, post, unique, Org, Reply};

/// The runtime every fixture runner declares and every fixture job requires.
pub const RUNTIME: &str = "python3.12";

/// A JSON value parsed from text, so that number lexemes (`1e-07`, `1.50`) are kept as
/// written (`json!` would route them through `f64`).
pub fn lexical(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"))
}

/// `H(value)` as text.
pub fn h(value: &Value) -> String {
    stable_json::hash(value).as_str().to_owned()
}

/// The string `key` of `value` (panics, naming both, when it is not one).
pub fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key:?} in {value}"))
}

/// The array `key` of `value` (panics, naming both, when it is not one).
pub fn array_of<'a>(value: &'a Value, key: &str) -> &'a Vec<Value> {
    value[key]
        .as_array()
        .unwrap_or_else(|| panic!("no array {key:?} in {value}"))
}

/// A created record: `201` (or `200`) with a JSON body.
fn created(reply: &Reply) -> Value {
    assert!(
        reply.status == 201 || reply.status == 200,
        "expected a created record: {reply:?}"
    );
    reply.json()
}

// -----------------------------------------------------------------------------------------
// Release registry
// -----------------------------------------------------------------------------------------

/// One immutable release version (and the artifact it belongs to).
#[derive(Clone, Debug)]
pub struct Release {
    pub kind: String,
    pub artifact_id: String,
    /// The artifact's name, when this library made the artifact ([`release`]).
    pub artifact_name: Option<String>,
    pub version_id: u64,
    pub content_hash: String,
    pub content: Value,
}

impl Release {
    /// `{"versionId", "contentHash"}`, a claim's served target for this version.
    pub fn served_target(&self) -> Value {
        json!({ "versionId": self.version_id, "contentHash": self.content_hash })
    }

    /// The job `subject` for this version in `environment`.
    pub fn subject(&self, environment: &str) -> Value {
        json!({
            "kind": self.kind,
            "artifactId": self.artifact_id,
            "versionId": self.version_id,
            "environment": environment,
        })
    }
}

/// `POST /api/releases/artifacts` `{kind, name}`.
pub async fn create_artifact(bearer: &str, kind: &str, name: &str) -> Reply {
    post(
        "/api/releases/artifacts",
        Some(bearer),
        &json!({ "kind": kind, "name": name }),
    )
    .await
}

/// `POST /api/releases/artifacts/{id}/versions` `{content}`.
pub async fn create_version(bearer: &str, artifact_id: &str, content: &Value) -> Reply {
    post(
        &format!("/api/releases/artifacts/{artifact_id}/versions"),
        Some(bearer),
        &json!({ "content": content }),
    )
    .await
}

/// `POST /api/releases/versions/{id}/promote` `{environment}`.
pub async fn promote(bearer: &str, version_id: u64, environment: &str) -> Reply {
    post(
        &format!("/api/releases/versions/{version_id}/promote"),
        Some(bearer),
        &json!({ "environment": environment }),
    )
    .await
}

/// A new version of `artifact_id` with `content`, promoted to each of `environments`.
/// Checks that the version id is an integer and `contentHash = H(content)`.
pub async fn add_version(
    bearer: &str,
    kind: &str,
    artifact_id: &str,
    content: Value,
    environments: &[&str],
) -> Release {
    let reply = create_version(bearer, artifact_id, &content).await;
    let version = created(&reply);
    let version_id = version["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("version id is not an integer: {reply:?}"));
    assert_eq!(
        str_of(&version, "contentHash"),
        h(&content),
        "contentHash is not H(content): {reply:?}"
    );
    for environment in environments {
        let reply = promote(bearer, version_id, environment).await;
        assert!(
            reply.status == 200 || reply.status == 201,
            "promote to {environment}: {reply:?}"
        );
    }
    Release {
        kind: kind.to_owned(),
        artifact_id: artifact_id.to_owned(),
        artifact_name: None,
        version_id,
        content_hash: h(&content),
        content,
    }
}

/// A new artifact of `kind` with one version of `content`, promoted to `environments`.
pub async fn release(bearer: &str, kind: &str, content: Value, environments: &[&str]) -> Release {
    let name = unique("e2e-artifact");
    let reply = create_artifact(bearer, kind, &name).await;
    let artifact_id = str_of(&created(&reply), "id").to_owned();
    Release {
        artifact_name: Some(name),
        ..add_version(bearer, kind, &artifact_id, content, environments).await
    }
}

/// The content of the fixture's prompt release (a float and non-ASCII text on purpose).
pub fn prompt_content() -> Value {
    lexical(
        r#"{"template": "Réponds à {{question}} ✨", "model": "e2e-model", "temperature": 0.25, "maxTokens": 256}"#,
    )
}

// -----------------------------------------------------------------------------------------
// Jobs (API key)
// -----------------------------------------------------------------------------------------

/// `{cpuSeconds, memoryMb, wallSeconds, outputBytes}`.
pub fn limits(cpu_seconds: u64, memory_mb: u64, wall_seconds: u64, output_bytes: u64) -> Value {
    json!({
        "cpuSeconds": cpu_seconds,
        "memoryMb": memory_mb,
        "wallSeconds": wall_seconds,
        "outputBytes": output_bytes,
    })
}

/// Requirements every fixture runner (see [`capabilities`]) satisfies.
pub fn requirements(kind: &str) -> Value {
    json!({
        "executionKind": kind,
        "runtime": RUNTIME,
        "limits": limits(60, 512, 120, 1_048_576),
        "network": { "mode": "deny_all" },
        "streaming": true,
        "cancellation": true,
    })
}

/// The capability document of a fixture runner for `kinds` (defaults for everything else).
pub fn capabilities(kinds: &[&str]) -> Value {
    json!({ "executionKinds": kinds, "runtimes": [RUNTIME] })
}

/// An enqueue body.
pub fn enqueue_body(
    idempotency_key: &str,
    release: &Release,
    environment: &str,
    input: &Value,
    requirements: &Value,
) -> Value {
    json!({
        "idempotencyKey": idempotency_key,
        "subject": release.subject(environment),
        "input": input,
        "requirements": requirements,
    })
}

/// `POST /api/remote-runners/jobs`.
pub async fn enqueue(bearer: &str, body: &Value) -> Reply {
    post("/api/remote-runners/jobs", Some(bearer), body).await
}

/// Enqueues `input` for `release` in `staging` with `requirements`, expecting `201`.
pub async fn enqueue_job(
    bearer: &str,
    release: &Release,
    input: &Value,
    requirements: &Value,
) -> Value {
    let body = enqueue_body(&unique("e2e-job"), release, "staging", input, requirements);
    let reply = enqueue(bearer, &body).await;
    reply.expect(201)
}

/// One organization with a prompt release promoted to `staging` (and nowhere else): the fixture
/// of the suites that run jobs. The organization is the caller's, so that a suite can choose how
/// it is bootstrapped (some take turns with other local D1 writers).
pub struct StagedPrompt {
    pub org: Org,
    pub release: Release,
}

impl StagedPrompt {
    pub async fn new(org: Org) -> Self {
        let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
        Self { org, release }
    }

    /// The organization's admin key.
    pub fn key(&self) -> &str {
        &self.org.admin_key
    }

    /// Enqueues `input` with the fixture's requirements; returns the job.
    pub async fn enqueue(&self, input: &Value) -> Value {
        enqueue_job(self.key(), &self.release, input, &requirements("prompt")).await
    }

    /// Enqueues a fresh job every fixture runner can take (its input named after `tag`, with a
    /// number whose text must survive as written); returns its id.
    pub async fn new_job(&self, tag: &str) -> String {
        let job = self
            .enqueue(&json!({ "question": unique(tag), "weight": lexical("0.25") }))
            .await;
        assert_eq!(job["state"], "queued", "{job}");
        str_of(&job, "id").to_owned()
    }

    /// A runner registered for prompt jobs, with a session.
    pub async fn runner(&self, max_concurrent_jobs: u32) -> Runner {
        Runner::simple(&self.org, &["prompt"], max_concurrent_jobs).await
    }

    /// A fresh job claimed by a fresh runner, with `heartbeats` heartbeats each answered
    /// `running`: the first moves the job there, a second is answered by a warm job object.
    pub async fn claimed_job(&self, heartbeats: usize) -> (Runner, Claimed) {
        let job_id = self.new_job("job").await;
        let mut runner = self.runner(1).await;
        let claimed = runner.claim_job().await;
        assert_eq!(claimed.job_id(), job_id);
        for _ in 0..heartbeats {
            let beat = runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
            assert_eq!(beat["state"], "running", "{beat}");
        }
        (runner, claimed)
    }
}

/// `GET /api/remote-runners/jobs/{id}`.
pub async fn get_job(bearer: &str, job_id: &str) -> Reply {
    get(&format!("/api/remote-runners/jobs/{job_id}"), bearer).await
}

/// The job with its timeline, expecting `200`.
pub async fn job(bearer: &str, job_id: &str) -> Value {
    get_job(bearer, job_id).await.expect(200)
}

/// `POST /api/remote-runners/jobs/{id}/cancel` `{reason}`.
pub async fn cancel_job(bearer: &str, job_id: &str, reason: &str) -> Reply {
    post(
        &format!("/api/remote-runners/jobs/{job_id}/cancel"),
        Some(bearer),
        &json!({ "reason": reason }),
    )
    .await
}

// -----------------------------------------------------------------------------------------
// Evidence (API key)
// -----------------------------------------------------------------------------------------

/// An evidence id as the server returned it (integer or text).
pub fn evidence_id(record: &Value) -> EvidenceId {
    match &record["id"] {
        Value::String(id) => EvidenceId::Text(id.clone()),
        Value::Number(n) => EvidenceId::Integer(
            n.as_u64()
                .unwrap_or_else(|| panic!("evidence id is not a whole number: {record}")),
        ),
        _ => panic!("evidence record without an id: {record}"),
    }
}

/// `POST /api/evidence/runs`.
pub async fn evaluation_run(bearer: &str) -> EvidenceId {
    let reply = post(
        "/api/evidence/runs",
        Some(bearer),
        &json!({ "evaluationId": unique("e2e-eval"), "metadata": { "suite": "jobs" } }),
    )
    .await;
    evidence_id(&created(&reply))
}

async fn run_row(bearer: &str, run: &EvidenceId, path: &str, body: Value) -> EvidenceId {
    let reply = post(
        &format!("/api/evidence/runs/{}/{path}", run.key()),
        Some(bearer),
        &body,
    )
    .await;
    evidence_id(&created(&reply))
}

/// `POST /api/evidence/runs/{id}/test-results`.
pub async fn test_result(bearer: &str, run: &EvidenceId) -> EvidenceId {
    let body = json!({ "name": unique("case"), "status": "passed", "score": 1 });
    run_row(bearer, run, "test-results", body).await
}

/// `POST /api/evidence/runs/{id}/cost-records`.
pub async fn cost_record(bearer: &str, run: &EvidenceId) -> EvidenceId {
    let body = json!({ "category": "model", "amountMicros": 1250, "currency": "USD" });
    run_row(bearer, run, "cost-records", body).await
}

/// `POST /api/evidence/runs/{id}/model-calls`.
pub async fn model_call(bearer: &str, run: &EvidenceId) -> EvidenceId {
    let body = json!({
        "provider": "e2e", "model": "e2e-model", "status": "succeeded",
        "inputTokens": 12, "outputTokens": 34, "latencyMs": 56,
    });
    run_row(bearer, run, "model-calls", body).await
}

/// `POST /api/evidence/runs/{id}/traces`.
pub async fn trace(bearer: &str, run: &EvidenceId) -> EvidenceId {
    let body = json!({ "name": "e2e-trace", "spans": [{ "name": "root", "durationMs": 5 }] });
    run_row(bearer, run, "traces", body).await
}

/// A run with one row of every kind, as a completion's evidence.
pub async fn full_evidence(bearer: &str) -> Evidence {
    let run = evaluation_run(bearer).await;
    Evidence {
        test_result_ids: vec![test_result(bearer, &run).await],
        cost_record_ids: vec![cost_record(bearer, &run).await],
        model_call_ids: vec![model_call(bearer, &run).await],
        trace_id: Some(trace(bearer, &run).await),
        evaluation_run_id: run,
        extra: Map::new(),
    }
}

/// A run with nothing in it: the least evidence a completion can name.
pub async fn bare_evidence(bearer: &str) -> Evidence {
    Evidence {
        evaluation_run_id: evaluation_run(bearer).await,
        test_result_ids: Vec::new(),
        cost_record_ids: Vec::new(),
        model_call_ids: Vec::new(),
        trace_id: None,
        extra: Map::new(),
    }
}

/// `(kind, id)` for every row of `evidence`, with the kinds of the custody table.
pub fn evidence_rows(evidence: &Evidence) -> Vec<(String, String)> {
    let mut rows = vec![(
        "evaluation_run".to_owned(),
        evidence.evaluation_run_id.key(),
    )];
    let lists = [
        ("test_result", &evidence.test_result_ids),
        ("cost_record", &evidence.cost_record_ids),
        ("model_call", &evidence.model_call_ids),
    ];
    for (kind, ids) in lists {
        rows.extend(ids.iter().map(|id| (kind.to_owned(), id.key())));
    }
    if let Some(id) = &evidence.trace_id {
        rows.push(("trace".to_owned(), id.key()));
    }
    rows
}

// -----------------------------------------------------------------------------------------
// Time
// -----------------------------------------------------------------------------------------

/// Now, as the SDK writes `emittedAt` and `completedAt`: UTC with microseconds and `Z`.
pub fn timestamp_now() -> Timestamp {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_micros();
    let millis = i64::try_from(micros / 1000).expect("milliseconds fit in i64");
    let rendered = UnixMillis::new(millis)
        .expect("now is a representable instant")
        .to_rfc3339();
    let text = format!("{}{:03}Z", rendered.trim_end_matches('Z'), micros % 1000);
    Timestamp::parse(&text).unwrap_or_else(|e| panic!("{text:?} does not parse: {e:?}"))
}

// -----------------------------------------------------------------------------------------
// A runner
// -----------------------------------------------------------------------------------------

/// A registered runner with a live session.
pub struct Runner {
    pub id: String,
    pub organization_id: String,
    pub bootstrap_token: String,
    /// The runner credential (`erc_…`).
    pub token: String,
    pub signing: JobSigning,
    /// The whole session answer.
    pub session: Value,
    nonces: HashSet<Nonce>,
}

impl Runner {
    /// Registers a runner with `capabilities` and `maxConcurrentJobs`, and exchanges its
    /// bootstrap token.
    pub async fn register(org: &Org, capabilities: Value, max_concurrent_jobs: u32) -> Self {
        let body = json!({
            "name": unique("jobs-runner"),
            "runnerKey": unique("jobs-runner"),
            "capabilities": capabilities,
            "maxConcurrentJobs": max_concurrent_jobs,
        });
        let (runner, token) = super::register_runner(&org.admin_key, &body).await;
        Self::connect(&super::id_of(&runner), &token).await
    }

    /// A fixture runner for `kinds`.
    pub async fn simple(org: &Org, kinds: &[&str], max_concurrent_jobs: u32) -> Self {
        Self::register(org, capabilities(kinds), max_concurrent_jobs).await
    }

    /// Exchanges `bootstrap_token` for a session of runner `id`.
    pub async fn connect(id: &str, bootstrap_token: &str) -> Self {
        let reply = super::session(id, bootstrap_token).await;
        let session = reply.expect(200);
        let signing = JobSigning::from_json(&session["jobSigning"])
            .unwrap_or_else(|e| panic!("unusable jobSigning ({e}): {reply:?}"));
        Self {
            id: id.to_owned(),
            organization_id: str_of(&session["claims"], "organizationId").to_owned(),
            bootstrap_token: bootstrap_token.to_owned(),
            token: str_of(&session, "token").to_owned(),
            signing,
            session,
            nonces: HashSet::new(),
        }
    }

    /// What [`verify_assignment`] checks an assignment against.
    pub fn binding(&self, served_targets: &[Value]) -> SessionBinding {
        SessionBinding {
            organization_id: OrganizationId::parse(&self.organization_id)
                .expect("the session's organization id is an identifier"),
            signing: self.signing.clone(),
            served_targets: served_targets
                .iter()
                .map(|target| {
                    ServedTarget::from_json(target)
                        .unwrap_or_else(|e| panic!("bad served target {target}: {e}"))
                })
                .collect(),
        }
    }

    /// `POST /api/remote-runners/claim` with `body`.
    pub async fn claim_with(&self, body: &Value) -> Reply {
        post("/api/remote-runners/claim", Some(&self.token), body).await
    }

    /// `POST /api/remote-runners/claim` `{}`.
    pub async fn claim(&self) -> Reply {
        self.claim_with(&json!({})).await
    }

    /// Verifies a `200` claim answer as the SDK would (served targets as declared).
    pub fn verify(
        &mut self,
        reply: &Reply,
        served_targets: &[Value],
    ) -> Result<Claimed, AssignmentError> {
        let assignment = reply.expect(200);
        let binding = self.binding(served_targets);
        let verified = verify_assignment(
            &assignment,
            &binding,
            UnixMillis::new(now_ms()).expect("now is representable"),
            &mut self.nonces,
        )?;
        Ok(Claimed {
            assignment,
            verified,
        })
    }

    /// Claims (`{}`), expecting `200`, and verifies the assignment.
    pub async fn claim_job(&mut self) -> Claimed {
        let reply = self.claim().await;
        self.verify(&reply, &[])
            .unwrap_or_else(|e| panic!("assignment refused by verification ({e}): {reply:?}"))
    }

    /// `POST /api/remote-runners/heartbeat`.
    pub async fn heartbeat(&self, claim_id: &str, extend_seconds: i64) -> Reply {
        post(
            "/api/remote-runners/heartbeat",
            Some(&self.token),
            &json!({ "claimId": claim_id, "extendSeconds": extend_seconds }),
        )
        .await
    }

    /// `POST /api/remote-runners/stream`.
    pub async fn stream(&self, chunk: &Value) -> Reply {
        post("/api/remote-runners/stream", Some(&self.token), chunk).await
    }

    /// `POST /api/remote-runners/complete`.
    pub async fn complete(&self, completion: &Value) -> Reply {
        post(
            "/api/remote-runners/complete",
            Some(&self.token),
            completion,
        )
        .await
    }

    /// `GET /api/remote-runners/jobs/{id}/input`.
    pub async fn input(&self, job_id: &str) -> Reply {
        get(
            &format!("/api/remote-runners/jobs/{job_id}/input"),
            &self.token,
        )
        .await
    }

    /// `GET /api/remote-runners/jobs/{id}/artifact`.
    pub async fn artifact(&self, job_id: &str) -> Reply {
        get(
            &format!("/api/remote-runners/jobs/{job_id}/artifact"),
            &self.token,
        )
        .await
    }
}

/// A verified assignment.
#[derive(Clone, Debug)]
pub struct Claimed {
    /// The claim answer as received.
    pub assignment: Value,
    pub verified: VerifiedAssignment,
}

impl Claimed {
    pub fn job_id(&self) -> String {
        self.verified.envelope().job_id.as_str().to_owned()
    }

    pub fn claim_id(&self) -> String {
        self.verified.claim_id().as_str().to_owned()
    }

    pub fn attempt(&self) -> DispatchAttempt {
        self.verified.envelope().dispatch_attempt
    }

    /// The claim identity its chunks carry.
    pub fn identity(&self) -> ChunkIdentity {
        let envelope = self.verified.envelope();
        ChunkIdentity {
            job_id: envelope.job_id.clone(),
            claim_id: envelope.claim_id.clone(),
            dispatch_attempt: envelope.dispatch_attempt,
        }
    }

    /// A fresh chain for this claim.
    pub fn writer(&self) -> ChunkWriter {
        ChunkWriter::new(self.identity())
    }

    /// The completion fields a well-behaved runner sends (the envelope's input hash, now).
    pub fn fields(
        &self,
        status: CompletionStatus,
        result_hash: Option<Sha256Hex>,
        final_stream_checksum: Option<Sha256Hex>,
        evidence: Evidence,
    ) -> CompletionFields {
        CompletionFields::for_claim(
            self.verified.envelope(),
            status,
            result_hash,
            final_stream_checksum,
            evidence,
            timestamp_now(),
        )
    }

    /// A sealed `succeeded` completion closing `final_stream_checksum`.
    pub fn succeeded(
        &self,
        final_stream_checksum: Option<&Sha256Hex>,
        evidence: Evidence,
    ) -> Value {
        let result = json!({ "jobId": self.job_id(), "answer": "ok" });
        Completion::seal(self.fields(
            CompletionStatus::Succeeded,
            Some(stable_json::hash(&result)),
            final_stream_checksum.cloned(),
            evidence,
        ))
        .to_json()
    }
}

/// Typed ids for building chunks and completions by hand.
pub fn job_id(text: &str) -> JobId {
    JobId::parse(text).expect("job id")
}

pub fn claim_id(text: &str) -> ClaimId {
    ClaimId::parse(text).expect("claim id")
}

pub fn runner_id(text: &str) -> RunnerId {
    RunnerId::parse(text).expect("runner id")
}
