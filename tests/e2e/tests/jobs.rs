//! Jobs, end to end, against docs/API.md ("Jobs") and PROTOCOL.md: enqueue and its refusals,
//! capability negotiation (never relaxed), the signed assignment verified exactly as the SDK
//! verifies it, job-bound reads, heartbeats and leases, stream custody and every refusal code,
//! completion reconciliation and evidence custody, cancellation, and a claim race across many
//! runners.
//!
//! Each test makes its own organization (tests are independent and run in parallel with
//! `--test-threads=4`), never sleeps to synchronize, and bounds every loop. Where a refusal
//! alone could pass for the wrong reason, a control next to it shows the same request
//! succeeding with only the defect removed.

use std::collections::{BTreeMap, BTreeSet};

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::{ChainHead, ChunkError, ChunkIdentity, ChunkKind, IdentityField};
use edgerunner_protocol::completion::{Completion, Evidence, EvidenceId};
use edgerunner_protocol::envelope::DispatchAttempt;
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Value};

/// Clock skew tolerated between this process and the server (same machine).
const SKEW_MS: i64 = 5_000;

/// The fields of a `Job` (API.md "Jobs").
const JOB_FIELDS: [&str; 14] = [
    "id",
    "organizationId",
    "idempotencyKey",
    "state",
    "dispatchAttempt",
    "subject",
    "inputHash",
    "requirements",
    "activeClaimId",
    "leaseExpiresAt",
    "cancelReason",
    "createdAt",
    "updatedAt",
    "finishedAt",
];

/// `scripts/bootstrap-admin` writes the server's SQLite file from another process (wrangler
/// d1 execute). Locally that can make a concurrent server write fail with `SQLITE_BUSY`, an
/// artifact of the local setup (deployed D1 has no second writer), so the claim race holds this
/// exclusively while it runs and every bootstrap here takes it shared.
static OPERATOR_WRITES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// [`bootstrap_org`], never while the claim race runs.
async fn org(name: &str) -> Org {
    let _shared = OPERATOR_WRITES.read().await;
    bootstrap_org(name)
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key:?} in {value}"))
}

fn array_of<'a>(value: &'a Value, key: &str) -> &'a Vec<Value> {
    value[key]
        .as_array()
        .unwrap_or_else(|| panic!("no array {key:?} in {value}"))
}

fn assert_job_shape(job: &Value) {
    let object = job
        .as_object()
        .unwrap_or_else(|| panic!("a job is an object: {job}"));
    let missing: Vec<_> = JOB_FIELDS
        .iter()
        .filter(|field| !object.contains_key(**field))
        .collect();
    assert!(missing.is_empty(), "job lacks {missing:?}: {job}");
    for field in [
        "kind",
        "artifactId",
        "versionId",
        "contentHash",
        "environment",
    ] {
        assert!(
            job["subject"].get(field).is_some(),
            "job subject lacks {field}: {job}"
        );
    }
}

/// `assert_eq!` on a refused chunk: the status and code the protocol crate assigns `error`.
fn expect_chunk_error(reply: &Reply, error: &ChunkError) {
    reply.expect_error(error.http_status(), error.code());
}

/// A stream answer for an accepted chunk.
fn expect_chunk_accepted(reply: &Reply, sequence: u64, checksum: &Sha256Hex) {
    let body = reply.expect(200);
    assert_eq!(body["accepted"], true, "{reply:?}");
    assert_eq!(body["sequence"].as_u64(), Some(sequence), "{reply:?}");
    assert_eq!(body["checksum"], checksum.as_str(), "{reply:?}");
}

/// The `(kind, id)` custody rows a job shows, all naming `completion_id`.
fn attached_evidence(job: &Value, completion_id: &str) -> BTreeSet<(String, String)> {
    array_of(job, "evidence")
        .iter()
        .map(|row| {
            assert_eq!(
                row["completionId"], completion_id,
                "evidence attached to another completion: {job}"
            );
            let id = match &row["id"] {
                Value::String(id) => id.clone(),
                Value::Number(n) => n.to_string(),
                other => panic!("evidence id {other} is neither text nor a number: {job}"),
            };
            (str_of(row, "kind").to_owned(), id)
        })
        .collect()
}

fn rows(evidence: &Evidence) -> BTreeSet<(String, String)> {
    evidence_rows(evidence).into_iter().collect()
}

/// The `type`s of a job's events, in order.
fn event_types(job: &Value) -> Vec<String> {
    array_of(job, "events")
        .iter()
        .map(|event| str_of(event, "type").to_owned())
        .collect()
}

/// A job's events are in order: increasing ids (when numeric) and non-decreasing times.
fn assert_events_ordered(job: &Value) {
    let events = array_of(job, "events");
    let times: Vec<i64> = events.iter().map(|e| parse_time(str_of(e, "at"))).collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "events out of time order: {job}"
    );
    let ids: Vec<Option<i64>> = events.iter().map(|e| e["id"].as_i64()).collect();
    if ids.iter().all(Option::is_some) {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "event ids not increasing: {job}"
        );
    }
}

/// A well-formed chunk for `identity` whose only defect is what the caller changes.
fn next_chunk(head: &ChainHead, identity: &ChunkIdentity, payload: Value) -> Value {
    head.next_chunk(identity, ChunkKind::Log, payload, timestamp_now())
        .to_json()
}

/// Claims the single queued job of the fixture with `runner`, heartbeats it (running) and
/// returns the assignment.
async fn claim_running(runner: &mut Runner) -> Claimed {
    let claimed = runner.claim_job().await;
    let beat = runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["state"], "running", "first heartbeat: {beat}");
    claimed
}

// ---------------------------------------------------------------------------------------------
// The whole lifecycle
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn full_lifecycle_from_enqueue_to_accepted_completion() {
    let f = StagedPrompt::new(org("jobs-lifecycle").await).await;
    let mut runner = f.runner(1).await;
    let other = f.runner(1).await;

    // Enqueue: floats, big integers and non-ASCII text, hashed over the lexemes as sent.
    let input = lexical(
        r#"{"question": "¿Qué tal? 🌍", "weights": [0.1, 1e-07, 1.50, 1e+16], "big": 12345678901234567890123, "nested": {"b": 1, "a": null}}"#,
    );
    let idempotency_key = unique("lifecycle");
    let body = enqueue_body(
        &idempotency_key,
        &f.release,
        "staging",
        &input,
        &requirements("prompt"),
    );
    let before = now_ms();
    let enqueued = enqueue(f.key(), &body).await.expect(201);
    assert_job_shape(&enqueued);
    let job_id = str_of(&enqueued, "id").to_owned();
    assert_eq!(enqueued["organizationId"], f.org.id.as_str());
    assert_eq!(enqueued["idempotencyKey"], idempotency_key.as_str());
    assert_eq!(enqueued["state"], "queued");
    assert_eq!(enqueued["dispatchAttempt"], 0);
    assert_eq!(enqueued["activeClaimId"], Value::Null);
    assert_eq!(enqueued["inputHash"], h(&input).as_str());
    assert_eq!(
        enqueued["subject"],
        json!({
            "kind": "prompt",
            "artifactId": f.release.artifact_id,
            "versionId": f.release.version_id,
            "contentHash": f.release.content_hash,
            "environment": "staging",
        })
    );
    assert!(parse_time(str_of(&enqueued, "createdAt")) >= before - SKEW_MS);

    // Claim, and verify the assignment exactly as the SDK does (key id, organization, claim
    // identity, validity window, payload hash, HMAC, nonce).
    let reply = runner.claim().await;
    let claimed = runner
        .verify(&reply, &[])
        .unwrap_or_else(|e| panic!("assignment refused ({e}): {reply:?}"));
    let claim = &claimed.assignment["claim"];
    let claim_id = claimed.claim_id();
    let envelope = claimed.verified.envelope();
    assert_eq!(envelope.job_id.as_str(), job_id);
    assert_eq!(envelope.organization_id.as_str(), f.org.id);
    assert_eq!(envelope.runner_id.as_str(), runner.id);
    assert_eq!(envelope.dispatch_attempt, DispatchAttempt::FIRST);
    assert_eq!(envelope.idempotency_key.as_str(), idempotency_key);
    assert_eq!(envelope.subject.kind.as_str(), "prompt");
    assert_eq!(envelope.subject.artifact_id.as_str(), f.release.artifact_id);
    assert_eq!(envelope.subject.version_id, f.release.version_id);
    assert_eq!(
        envelope.subject.content_hash.as_str(),
        f.release.content_hash
    );
    assert_eq!(envelope.subject.environment.as_str(), "staging");
    assert_eq!(envelope.input_hash.as_str(), h(&input));
    assert_eq!(envelope.requirements.as_map()["executionKind"], "prompt");
    assert_eq!(envelope.requirements.as_map()["runtime"], RUNTIME);
    assert!(
        claimed.assignment["signedJob"]["envelope"]
            .get("input")
            .is_none(),
        "the input travels by hash, not inline: {reply:?}"
    );
    let issued = envelope.issued_at.instant().get();
    let expires = envelope.expires_at.instant().get();
    assert_eq!(
        expires - issued,
        5 * 60 * 1000,
        "envelope window: {reply:?}"
    );
    assert!(
        (before - SKEW_MS..=now_ms() + SKEW_MS).contains(&issued),
        "issuedAt is not now: {reply:?}"
    );
    assert_eq!(claim["runnerId"], runner.id.as_str());
    assert_eq!(claim["jobId"], job_id.as_str());
    let lease = parse_time(str_of(claim, "leaseExpiresAt"));
    assert!(
        (issued + 60_000 - SKEW_MS..=issued + 60_000 + SKEW_MS).contains(&lease),
        "the first lease runs 60 s from the claim: {reply:?}"
    );
    // The nonce is single use on the runner's side too.
    assert!(
        runner.verify(&reply, &[]).is_err(),
        "a replayed nonce verified"
    );

    // Nothing left for the other runner.
    let none = other.claim().await;
    assert_eq!(none.status, 204, "{none:?}");

    // Job-bound reads: only the holder of the active claim.
    let read = runner.input(&job_id).await;
    assert_eq!(read.status, 200, "{read:?}");
    assert!(
        read.content_type().starts_with("application/json"),
        "{read:?}"
    );
    assert_eq!(read.json(), input, "the input is not exactly as enqueued");
    assert_eq!(h(&read.json()), h(&input));
    let artifact = runner.artifact(&job_id).await.expect(200);
    assert_eq!(artifact["versionId"].as_u64(), Some(f.release.version_id));
    assert_eq!(artifact["contentHash"], f.release.content_hash.as_str());
    assert_eq!(artifact["content"], f.release.content);
    assert_eq!(h(&artifact["content"]), f.release.content_hash);
    other.input(&job_id).await.expect_error(404, "NOT_FOUND");
    other.artifact(&job_id).await.expect_error(404, "NOT_FOUND");
    for path in ["input", "artifact"] {
        get(
            &format!("/api/remote-runners/jobs/{job_id}/{path}"),
            f.key(),
        )
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    }
    // A runner of another organization: the job does not exist for it.
    let foreign = org("jobs-lifecycle-foreign").await;
    let outsider = Runner::simple(&foreign, &["prompt"], 1).await;
    outsider.input(&job_id).await.expect_error(404, "NOT_FOUND");
    outsider
        .artifact(&job_id)
        .await
        .expect_error(404, "NOT_FOUND");
    // Runner endpoints refuse an API key; job administration refuses a runner credential.
    for path in ["claim", "heartbeat", "stream", "complete"] {
        post(
            &format!("/api/remote-runners/{path}"),
            Some(f.key()),
            &json!({}),
        )
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    }
    get_job(&runner.token, &job_id)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    cancel_job(&runner.token, &job_id, "a runner cannot cancel")
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // Heartbeat: claimed → running.
    assert_eq!(job(f.key(), &job_id).await["state"], "claimed");
    let beat = runner.heartbeat(&claim_id, 60).await.expect(200);
    assert_eq!(beat["cancelRequested"], false, "{beat}");
    assert_eq!(beat["cancelReason"], Value::Null, "{beat}");
    assert_eq!(beat["state"], "running", "{beat}");
    let lease = parse_time(str_of(&beat, "leaseExpiresAt"));
    assert!((now_ms() + 60_000 - SKEW_MS * 2..=now_ms() + 60_000 + SKEW_MS).contains(&lease));
    let running = job(f.key(), &job_id).await;
    assert_eq!(running["state"], "running");
    assert_eq!(running["activeClaimId"], claim_id.as_str());

    // Three chunks, unicode and float payloads.
    let payloads = [
        (
            ChunkKind::Log,
            lexical(r#"{"message": "héllo 🌍", "score": 0.1, "tiny": 1e-07, "big": 1e+16}"#),
        ),
        (
            ChunkKind::Trajectory,
            lexical(
                r#"{"step": 1, "tool": "search", "args": {"q": "日本語 \"quoted\"\n\ttab", "temperature": 0.70}, "ok": true, "none": null}"#,
            ),
        ),
        (
            ChunkKind::Log,
            lexical(
                r#"{"message": "done ✓", "values": [1.0, -0.0, 12345678901234567890123], "ratio": 0.3333333333333333}"#,
            ),
        ),
    ];
    let mut writer = claimed.writer();
    let mut sent = Vec::new();
    for (sequence, (kind, payload)) in payloads.iter().enumerate() {
        let chunk = writer.next(*kind, payload.clone(), timestamp_now());
        let reply = runner.stream(&chunk.to_json()).await;
        expect_chunk_accepted(&reply, sequence as u64, &chunk.checksum);
        sent.push(chunk);
    }

    // Complete with real evidence.
    let evidence = full_evidence(f.key()).await;
    let completion = claimed.succeeded(writer.final_checksum(), evidence.clone());
    let reply = runner.complete(&completion).await;
    let decision = reply.expect(200);
    assert_eq!(decision["decision"], "accepted", "{reply:?}");
    assert_eq!(decision["jobState"], "succeeded", "{reply:?}");
    assert!(decision["rationale"].is_string(), "{reply:?}");
    let completion_id = str_of(&decision, "completionId").to_owned();

    // The job's whole record.
    let done = job(f.key(), &job_id).await;
    assert_job_shape(&done);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["dispatchAttempt"], 1, "{done}");
    assert_eq!(done["activeClaimId"], Value::Null, "{done}");
    assert_eq!(done["leaseExpiresAt"], Value::Null, "{done}");
    assert!(done["finishedAt"].is_string(), "{done}");

    let claims = array_of(&done, "claims");
    assert_eq!(claims.len(), 1, "{done}");
    assert_eq!(claims[0]["id"], claim_id.as_str());
    assert_eq!(claims[0]["runnerId"], runner.id.as_str());
    assert_eq!(claims[0]["dispatchAttempt"], 1);
    assert_eq!(claims[0]["state"], "released", "{done}");
    assert_eq!(claims[0]["keyId"], runner.signing.key_id.as_str());
    assert!(claims[0]["startedAt"].is_string(), "{done}");
    assert!(claims[0]["endedAt"].is_string(), "{done}");

    assert_events_ordered(&done);
    let types = event_types(&done);
    assert_eq!(
        types.first().map(String::as_str),
        Some("job.enqueued"),
        "{done}"
    );
    let claimed_at = types
        .iter()
        .position(|t| t == "job.claimed")
        .unwrap_or_else(|| panic!("no job.claimed event: {done}"));
    assert!(
        claimed_at + 1 < types.len(),
        "no event after the claim (start, completion): {types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "job.enqueued").count(),
        1,
        "{types:?}"
    );

    let stream = array_of(&done, "stream");
    assert_eq!(stream.len(), 3, "{done}");
    for (i, (row, chunk)) in stream.iter().zip(&sent).enumerate() {
        assert_eq!(row["sequence"].as_u64(), Some(i as u64), "{done}");
        assert_eq!(row["dispatchAttempt"], 1, "{done}");
        assert_eq!(row["kind"], chunk.kind.as_str(), "{done}");
        assert_eq!(row["checksum"], chunk.checksum.as_str(), "{done}");
        assert_eq!(row["payloadHash"], chunk.payload_hash.as_str(), "{done}");
        assert_eq!(row["emittedAt"], chunk.emitted_at.as_str(), "{done}");
        let previous = i
            .checked_sub(1)
            .map_or(Value::Null, |p| Value::from(sent[p].checksum.as_str()));
        assert_eq!(row["previousChecksum"], previous, "chain broken: {done}");
    }

    let completions = array_of(&done, "completions");
    assert_eq!(completions.len(), 1, "{done}");
    let accepted = &completions[0];
    assert_eq!(accepted["id"], completion_id.as_str());
    assert_eq!(accepted["decision"], "accepted");
    assert_eq!(accepted["status"], "succeeded");
    assert_eq!(accepted["claimId"], claim_id.as_str());
    assert_eq!(accepted["runnerId"], runner.id.as_str());
    assert_eq!(accepted["dispatchAttempt"], 1);
    assert_eq!(
        accepted["completionChecksum"],
        completion["completionChecksum"]
    );
    assert_eq!(accepted["inputHash"], h(&input).as_str());
    assert_eq!(accepted["resultHash"], completion["resultHash"]);
    assert_eq!(
        accepted["finalStreamChecksum"],
        sent[2].checksum.as_str(),
        "{done}"
    );
    assert_eq!(accepted["completedAt"], completion["completedAt"]);
    assert_eq!(accepted["evidence"], evidence.to_json(), "{done}");
    assert_eq!(
        attached_evidence(&done, &completion_id),
        rows(&evidence),
        "evidence custody: {done}"
    );

    let record = runner_record(f.key(), &runner.id).await;
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["completedJobs"], 1, "{record}");
    assert!(record["lastHeartbeatAt"].is_string(), "{record}");

    // Exact replay: duplicate, stored.
    let reply = runner.complete(&completion).await;
    let replay = reply.expect(200);
    assert_eq!(replay["decision"], "duplicate", "{reply:?}");
    assert_eq!(replay["jobState"], "succeeded", "{reply:?}");
    let after = job(f.key(), &job_id).await;
    let completions = array_of(&after, "completions");
    assert_eq!(completions.len(), 2, "the duplicate is stored: {after}");
    assert_eq!(completions[1]["decision"], "duplicate");
    assert_eq!(
        completions[1]["completionChecksum"],
        completion["completionChecksum"]
    );
    assert_eq!(after["state"], "succeeded");

    // A different completion after acceptance: conflict, stored, nothing else changes.
    let different = Completion::seal(claimed.fields(
        CompletionStatus::Failed,
        None,
        writer.final_checksum().cloned(),
        bare_evidence(f.key()).await,
    ))
    .to_json();
    let reply = runner.complete(&different).await;
    reply.expect_error(409, "COMPLETION_CONFLICT");
    assert!(
        reply.json()["decision"].is_object(),
        "a conflict carries its decision: {reply:?}"
    );
    let after = job(f.key(), &job_id).await;
    let completions = array_of(&after, "completions");
    assert_eq!(completions.len(), 3, "the conflict is stored: {after}");
    assert_eq!(completions[2]["decision"], "conflict");
    assert_eq!(
        completions[2]["completionChecksum"],
        different["completionChecksum"]
    );
    assert!(completions[2]["rationale"].is_string());
    assert_eq!(after["state"], "succeeded", "{after}");
    assert_eq!(attached_evidence(&after, &completion_id), rows(&evidence));
    let record = runner_record(f.key(), &runner.id).await;
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["completedJobs"], 1, "{record}");

    // The evidence records say who took custody; the conflict's run stays free.
    let run = get(
        &format!("/api/evidence/runs/{}", evidence.evaluation_run_id.key()),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(
        run["attachedTo"]["completionId"],
        completion_id.as_str(),
        "{run}"
    );
    assert_eq!(run["attachedTo"]["jobId"], job_id.as_str(), "{run}");
    for list in ["testResults", "costRecords", "modelCalls", "traces"] {
        let rows = array_of(&run, list);
        assert_eq!(rows.len(), 1, "{list}: {run}");
        assert_eq!(
            rows[0]["attachedTo"]["completionId"],
            completion_id.as_str(),
            "{list}: {run}"
        );
    }
    let free = get(
        &format!(
            "/api/evidence/runs/{}",
            different["evidence"]["evaluationRunId"]
                .as_str()
                .expect("run id")
        ),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(free["attachedTo"], Value::Null, "{free}");

    // The custody bundle carries everything exactly as signed and as received (lexemes too).
    let bundle = get(
        &format!("/api/remote-runners/jobs/{job_id}/bundle"),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(bundle["bundleVersion"], 1, "{bundle}");
    assert_eq!(bundle["job"]["id"], job_id.as_str());
    let claims = array_of(&bundle, "claims");
    assert_eq!(claims.len(), 1, "{bundle}");
    assert_eq!(
        claims[0]["signedJob"], claimed.assignment["signedJob"],
        "the bundle's signed job is not what the runner verified"
    );
    let chunks: Vec<Value> = sent.iter().map(|chunk| chunk.to_json()).collect();
    assert_eq!(
        array_of(&bundle, "stream"),
        &chunks,
        "the bundle's chunks are not exactly what was streamed"
    );
    let received: Vec<(&str, &Value)> = array_of(&bundle, "completions")
        .iter()
        .map(|c| (str_of(c, "decision"), &c["completion"]))
        .collect();
    assert_eq!(
        received,
        vec![
            ("accepted", &completion),
            ("duplicate", &completion),
            ("conflict", &different),
        ],
        "the bundle's completions are not exactly what was received"
    );
}

// ---------------------------------------------------------------------------------------------
// Enqueue
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn enqueue_is_idempotent_and_refuses_what_it_cannot_bind() {
    let f = StagedPrompt::new(org("jobs-enqueue").await).await;
    let reqs = requirements("prompt");
    // `1.50` hashes as written, not as 1.5.
    let input = lexical(r#"{"prompt": "hi", "temperature": 1.50}"#);
    let key = unique("enqueue");
    let body = enqueue_body(&key, &f.release, "staging", &input, &reqs);

    let first = enqueue(f.key(), &body).await.expect(201);
    assert_job_shape(&first);
    let job_id = str_of(&first, "id").to_owned();
    assert_eq!(first["inputHash"], h(&input).as_str());
    assert_ne!(
        first["inputHash"],
        h(&lexical(r#"{"prompt": "hi", "temperature": 1.5}"#)).as_str(),
        "the input hash must cover the lexeme 1.50"
    );
    assert_eq!(
        first["subject"]["contentHash"],
        f.release.content_hash.as_str()
    );

    // Same key, same intent: the original job, 200.
    let again = enqueue(f.key(), &body).await.expect(200);
    assert_eq!(again["id"], job_id.as_str(), "{again}");
    assert_eq!(again["inputHash"], first["inputHash"]);
    let stored = job(f.key(), &job_id).await;
    assert_eq!(
        event_types(&stored)
            .iter()
            .filter(|t| *t == "job.enqueued")
            .count(),
        1,
        "a replay enqueues nothing: {stored}"
    );
    let listed = get("/api/remote-runners/jobs?limit=500", f.key())
        .await
        .expect(200);
    let ids: Vec<&str> = array_of(&listed, "jobs")
        .iter()
        .map(|j| str_of(j, "id"))
        .collect();
    assert_eq!(ids, vec![job_id.as_str()], "one job, listed once: {listed}");

    // Same key, different intent.
    let changed_input = enqueue_body(
        &key,
        &f.release,
        "staging",
        &lexical(r#"{"prompt": "hi", "temperature": 1.5}"#),
        &reqs,
    );
    enqueue(f.key(), &changed_input)
        .await
        .expect_error(409, "IDEMPOTENCY_CONFLICT");
    let mut changed_reqs = reqs.clone();
    changed_reqs["limits"]["cpuSeconds"] = json!(61);
    let changed = enqueue_body(&key, &f.release, "staging", &input, &changed_reqs);
    enqueue(f.key(), &changed)
        .await
        .expect_error(409, "IDEMPOTENCY_CONFLICT");

    // Not promoted to the environment.
    for environment in ["prod", "dev"] {
        let body = enqueue_body(
            &unique("unpromoted"),
            &f.release,
            environment,
            &input,
            &reqs,
        );
        enqueue(f.key(), &body)
            .await
            .expect_error(409, "VERSION_NOT_PROMOTED");
    }

    // Unknown version, unknown artifact.
    let mut unknown = f.release.clone();
    unknown.version_id += 1_000_000;
    let body = enqueue_body(&unique("unknown"), &unknown, "staging", &input, &reqs);
    enqueue(f.key(), &body)
        .await
        .expect_error(404, "VERSION_NOT_FOUND");
    let mut unknown = f.release.clone();
    unknown.artifact_id = "art_does_not_exist".to_owned();
    let body = enqueue_body(&unique("unknown"), &unknown, "staging", &input, &reqs);
    enqueue(f.key(), &body)
        .await
        .expect_error(404, "VERSION_NOT_FOUND");

    // Subject kind other than the artifact's: refused, never bound.
    let mut wrong_kind = enqueue_body(&unique("kind"), &f.release, "staging", &input, &reqs);
    wrong_kind["subject"]["kind"] = json!("scorer");
    let reply = enqueue(f.key(), &wrong_kind).await;
    assert!(
        [404, 409, 422].contains(&reply.status),
        "a prompt version bound as a scorer: {reply:?}"
    );

    // Another organization's version is not found; that organization can use it.
    let foreign = StagedPrompt::new(org("jobs-enqueue-foreign").await).await;
    let body = enqueue_body(
        &unique("foreign"),
        &foreign.release,
        "staging",
        &input,
        &reqs,
    );
    enqueue(f.key(), &body)
        .await
        .expect_error(404, "VERSION_NOT_FOUND");
    let theirs = enqueue(foreign.key(), &body).await.expect(201);
    get_job(f.key(), str_of(&theirs, "id"))
        .await
        .expect_error(404, "NOT_FOUND");

    // Invalid requirements.
    let mut bad_limit = reqs.clone();
    bad_limit["limits"]["cpuSeconds"] = json!(0);
    let mut missing_limit = reqs.clone();
    missing_limit["limits"]
        .as_object_mut()
        .expect("limits object")
        .remove("memoryMb");
    let mut bad_origin = reqs.clone();
    bad_origin["network"] = json!({ "mode": "allowlist", "origins": ["http://plain.example.com"] });
    let mut unknown_field = reqs.clone();
    unknown_field["gpu"] = json!(true);
    let invalid = [
        json!({ "executionKind": "prompt", "runtime": RUNTIME }),
        json!({ "executionKind": "banana", "runtime": RUNTIME, "limits": limits(1, 1, 1, 1) }),
        bad_limit,
        missing_limit,
        bad_origin,
        unknown_field,
        json!("fast"),
    ];
    for requirements in &invalid {
        let body = enqueue_body(
            &unique("invalid"),
            &f.release,
            "staging",
            &input,
            requirements,
        );
        let reply = enqueue(f.key(), &body).await;
        assert_eq!(
            (reply.status, reply.json()["error"]["code"].clone()),
            (422, json!("INVALID_REQUIREMENTS")),
            "requirements {requirements}: {reply:?}"
        );
    }

    // Scopes: a member key without runs:write cannot enqueue; with it, it can.
    let reader = new_api_key(
        f.key(),
        &json!({ "name": "reader", "scopes": ["runs:read"] }),
    )
    .await;
    let reader = str_of(&reader, "apiKey").to_owned();
    let body = enqueue_body(&unique("reader"), &f.release, "staging", &input, &reqs);
    enqueue(&reader, &body).await.expect_error(403, "FORBIDDEN");
    assert_eq!(job(&reader, &job_id).await["id"], job_id.as_str());
    let writer = new_api_key(
        f.key(),
        &json!({ "name": "writer", "scopes": ["runs:read", "runs:write"] }),
    )
    .await;
    enqueue(str_of(&writer, "apiKey"), &body).await.expect(201);

    // Who asks is decided before what is asked (the key's lookup rides in the enqueue's read):
    // a key unknown, revoked or without runs:write is refused as such, whatever its body.
    let bad_body = json!({ "idempotencyKey": 5 });
    let reply = enqueue(f.key(), &bad_body).await;
    assert_eq!(reply.status, 422, "{reply:?}");
    enqueue(&reader, &bad_body)
        .await
        .expect_error(403, "FORBIDDEN");
    let unknown = format!("erk_{}", "0".repeat(64));
    for asked in [&body, &bad_body] {
        enqueue(&unknown, asked)
            .await
            .expect_error(401, "AUTHENTICATION_FAILED");
    }
    let revoked = new_api_key(
        f.key(),
        &json!({ "name": "revoked", "scopes": ["runs:read", "runs:write"] }),
    )
    .await;
    delete(
        &format!("/api/developer/api-keys/{}", str_of(&revoked, "id")),
        f.key(),
    )
    .await
    .expect(200);
    let fresh = enqueue_body(&unique("revoked"), &f.release, "staging", &input, &reqs);
    for asked in [&fresh, &bad_body] {
        enqueue(str_of(&revoked, "apiKey"), asked)
            .await
            .expect_error(401, "AUTHENTICATION_FAILED");
    }

    // A runner credential is not an API key.
    let runner = f.runner(1).await;
    let body = enqueue_body(&unique("runner"), &f.release, "staging", &input, &reqs);
    enqueue(&runner.token, &body)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

// ---------------------------------------------------------------------------------------------
// Claim negotiation
// ---------------------------------------------------------------------------------------------

/// A capability document that satisfies [`negotiation_requirements`] exactly (limits equal).
fn negotiation_capabilities() -> Value {
    json!({
        "executionKinds": ["prompt", "scorer"],
        "runtimes": [RUNTIME, "nodejs20"],
        "limits": limits(100, 1024, 200, 1000),
        "network": {
            "mode": "allowlist",
            "origins": ["https://api.example.com", "https://other.example.com"],
        },
        "streaming": true,
        "cancellation": true,
        "problemTypes": ["e2e/negotiation", "e2e/other"],
        "external": false,
    })
}

fn negotiation_requirements() -> Value {
    json!({
        "executionKind": "scorer",
        "runtime": RUNTIME,
        "limits": limits(100, 1024, 200, 1000),
        "network": { "mode": "allowlist", "origins": ["https://api.example.com"] },
        "streaming": true,
        "cancellation": true,
        "problemType": "e2e/negotiation",
        "external": false,
        "tags": ["gpu"],
    })
}

async fn negotiation_runner(org: &Org, capabilities: Value, tags: &[&str]) -> Runner {
    let runner = Runner::register(org, capabilities, 1).await;
    if !tags.is_empty() {
        let reply = patch_runner(
            &org.admin_key,
            &runner.id,
            &json!({ "tags": tags, "reason": "e2e routing" }),
        )
        .await;
        assert_eq!(reply.status, 200, "PATCH tags: {reply:?}");
    }
    runner
}

#[tokio::test]
async fn claim_negotiation_is_never_relaxed() {
    let org = org("jobs-negotiation").await;
    let key = org.admin_key.clone();
    let release = release(
        &key,
        "scorer",
        json!({ "scorer": "exact-match" }),
        &["staging"],
    )
    .await;
    let other_version = add_version(
        &key,
        "scorer",
        &release.artifact_id,
        json!({ "scorer": "exact-match", "revision": 2 }),
        &["staging"],
    )
    .await;
    let reqs = negotiation_requirements();
    let input = json!({ "expected": "a", "actual": "a" });
    let first = enqueue_job(&key, &release, &input, &reqs).await;
    let second = enqueue_job(&key, &release, &input, &reqs).await;
    let job_ids: BTreeSet<String> = [&first, &second]
        .iter()
        .map(|j| str_of(j, "id").to_owned())
        .collect();

    let edit = |path: &[&str], value: Value| {
        let mut caps = negotiation_capabilities();
        let mut slot = &mut caps;
        for part in path {
            slot = &mut slot[*part];
        }
        *slot = value;
        caps
    };
    let incompatible: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "lacks the kind",
            edit(&["executionKinds"], json!(["prompt", "tool"])),
            vec!["gpu"],
        ),
        (
            "other runtime",
            edit(&["runtimes"], json!(["python3.11"])),
            vec!["gpu"],
        ),
        (
            "lower cpu",
            edit(&["limits", "cpuSeconds"], json!(99)),
            vec!["gpu"],
        ),
        (
            "lower memory",
            edit(&["limits", "memoryMb"], json!(1023)),
            vec!["gpu"],
        ),
        (
            "lower wall",
            edit(&["limits", "wallSeconds"], json!(199)),
            vec!["gpu"],
        ),
        (
            "lower output",
            edit(&["limits", "outputBytes"], json!(999)),
            vec!["gpu"],
        ),
        (
            "deny_all",
            edit(&["network"], json!({ "mode": "deny_all" })),
            vec!["gpu"],
        ),
        (
            "allowlist without the origin",
            edit(
                &["network"],
                json!({ "mode": "allowlist", "origins": ["https://other.example.com"] }),
            ),
            vec!["gpu"],
        ),
        (
            "no streaming",
            edit(&["streaming"], json!(false)),
            vec!["gpu"],
        ),
        (
            "no cancellation",
            edit(&["cancellation"], json!(false)),
            vec!["gpu"],
        ),
        (
            "other problem type",
            edit(&["problemTypes"], json!(["e2e/other"])),
            vec!["gpu"],
        ),
        (
            "no problem type",
            edit(&["problemTypes"], json!([])),
            vec!["gpu"],
        ),
        ("external", edit(&["external"], json!(true)), vec!["gpu"]),
        (
            "no shared tag",
            negotiation_capabilities(),
            vec!["cpu", "arm"],
        ),
        ("default tag only", negotiation_capabilities(), vec![]),
    ];
    for (why, caps, tags) in incompatible {
        let runner = negotiation_runner(&org, caps, &tags).await;
        let reply = runner.claim().await;
        assert_eq!(reply.status, 204, "{why}: {reply:?}");
        let reply = runner
            .claim_with(&json!({ "servedTargets": [release.served_target()] }))
            .await;
        assert_eq!(reply.status, 204, "{why} (serving the version): {reply:?}");
    }

    // A draining runner, otherwise compatible: 503.
    let draining = negotiation_runner(&org, negotiation_capabilities(), &["gpu"]).await;
    set_status(&key, &draining.id, "draining", "e2e drain").await;
    draining
        .claim()
        .await
        .expect_error(503, "RUNNER_NOT_ACTIVE");

    // The compatible runner: not for a version it does not serve; yes for the one it does.
    let mut compatible =
        negotiation_runner(&org, negotiation_capabilities(), &["gpu", "x86"]).await;
    let wrong = json!({ "servedTargets": [other_version.served_target()] });
    let reply = compatible.claim_with(&wrong).await;
    assert_eq!(
        reply.status, 204,
        "served targets exclude the version: {reply:?}"
    );
    let mut stale_hash = release.served_target();
    stale_hash["contentHash"] = json!(other_version.content_hash);
    let reply = compatible
        .claim_with(&json!({ "servedTargets": [stale_hash] }))
        .await;
    assert_eq!(reply.status, 204, "right id, wrong content hash: {reply:?}");
    let targets = [other_version.served_target(), release.served_target()];
    let reply = compatible
        .claim_with(&json!({ "servedTargets": targets }))
        .await;
    let claimed = compatible
        .verify(&reply, &targets)
        .unwrap_or_else(|e| panic!("assignment refused ({e}): {reply:?}"));
    assert!(job_ids.contains(&claimed.job_id()), "{reply:?}");
    assert_eq!(
        claimed.verified.envelope().subject.version_id,
        release.version_id
    );
    assert_eq!(
        claimed.verified.envelope().requirements.as_map()["problemType"],
        "e2e/negotiation"
    );

    // At capacity (1) with a compatible job still queued: 503.
    compatible
        .claim()
        .await
        .expect_error(503, "RUNNER_AT_CAPACITY");
    // ... and the queued job was claimable all along: a second compatible runner takes it.
    let mut another = negotiation_runner(&org, negotiation_capabilities(), &["gpu"]).await;
    let taken = another.claim_job().await;
    assert_ne!(taken.job_id(), claimed.job_id());
    assert!(job_ids.contains(&taken.job_id()));
    let none = another.claim().await;
    assert_eq!(none.status, 503, "at capacity again: {none:?}");
    let reactivated = draining;
    set_status(&key, &reactivated.id, "active", "e2e undrain").await;
    let reply = reactivated.claim().await;
    assert_eq!(reply.status, 204, "nothing left: {reply:?}");
}

// ---------------------------------------------------------------------------------------------
// Stream custody
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn stream_refusals_each_have_their_code() {
    let f = StagedPrompt::new(org("jobs-stream").await).await;
    let mut runner = f.runner(1).await;
    let stranger = f.runner(1).await;
    f.enqueue(&json!({ "case": "stream" })).await;
    let claimed = claim_running(&mut runner).await;
    let identity = claimed.identity();
    let job_id = claimed.job_id();
    let mut head = ChainHead::empty();

    // Sequence 0 must not name a predecessor.
    let fake_previous = stable_json::hash(&json!("not a chunk"));
    let mut at_zero = ChainHead::restore(1, vec![fake_previous.clone()])
        .expect("a one-chunk head")
        .next_chunk(
            &identity,
            ChunkKind::Log,
            json!({ "n": 0 }),
            timestamp_now(),
        );
    at_zero.sequence = 0;
    at_zero.checksum = at_zero.expected_checksum();
    expect_chunk_error(
        &runner.stream(&at_zero.to_json()).await,
        &ChunkError::PreviousAtZero,
    );

    // Chunk 0 (control) and chunk 1.
    let mut accepted = Vec::new();
    for n in 0..2 {
        let chunk = head.next_chunk(
            &identity,
            ChunkKind::Log,
            json!({ "n": n }),
            timestamp_now(),
        );
        expect_chunk_accepted(&runner.stream(&chunk.to_json()).await, n, &chunk.checksum);
        head = ChainHead::restore(n + 1, accepted_checksums(&accepted, &chunk)).expect("head");
        accepted.push(chunk);
    }

    // A gap: sequence 3 while the stream expects 2.
    let ahead = ChainHead::restore(3, vec![fake_previous.clone()]).expect("head");
    let gap = ahead.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "n": 3 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&gap.to_json()).await,
        &ChunkError::Gap {
            expected: 2,
            received: 3,
        },
    );

    // Exact replay of a stored chunk: its checksum is already stored.
    expect_chunk_error(
        &runner.stream(&accepted[0].to_json()).await,
        &ChunkError::DuplicateChecksum,
    );
    expect_chunk_error(
        &runner.stream(&accepted[1].to_json()).await,
        &ChunkError::DuplicateChecksum,
    );

    // Reordered: a different chunk for a sequence already stored (0, then 1).
    let behind = ChainHead::empty().next_chunk(
        &identity,
        ChunkKind::Trajectory,
        json!({ "late": true }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&behind.to_json()).await,
        &ChunkError::DuplicateSequence {
            expected: 2,
            received: 0,
        },
    );
    let one_head = ChainHead::restore(1, vec![accepted[0].checksum.clone()]).expect("head");
    let rival = one_head.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "rival": 1 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&rival.to_json()).await,
        &ChunkError::DuplicateSequence {
            expected: 2,
            received: 1,
        },
    );

    // The right sequence naming the wrong predecessor.
    let wrong_previous = ChainHead::restore(2, vec![fake_previous.clone()]).expect("head");
    let mismatch = wrong_previous.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&mismatch.to_json()).await,
        &ChunkError::PreviousMismatch {
            expected: accepted[1].checksum.clone(),
        },
    );
    let also_wrong = ChainHead::restore(2, vec![accepted[0].checksum.clone()]).expect("head");
    let mismatch = also_wrong.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&mismatch.to_json()).await,
        &ChunkError::PreviousMismatch {
            expected: accepted[1].checksum.clone(),
        },
    );

    // A payload that is not what payloadHash says.
    let mut tampered = next_chunk(&head, &identity, json!({ "n": 2 }));
    tampered["payload"] = json!({ "n": 2, "injected": true });
    expect_chunk_error(
        &runner.stream(&tampered).await,
        &ChunkError::PayloadHashMismatch {
            computed: fake_previous.clone(),
        },
    );
    // A checksum that does not cover the fields.
    let mut forged = next_chunk(&head, &identity, json!({ "n": 2 }));
    forged["checksum"] = json!(fake_previous.as_str());
    expect_chunk_error(
        &runner.stream(&forged).await,
        &ChunkError::ChecksumMismatch {
            computed: fake_previous.clone(),
        },
    );
    // A kind that is neither log nor trajectory.
    let mut bad_kind = next_chunk(&head, &identity, json!({ "n": 2 }));
    bad_kind["kind"] = json!("metric");
    expect_chunk_error(
        &runner.stream(&bad_kind).await,
        &ChunkError::BadKind {
            kind: "metric".into(),
        },
    );

    // Changed claim identity: another claim id, another attempt (self-consistent chunks).
    let forged_claim = ChunkIdentity {
        claim_id: claim_id("clm_forged_e2e"),
        ..identity.clone()
    };
    let chunk = head.next_chunk(
        &forged_claim,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&chunk.to_json()).await,
        &ChunkError::IdentityChanged {
            field: IdentityField::ClaimId,
            expected: String::new(),
            received: String::new(),
        },
    );
    let next_attempt = ChunkIdentity {
        dispatch_attempt: DispatchAttempt::new(2).expect("attempt 2"),
        ..identity.clone()
    };
    let chunk = head.next_chunk(
        &next_attempt,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    expect_chunk_error(
        &runner.stream(&chunk.to_json()).await,
        &ChunkError::IdentityChanged {
            field: IdentityField::DispatchAttempt,
            expected: String::new(),
            received: String::new(),
        },
    );

    // A payload over 256 KiB of stable JSON.
    const MAX: usize = 256 * 1024;
    let envelope_bytes = stable_json::stable_json(&json!({ "blob": "" })).len();
    let too_large = json!({ "blob": "x".repeat(MAX - envelope_bytes + 1) });
    assert_eq!(stable_json::stable_json(&too_large).len(), MAX + 1);
    expect_chunk_error(
        &runner
            .stream(&next_chunk(&head, &identity, too_large))
            .await,
        &ChunkError::PayloadTooLarge {
            bytes: MAX + 1,
            max_bytes: MAX,
        },
    );

    // A runner that does not hold the job: not found.
    let chunk = head.next_chunk(
        &identity,
        ChunkKind::Log,
        json!({ "n": 2 }),
        timestamp_now(),
    );
    stranger
        .stream(&chunk.to_json())
        .await
        .expect_error(404, "NOT_FOUND");

    // Nothing refused was stored; the chain still extends (exactly 256 KiB is allowed).
    let stored = job(f.key(), &job_id).await;
    let checksums: Vec<&str> = array_of(&stored, "stream")
        .iter()
        .map(|row| str_of(row, "checksum"))
        .collect();
    assert_eq!(
        checksums,
        accepted
            .iter()
            .map(|c| c.checksum.as_str())
            .collect::<Vec<_>>(),
        "refused chunks were stored: {stored}"
    );
    let at_limit = json!({ "blob": "y".repeat(MAX - envelope_bytes) });
    assert_eq!(stable_json::stable_json(&at_limit).len(), MAX);
    let chunk = head.next_chunk(&identity, ChunkKind::Log, at_limit, timestamp_now());
    expect_chunk_accepted(&runner.stream(&chunk.to_json()).await, 2, &chunk.checksum);
    accepted.push(chunk);

    // The stream closes with the last stored checksum.
    let evidence = bare_evidence(f.key()).await;
    let completion = claimed.succeeded(Some(&accepted[2].checksum), evidence);
    let decision = runner.complete(&completion).await.expect(200);
    assert_eq!(decision["decision"], "accepted", "{decision}");
    let done = job(f.key(), &job_id).await;
    assert_eq!(array_of(&done, "stream").len(), 3, "{done}");
}

/// The checksums a head after `chunk` remembers, oldest first.
fn accepted_checksums(
    accepted: &[edgerunner_protocol::chunk::StreamChunk],
    chunk: &edgerunner_protocol::chunk::StreamChunk,
) -> Vec<Sha256Hex> {
    accepted
        .iter()
        .chain(std::iter::once(chunk))
        .map(|c| c.checksum.clone())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Completion refusals and evidence custody
// ---------------------------------------------------------------------------------------------

/// The job still runs, with no completion stored and no evidence attached.
async fn assert_untouched(key: &str, job_id: &str, why: &str) {
    let stored = job(key, job_id).await;
    assert_eq!(stored["state"], "running", "{why}: {stored}");
    assert!(
        array_of(&stored, "completions").is_empty(),
        "{why}: a refused completion was stored: {stored}"
    );
    assert!(
        array_of(&stored, "evidence").is_empty(),
        "{why}: evidence attached: {stored}"
    );
}

/// Refusals checked against API.md. A request that was not refused at all fails the test at
/// once (what follows would be meaningless); a refusal with another status or code is recorded,
/// and every such mismatch is reported together at the end.
#[derive(Default)]
struct Refusals(Vec<String>);

impl Refusals {
    fn check(&mut self, why: &str, reply: &Reply, status: u16, code: Option<&str>) {
        assert!(
            reply.status >= 400,
            "{why}: not refused (API.md: {status} {code:?}): {reply:?}"
        );
        let body = reply.json();
        let got = body["error"]["code"].as_str();
        assert!(got.is_some(), "{why}: not an error body: {reply:?}");
        if reply.status != status || code.is_some_and(|code| got != Some(code)) {
            self.0.push(format!(
                "{why}: API.md says {status} {}, the server answered {reply:?}",
                code.unwrap_or("(any code)")
            ));
        }
    }

    fn assert_none(self) {
        assert!(
            self.0.is_empty(),
            "refusals that differ from API.md:\n  {}",
            self.0.join("\n  ")
        );
    }
}

#[tokio::test]
async fn completion_refusals_store_nothing() {
    let f = StagedPrompt::new(org("jobs-complete").await).await;
    let key = f.key().to_owned();
    let mut first_runner = f.runner(1).await;
    let mut second_runner = f.runner(1).await;
    let mut refusals = Refusals::default();

    f.enqueue(&json!({ "case": 1 })).await;
    let first = claim_running(&mut first_runner).await;
    let first_job = first.job_id();
    let mut writer = first.writer();
    let c0 = writer.next(ChunkKind::Log, json!({ "n": 0 }), timestamp_now());
    let c1 = writer.next(ChunkKind::Trajectory, json!({ "n": 1 }), timestamp_now());
    for (n, chunk) in [&c0, &c1].into_iter().enumerate() {
        expect_chunk_accepted(
            &first_runner.stream(&chunk.to_json()).await,
            n as u64,
            &chunk.checksum,
        );
    }
    let evidence = full_evidence(&key).await;

    // The final stream checksum must be the last stored one.
    for (why, final_checksum) in [
        (
            "final checksum of an earlier chunk",
            Some(c0.checksum.clone()),
        ),
        ("final checksum null after two chunks", None),
        (
            "final checksum of no chunk",
            Some(stable_json::hash(&json!("x"))),
        ),
    ] {
        let completion = Completion::seal(first.fields(
            CompletionStatus::Succeeded,
            Some(stable_json::hash(&json!("result"))),
            final_checksum,
            evidence.clone(),
        ));
        let reply = first_runner.complete(&completion.to_json()).await;
        refusals.check(
            why,
            &reply,
            409,
            Some("COMPLETION_STREAM_CHECKSUM_MISMATCH"),
        );
        assert_untouched(&key, &first_job, why).await;
    }

    // The input hash must be the job's.
    let mut fields = first.fields(
        CompletionStatus::Succeeded,
        Some(stable_json::hash(&json!("result"))),
        Some(c1.checksum.clone()),
        evidence.clone(),
    );
    fields.input_hash = stable_json::hash(&json!({ "case": 2 }));
    let reply = first_runner
        .complete(&Completion::seal(fields).to_json())
        .await;
    refusals.check(
        "wrong input hash",
        &reply,
        409,
        Some("COMPLETION_INPUT_HASH_MISMATCH"),
    );
    assert_untouched(&key, &first_job, "wrong input hash").await;

    // The checksum must cover the fields.
    let mut unsealed = first.succeeded(Some(&c1.checksum), evidence.clone());
    unsealed["completionChecksum"] = json!(stable_json::hash(&json!("forged")).as_str());
    let reply = first_runner.complete(&unsealed).await;
    refusals.check("completion checksum mismatch", &reply, 422, None);
    assert_untouched(&key, &first_job, "bad checksum").await;

    // Evidence must exist and be in the named run: a row of another run, a row that does not
    // exist, a run that does not exist, another organization's run.
    let other_run = evaluation_run(&key).await;
    let stray = test_result(&key, &other_run).await;
    let mut wrong_run = evidence.clone();
    wrong_run.test_result_ids.push(stray);
    let mut missing_row = evidence.clone();
    missing_row.model_call_ids = vec![EvidenceId::Text("mc_does_not_exist".into())];
    let mut missing_run = bare_evidence(&key).await;
    missing_run.evaluation_run_id = EvidenceId::Text("run_does_not_exist".into());
    let foreign = org("jobs-complete-foreign").await;
    let foreign_run = bare_evidence(&foreign.admin_key).await;
    for (why, evidence) in [
        ("a test result of another run", wrong_run),
        ("a model call that does not exist", missing_row),
        ("an evaluation run that does not exist", missing_run),
        ("another organization's evaluation run", foreign_run),
    ] {
        let completion = first.succeeded(Some(&c1.checksum), evidence);
        let reply = first_runner.complete(&completion).await;
        refusals.check(why, &reply, 422, Some("EVIDENCE_NOT_IN_RUN"));
        assert_untouched(&key, &first_job, why).await;
    }

    // Control: the same completion, every defect removed, is accepted.
    let completion = first.succeeded(Some(&c1.checksum), evidence.clone());
    let decision = first_runner.complete(&completion).await.expect(200);
    assert_eq!(decision["decision"], "accepted", "{decision}");
    let completion_id = str_of(&decision, "completionId").to_owned();
    let done = job(&key, &first_job).await;
    assert_eq!(attached_evidence(&done, &completion_id), rows(&evidence));

    // A second job may not take custody of the first job's evidence.
    f.enqueue(&json!({ "case": 2 })).await;
    let second = claim_running(&mut second_runner).await;
    let second_job = second.job_id();
    assert_ne!(second_job, first_job);
    let reply = second_runner
        .complete(&second.succeeded(None, evidence.clone()))
        .await;
    refusals.check(
        "evidence attached to another job's accepted completion",
        &reply,
        409,
        Some("EVIDENCE_ALREADY_ATTACHED"),
    );
    // It says which row is taken, and by which job (the run itself, here).
    assert!(
        reply.text.contains(&first_job) && reply.text.contains("in the custody of"),
        "the refusal names the job holding the run: {reply:?}"
    );
    assert_untouched(&key, &second_job, "evidence already attached").await;
    let first_after = job(&key, &first_job).await;
    assert_eq!(
        attached_evidence(&first_after, &completion_id),
        rows(&evidence),
        "custody moved: {first_after}"
    );
    let record = runner_record(&key, &second_runner.id).await;
    assert_eq!(record["activeClaims"], 1, "{record}");

    // Control: with its own evidence the second job completes.
    let own = full_evidence(&key).await;
    let decision = second_runner
        .complete(&second.succeeded(None, own.clone()))
        .await
        .expect(200);
    assert_eq!(decision["decision"], "accepted", "{decision}");
    let done = job(&key, &second_job).await;
    assert_eq!(done["state"], "succeeded");
    assert_eq!(
        attached_evidence(&done, str_of(&decision, "completionId")),
        rows(&own)
    );

    refusals.assert_none();
}

// ---------------------------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn cancellation_queued_at_once_running_through_the_runner() {
    let f = StagedPrompt::new(org("jobs-cancel").await).await;
    let key = f.key().to_owned();
    let mut runner = f.runner(1).await;

    // A queued job cancels at once and is never dispatched.
    let queued = f.enqueue(&json!({ "case": "queued" })).await;
    let queued_id = str_of(&queued, "id").to_owned();
    // What the job offers is what its object then does: a cancel, until one moves it.
    assert_eq!(queued["terminal"], false, "{queued}");
    assert_eq!(queued["actions"], json!(["cancel"]), "{queued}");
    post(
        &format!("/api/remote-runners/jobs/{queued_id}/cancel"),
        Some(&key),
        &json!({}),
    )
    .await
    .expect_error(422, "REASON_REQUIRED");
    let reader = new_api_key(&key, &json!({ "name": "reader", "scopes": ["runs:read"] })).await;
    cancel_job(str_of(&reader, "apiKey"), &queued_id, "not allowed")
        .await
        .expect_error(403, "FORBIDDEN");
    let cancelled = cancel_job(&key, &queued_id, "superseded by a newer release")
        .await
        .expect(200);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["cancelReason"], "superseded by a newer release");
    assert!(cancelled["finishedAt"].is_string(), "{cancelled}");
    assert_eq!(cancelled["terminal"], true, "{cancelled}");
    // Nothing moves a finished job; an admin may hold it past its retention.
    assert_eq!(cancelled["actions"], json!(["hold"]), "{cancelled}");
    let reply = runner.claim().await;
    assert_eq!(
        reply.status, 204,
        "a cancelled job was dispatched: {reply:?}"
    );
    cancel_job(&key, &queued_id, "again")
        .await
        .expect_error(409, "JOB_FINISHED");

    // A running job: cancel_requested, seen on the next heartbeat.
    f.enqueue(&json!({ "case": "running" })).await;
    let claimed = claim_running(&mut runner).await;
    let job_id = claimed.job_id();
    let reason = "operator stopped the rollout ✋";
    let requested = cancel_job(&key, &job_id, reason).await.expect(200);
    assert_eq!(requested["state"], "cancel_requested", "{requested}");
    assert_eq!(requested["cancelReason"], reason);
    assert_eq!(requested["activeClaimId"], claimed.claim_id().as_str());
    // Cancelling already: a second cancel changes nothing, so none is offered.
    assert_eq!(requested["terminal"], false, "{requested}");
    assert_eq!(requested["actions"], json!([]), "{requested}");
    let again = cancel_job(&key, &job_id, "a second reason")
        .await
        .expect(200);
    assert_eq!(again["state"], "cancel_requested", "{again}");
    assert_eq!(again["cancelReason"], reason, "unchanged: {again}");

    let beat = runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["cancelRequested"], true, "{beat}");
    assert_eq!(beat["cancelReason"], reason, "{beat}");
    assert_eq!(beat["state"], "cancel_requested", "{beat}");

    // The runner stops at a safe boundary and reports `cancelled`.
    let completion = Completion::seal(claimed.fields(
        CompletionStatus::Cancelled,
        None,
        None,
        bare_evidence(&key).await,
    ))
    .to_json();
    let reply = runner.complete(&completion).await;
    let decision = reply.expect(200);
    assert_eq!(decision["decision"], "accepted", "{reply:?}");
    assert_eq!(decision["jobState"], "cancelled", "{reply:?}");
    let done = job(&key, &job_id).await;
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(done["cancelReason"], reason);
    assert!(done["finishedAt"].is_string(), "{done}");
    assert_eq!(done["activeClaimId"], Value::Null);
    assert_eq!(done["terminal"], true, "{done}");
    assert_eq!(done["actions"], json!(["hold"]), "{done}");
    assert_eq!(array_of(&done, "completions")[0]["status"], "cancelled");
    assert_events_ordered(&done);
    let record = runner_record(&key, &runner.id).await;
    assert_eq!(record["activeClaims"], 0, "{record}");

    cancel_job(&key, &job_id, "too late")
        .await
        .expect_error(409, "JOB_FINISHED");
}

// ---------------------------------------------------------------------------------------------
// Heartbeats
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn heartbeat_lease_bounds_and_ownership() {
    let f = StagedPrompt::new(org("jobs-heartbeat").await).await;
    let mut runner = f.runner(1).await;
    let other = f.runner(1).await;
    f.enqueue(&json!({ "case": "heartbeat" })).await;
    let claimed = runner.claim_job().await;
    let claim_id = claimed.claim_id();

    for extend in [5, 500, 14, 121, 0, -60] {
        runner
            .heartbeat(&claim_id, extend)
            .await
            .expect_error(422, "INVALID_LEASE");
    }
    assert_eq!(
        job(f.key(), &claimed.job_id()).await["state"],
        "claimed",
        "a refused heartbeat started the job"
    );

    for extend in [15, 120] {
        let before = now_ms();
        let beat = runner.heartbeat(&claim_id, extend).await.expect(200);
        let lease = parse_time(str_of(&beat, "leaseExpiresAt"));
        let want = extend * 1000;
        assert!(
            (before + want - SKEW_MS..=now_ms() + want + SKEW_MS).contains(&lease),
            "extendSeconds {extend}: {beat}"
        );
        assert_eq!(beat["state"], "running");
        let stored = job(f.key(), &claimed.job_id()).await;
        assert_eq!(
            parse_time(str_of(&stored, "leaseExpiresAt")),
            lease,
            "{stored}"
        );
    }

    other
        .heartbeat(&claim_id, 60)
        .await
        .expect_error(404, "NOT_FOUND");
    // Not a claim id the server issues: refused at the edge, no job's object is asked.
    runner
        .heartbeat("clm_does_not_exist", 60)
        .await
        .expect_error(422, "CLAIM_ID_MALFORMED");
    post(
        "/api/remote-runners/heartbeat",
        Some(f.key()),
        &json!({ "claimId": claim_id, "extendSeconds": 60 }),
    )
    .await
    .expect_error(401, "AUTHENTICATION_FAILED");

    // A released claim takes no heartbeat.
    let decision = runner
        .complete(&claimed.succeeded(None, bare_evidence(f.key()).await))
        .await
        .expect(200);
    assert_eq!(decision["decision"], "accepted");
    runner
        .heartbeat(&claim_id, 60)
        .await
        .expect_error(409, "CLAIM_NOT_ACTIVE");
}

// ---------------------------------------------------------------------------------------------
// The claim race
// ---------------------------------------------------------------------------------------------

const RACE_RUNNERS: usize = 16;
const RACE_CAPACITY: u32 = 2;
const RACE_JOBS: usize = 50;
const RACE_ROUNDS: usize = 10;

/// What one runner got in one round of claiming.
struct RoundResult {
    runner: Runner,
    claims: Vec<Claimed>,
    /// Ended on `503 RUNNER_AT_CAPACITY` (rather than `204`).
    at_capacity: bool,
}

/// Claims until `204` or `503`; never completes in between, so capacity is what stops it.
async fn claim_round(mut runner: Runner) -> RoundResult {
    let mut claims = Vec::new();
    let mut at_capacity = false;
    for _ in 0..(RACE_CAPACITY as usize + 2) {
        let reply = runner.claim().await;
        match reply.status {
            200 => {
                let claimed = runner
                    .verify(&reply, &[])
                    .unwrap_or_else(|e| panic!("assignment refused ({e}): {reply:?}"));
                claims.push(claimed);
                assert!(
                    claims.len() <= RACE_CAPACITY as usize,
                    "runner {} holds {} claims, capacity {RACE_CAPACITY}",
                    runner.id,
                    claims.len()
                );
            }
            204 => break,
            503 => {
                reply.expect_error(503, "RUNNER_AT_CAPACITY");
                assert_eq!(
                    claims.len(),
                    RACE_CAPACITY as usize,
                    "503 below capacity: {reply:?}"
                );
                at_capacity = true;
                break;
            }
            _ => panic!("unexpected claim answer: {reply:?}"),
        }
    }
    RoundResult {
        runner,
        claims,
        at_capacity,
    }
}

/// Completes every claim of a round concurrently, each naming one of `runs` (made beforehand,
/// one per job).
async fn complete_all(results: Vec<RoundResult>, runs: &mut Vec<Evidence>) -> Vec<Runner> {
    let mut runners = Vec::new();
    let mut completions = Vec::new();
    for result in results {
        for claimed in result.claims {
            let evidence = runs.pop().expect("one evaluation run per job");
            let token = result.runner.token.clone();
            completions.push(tokio::spawn(async move {
                let completion = claimed.succeeded(None, evidence);
                let reply = post("/api/remote-runners/complete", Some(&token), &completion).await;
                let decision = reply.expect(200);
                assert_eq!(decision["decision"], "accepted", "{reply:?}");
            }));
        }
        runners.push(result.runner);
    }
    for task in completions {
        task.await.expect("a completion");
    }
    runners
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn claim_race_dispatches_each_job_once_within_capacity() {
    let f = StagedPrompt::new(org("jobs-race").await).await;
    let key = f.key().to_owned();
    let _exclusive = OPERATOR_WRITES.write().await;

    let mut tasks = Vec::new();
    for _ in 0..RACE_RUNNERS {
        let org = f.org.clone();
        tasks.push(tokio::spawn(async move {
            Runner::simple(&org, &["prompt"], RACE_CAPACITY).await
        }));
    }
    let mut runners = Vec::new();
    for task in tasks {
        runners.push(task.await.expect("register a runner"));
    }

    let mut tasks = Vec::new();
    for n in 0..RACE_JOBS {
        let key = key.clone();
        let release = f.release.clone();
        tasks.push(tokio::spawn(async move {
            let input = json!({ "race": n });
            let job = enqueue_job(&key, &release, &input, &requirements("prompt")).await;
            str_of(&job, "id").to_owned()
        }));
    }
    let mut enqueued = BTreeSet::new();
    for task in tasks {
        enqueued.insert(task.await.expect("enqueue"));
    }
    assert_eq!(enqueued.len(), RACE_JOBS);
    let mut runs = Vec::new();
    for _ in 0..RACE_JOBS {
        runs.push(bare_evidence(&key).await);
    }

    let mut claimed_jobs: Vec<String> = Vec::new();
    let mut claims_by_runner: BTreeMap<String, usize> = BTreeMap::new();
    // `204` answered to a runner with room while compatible work was still queued.
    let mut starved: Vec<String> = Vec::new();
    let mut rounds = 0;
    while claimed_jobs.len() < RACE_JOBS {
        assert!(
            rounds < RACE_ROUNDS,
            "{} of {RACE_JOBS} jobs claimed after {RACE_ROUNDS} rounds",
            claimed_jobs.len()
        );
        rounds += 1;
        let queued_before = RACE_JOBS - claimed_jobs.len();
        let tasks: Vec<_> = runners
            .drain(..)
            .map(|runner| tokio::spawn(claim_round(runner)))
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("a claim round"));
        }
        let granted: usize = results.iter().map(|r| r.claims.len()).sum();
        assert!(
            granted > 0,
            "round {rounds}: nothing claimed, {queued_before} queued"
        );
        let room = RACE_RUNNERS * RACE_CAPACITY as usize;
        for result in &results {
            // The server's count is what this runner holds, never above capacity.
            let record = runner_record(&key, &result.runner.id).await;
            assert_eq!(
                record["activeClaims"].as_u64(),
                Some(result.claims.len() as u64),
                "round {rounds}: {record}"
            );
            // With at least as much work as room, every runner fills up before it is refused.
            if queued_before >= room && !result.at_capacity {
                starved.push(format!(
                    "round {rounds}: runner {} got 204 after {} claims with {queued_before} jobs \
                     queued at the start of the round ({granted} granted in all)",
                    result.runner.id,
                    result.claims.len()
                ));
            }
            *claims_by_runner
                .entry(result.runner.id.clone())
                .or_default() += result.claims.len();
            claimed_jobs.extend(result.claims.iter().map(Claimed::job_id));
        }
        runners = complete_all(results, &mut runs).await;
    }

    // Every job claimed exactly once.
    let distinct: BTreeSet<String> = claimed_jobs.iter().cloned().collect();
    assert_eq!(
        claimed_jobs.len(),
        distinct.len(),
        "a job was claimed twice: {claimed_jobs:?}"
    );
    assert_eq!(distinct, enqueued, "not every job was claimed");

    for job_id in &enqueued {
        let stored = job(&key, job_id).await;
        assert_eq!(stored["state"], "succeeded", "{stored}");
        assert_eq!(array_of(&stored, "claims").len(), 1, "{stored}");
        assert_eq!(array_of(&stored, "completions").len(), 1, "{stored}");
    }
    let mut completed = 0;
    for runner in &runners {
        let record = runner_record(&key, &runner.id).await;
        assert_eq!(record["activeClaims"], 0, "{record}");
        let done = record["completedJobs"].as_u64().expect("completedJobs") as usize;
        assert_eq!(done, claims_by_runner[&runner.id], "{record}");
        completed += done;
    }
    assert_eq!(completed, RACE_JOBS);
    assert!(
        starved.is_empty(),
        "claim answered 204 while compatible jobs were queued (API.md: 204 only when no \
         compatible queued job):\n  {}",
        starved.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Matching reads the queue index a page at a time
// ---------------------------------------------------------------------------------------------

/// Forty queued jobs this runner cannot take (each asks for more memory than its ceiling) sit
/// ahead of the one it can: paging through the index range still finds it, and none of the
/// incompatible jobs is claimed on the way.
#[tokio::test]
async fn compatible_job_behind_many_incompatible_ones_is_found() {
    let f = StagedPrompt::new(org("jobs-head-of-line").await).await;
    let mut small = Runner::register(
        &f.org,
        json!({
            "executionKinds": ["prompt"],
            "runtimes": [RUNTIME],
            "limits": { "cpuSeconds": 60, "memoryMb": 1024, "wallSeconds": 120, "outputBytes": 1_048_576 },
        }),
        1,
    )
    .await;
    let mut too_big = requirements("prompt");
    too_big["limits"]["memoryMb"] = json!(4096);
    for i in 0..40 {
        enqueue_job(f.key(), &f.release, &json!({ "big": i }), &too_big).await;
    }
    let fitting = f.enqueue(&json!({ "fits": true })).await;

    let claimed = small.claim_job().await;
    assert_eq!(
        claimed.assignment["claim"]["jobId"], fitting["id"],
        "{:?}",
        claimed.assignment
    );
    // The forty are still queued for a runner that can take them.
    let listed = get("/api/remote-runners/jobs?limit=100", f.key())
        .await
        .expect(200);
    let queued = array_of(&listed, "jobs")
        .iter()
        .filter(|j| j["state"] == "queued")
        .count();
    assert_eq!(queued, 40, "{listed}");
}

// ---------------------------------------------------------------------------------------------
// An expired lease refuses appends and heartbeats (before recovery has acted)
// ---------------------------------------------------------------------------------------------

/// Between a lease's expiry and its recovery the claim still exists, but it no longer covers
/// work: a chunk is refused with STREAM_LEASE_EXPIRED and a heartbeat with LEASE_EXPIRED, and
/// neither stores anything. (The lease is moved into the past in D1; the job's alarm stays a
/// minute away and nothing in this test binary fires cron, so recovery cannot intervene.)
#[tokio::test]
async fn an_expired_lease_refuses_appends_and_heartbeats() {
    let f = StagedPrompt::new(org("jobs-lease-expired").await).await;
    let job = f.enqueue(&json!({ "lease": "expires" })).await;
    let mut runner = f.runner(1).await;
    let claimed = claim_running(&mut runner).await;
    let identity = claimed.identity();
    let chunk = next_chunk(
        &ChainHead::empty(),
        &identity,
        json!({ "before": "expiry" }),
    );
    expect_chunk_accepted(
        &runner.stream(&chunk).await,
        0,
        &Sha256Hex::parse(str_of(&chunk, "checksum")).unwrap(),
    );

    edgerunner_e2e::recovery::set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() - 1_000);
    let first = Sha256Hex::parse(str_of(&chunk, "checksum")).unwrap();
    let head = ChainHead::restore(1, vec![first]).expect("a one-chunk head");
    let late = next_chunk(&head, &identity, json!({ "after": "expiry" }));
    expect_chunk_error(&runner.stream(&late).await, &ChunkError::LeaseExpired);
    runner
        .heartbeat(&claimed.claim_id(), 60)
        .await
        .expect_error(409, "LEASE_EXPIRED");

    let shown = get_job(f.key(), str_of(&job, "id")).await.expect(200);
    assert_eq!(
        array_of(&shown, "stream").len(),
        1,
        "the late chunk was stored: {shown}"
    );
    assert_eq!(shown["state"], "running", "{shown}");
}

// ---------------------------------------------------------------------------------------------
// Evidence made by the runner holding the job
// ---------------------------------------------------------------------------------------------

/// A runner can make the evaluation run (and its test results) for the job it holds, and
/// complete with them, without an API key; nobody else can add to that run.
#[tokio::test]
async fn the_holder_of_a_job_makes_its_evidence_and_completes_with_it() {
    let f = StagedPrompt::new(org("jobs-runner-evidence").await).await;
    let job = f.enqueue(&json!({ "evidence": "by the runner" })).await;
    let other_job = f.enqueue(&json!({ "evidence": "elsewhere" })).await;
    let mut holder = f.runner(2).await;
    let mut bystander = f.runner(1).await;
    let claimed = claim_running(&mut holder).await;
    let job_id = claimed.job_id();
    assert_eq!(job_id, str_of(&job, "id"));
    let other = bystander.claim_job().await;
    assert_eq!(other.job_id(), str_of(&other_job, "id"));

    let runs = format!("/api/remote-runners/jobs/{job_id}/evidence/runs");
    // Only the holder: another runner, and an API key, are refused.
    post(&runs, Some(&bystander.token), &json!({}))
        .await
        .expect_error(404, "NOT_FOUND");
    post(&runs, Some(f.key()), &json!({}))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    let run = post(
        &runs,
        Some(&holder.token),
        &json!({ "name": "by the runner" }),
    )
    .await
    .expect(201);
    let run_id = str_of(&run, "id").to_owned();
    let results = format!("{runs}/{run_id}/test-results");
    let result = post(
        &results,
        Some(&holder.token),
        &json!({ "name": "exit 0", "status": "passed" }),
    )
    .await
    .expect(201);
    // The bystander cannot add to it through the job it holds either.
    let sideways = format!(
        "/api/remote-runners/jobs/{}/evidence/runs/{run_id}/test-results",
        other.job_id()
    );
    post(
        &sideways,
        Some(&bystander.token),
        &json!({ "name": "x", "status": "passed" }),
    )
    .await
    .expect_error(404, "NOT_FOUND");

    let evidence = Evidence {
        evaluation_run_id: EvidenceId::Text(run_id.clone()),
        test_result_ids: vec![EvidenceId::Text(str_of(&result, "id").to_owned())],
        cost_record_ids: Vec::new(),
        model_call_ids: Vec::new(),
        trace_id: None,
        extra: serde_json::Map::new(),
    };
    let fields = claimed.fields(
        CompletionStatus::Succeeded,
        Some(stable_json::hash(&json!("done"))),
        None,
        evidence,
    );
    let answer = holder
        .complete(&Completion::seal(fields).to_json())
        .await
        .expect(200);
    assert_eq!(answer["decision"], "accepted", "{answer}");
    let shown = get_job(f.key(), &job_id).await.expect(200);
    assert_eq!(array_of(&shown, "evidence").len(), 2, "{shown}");
}
