//! Per-job storage limits and closed leases, end to end, against docs/API.md ("Limits",
//! "Per-job storage limits") and migrations/0004_job_bounds.sql: a stream's chunk and byte
//! limits per attempt, the evidence-id limit of a completion, refused completion decisions
//! stored up to a cap and counted after it, a completion after its lease's expiry refused before
//! recovery runs, evidence added to a run in custody refused, and the custody bundle of a job at
//! its stream limit streamed and still verifiable.
//!
//! Long streams are laid down in D1 directly where only their length matters (a recursive
//! `INSERT` of chained rows with made-up checksums, every running byte total exact), and the
//! chunk at the limit is then sent over HTTP like any other; the bundle test streams its 64 MiB
//! for real, since `edgerunner verify` re-checks every hash. The tests of this binary take turns
//! ([`TURN`]): a harness write locks local D1's one SQLite file while it runs ([`d1`]; a harness
//! artifact), and two 64 MiB streams at once would only measure the machine. No sleep stands in
//! for synchronization: a lease is moved into the past through D1, where its alarm (a minute
//! away) cannot act.

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::recovery::set_lease;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::{
    ChainHead, ChunkError, ChunkKind, MAX_CHUNKS_PER_ATTEMPT, MAX_STREAM_BYTES_PER_ATTEMPT,
};
use edgerunner_protocol::completion::{Completion, Evidence, EvidenceId, MAX_EVIDENCE_IDS};
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Value};
use tokio::sync::{Mutex, MutexGuard};

/// Refused decisions a job stores in full (API.md "Per-job storage limits").
const STORED_REFUSALS: usize = 20;
/// Largest chunk payload, as stable JSON bytes.
const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

static TURN: Mutex<()> = Mutex::const_new(());

async fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().await
}

/// The made-up checksum of laid-down chunk `sequence` (distinct, 64 lowercase hex).
fn laid_checksum(sequence: u64) -> Sha256Hex {
    Sha256Hex::parse(&format!("{:064x}", sequence + 1)).expect("64 hex digits")
}

/// Lays down chunks `0..count` of the claim's stream in D1, each with a JSON string payload
/// of `payload_bytes` bytes, chained by made-up checksums; returns the head to send after them.
fn lay_down_stream(
    claimed: &Claimed,
    organization_id: &str,
    count: u64,
    payload_bytes: usize,
) -> ChainHead {
    assert!(payload_bytes >= 2 && payload_bytes.is_multiple_of(2));
    let sql = format!(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last}) \
         INSERT INTO stream_chunks (job_id, organization_id, claim_id, dispatch_attempt, sequence, kind, \
           previous_checksum, payload, payload_hash, checksum, emitted_at, received_at, stream_bytes) \
         SELECT {job}, {org}, {claim}, {attempt}, i, 'log', \
           CASE WHEN i = 0 THEN NULL ELSE printf('%064x', i) END, \
           '\"' || substr(hex(zeroblob({half})), 1, {inner}) || '\"', printf('%064x', 0), printf('%064x', i + 1), \
           '2026-11-30T00:00:00Z', {now}, (i + 1) * {payload_bytes} FROM n; \
         SELECT count(*) AS n FROM stream_chunks WHERE job_id = {job}",
        last = count - 1,
        job = sql_text(&claimed.job_id()),
        org = sql_text(organization_id),
        claim = sql_text(&claimed.claim_id()),
        attempt = claimed.attempt().get(),
        half = payload_bytes / 2,
        inner = payload_bytes - 2,
        now = now_ms(),
    );
    let answer = d1(&sql);
    // wrangler answers for the last statement: the count.
    let stored = answer
        .as_array()
        .and_then(|statements| statements.last())
        .map(|last| last["results"][0]["n"].clone());
    assert_eq!(stored.and_then(|n| n.as_u64()), Some(count), "{answer}");
    let first = count.saturating_sub(32);
    ChainHead::restore(count, (first..count).map(laid_checksum).collect()).expect("a head")
}

/// A chunk extending `head` whose payload is a JSON string of exactly `bytes` bytes.
fn chunk_of_bytes(head: &ChainHead, claimed: &Claimed, bytes: usize) -> Value {
    let payload = Value::String("a".repeat(bytes - 2));
    assert_eq!(stable_json::stable_json(&payload).len(), bytes);
    head.next_chunk(
        &claimed.identity(),
        ChunkKind::Log,
        payload,
        timestamp_now(),
    )
    .to_json()
}

fn checksum_of(chunk: &Value) -> Sha256Hex {
    Sha256Hex::parse(chunk["checksum"].as_str().expect("checksum")).expect("hex")
}

fn advanced(head: &ChainHead, chunk: &Value) -> ChainHead {
    let mut recent: Vec<Sha256Hex> = head.recent_checksums().cloned().collect();
    recent.push(checksum_of(chunk));
    ChainHead::restore(head.next_sequence() + 1, recent).expect("a head")
}

/// The job's stream totals of attempt 1 from the job detail: `(chunks, payloadBytes)`.
async fn totals(key: &str, job_id: &str) -> (u64, u64) {
    let shown = get_job(key, job_id).await.expect(200);
    let first = &shown["streamTotals"][0];
    (
        first["chunks"].as_u64().unwrap_or(0),
        first["payloadBytes"].as_u64().unwrap_or(0),
    )
}

#[tokio::test]
async fn a_chunk_past_the_per_attempt_chunk_limit_is_refused() {
    let _turn = turn().await;
    let f = StagedPrompt::new(bootstrap_org("bounds-chunks")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let head = lay_down_stream(&claimed, &f.org.id, MAX_CHUNKS_PER_ATTEMPT - 1, 2);

    // The last chunk the attempt may hold is taken; the one after it is refused.
    let last = chunk_of_bytes(&head, &claimed, 16);
    let answer = runner.stream(&last).await.expect(200);
    assert_eq!(
        answer["sequence"].as_u64(),
        Some(MAX_CHUNKS_PER_ATTEMPT - 1)
    );
    let head = advanced(&head, &last);
    let past = chunk_of_bytes(&head, &claimed, 16);
    let expected = ChunkError::ChunkLimit {
        max_chunks: MAX_CHUNKS_PER_ATTEMPT,
    };
    runner
        .stream(&past)
        .await
        .expect_error(expected.http_status(), expected.code());
    assert_eq!(expected.code(), "STREAM_CHUNK_LIMIT");
    assert_eq!(
        totals(f.key(), &claimed.job_id()).await.0,
        MAX_CHUNKS_PER_ATTEMPT,
        "the refused chunk was stored"
    );
}

#[tokio::test]
async fn a_chunk_past_the_per_attempt_byte_limit_is_refused() {
    let _turn = turn().await;
    let f = StagedPrompt::new(bootstrap_org("bounds-bytes")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let full_chunks = MAX_STREAM_BYTES_PER_ATTEMPT / MAX_PAYLOAD_BYTES as u64;
    let head = lay_down_stream(&claimed, &f.org.id, full_chunks - 1, MAX_PAYLOAD_BYTES);

    // Exactly at the limit is allowed; one byte more is not.
    let last = chunk_of_bytes(&head, &claimed, MAX_PAYLOAD_BYTES);
    runner.stream(&last).await.expect(200);
    assert_eq!(
        totals(f.key(), &claimed.job_id()).await,
        (full_chunks, MAX_STREAM_BYTES_PER_ATTEMPT)
    );
    let head = advanced(&head, &last);
    let past = chunk_of_bytes(&head, &claimed, 2);
    let expected = ChunkError::BytesLimit {
        stored: MAX_STREAM_BYTES_PER_ATTEMPT,
        bytes: 2,
        max_bytes: MAX_STREAM_BYTES_PER_ATTEMPT,
    };
    runner
        .stream(&past)
        .await
        .expect_error(expected.http_status(), expected.code());
    assert_eq!(expected.code(), "STREAM_BYTES_LIMIT");
    assert_eq!(
        totals(f.key(), &claimed.job_id()).await,
        (full_chunks, MAX_STREAM_BYTES_PER_ATTEMPT)
    );
}

#[tokio::test]
async fn a_completion_naming_more_evidence_ids_than_the_limit_is_refused() {
    let _turn = turn().await;
    let f = StagedPrompt::new(bootstrap_org("bounds-evidence")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let mut evidence = bare_evidence(f.key()).await;
    evidence.test_result_ids = (1..=MAX_EVIDENCE_IDS as u64 / 2)
        .map(EvidenceId::Integer)
        .collect();
    evidence.cost_record_ids = (0..=MAX_EVIDENCE_IDS / 2)
        .map(|n| EvidenceId::Text(format!("cst_{n}")))
        .collect();
    let completion = claimed.succeeded(None, evidence);
    runner
        .complete(&completion)
        .await
        .expect_error(422, "EVIDENCE_LIMIT");
    let shown = get_job(f.key(), &claimed.job_id()).await.expect(200);
    assert_eq!(shown["completions"].as_array().map(Vec::len), Some(0));
    assert_eq!(shown["state"], "running");
}

#[tokio::test]
async fn refused_completions_past_the_cap_are_counted_not_stored() {
    let _turn = turn().await;
    let f = StagedPrompt::new(bootstrap_org("bounds-decisions")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let accepted = claimed.succeeded(None, bare_evidence(f.key()).await);
    let answer = runner.complete(&accepted).await.expect(200);
    assert_eq!(answer["decision"], "accepted");

    // A different completion after acceptance is a conflict; the same one again a duplicate.
    let conflict = |n: usize| {
        let mut fields = claimed.fields(
            CompletionStatus::Failed,
            None,
            None,
            Evidence {
                evaluation_run_id: EvidenceId::Text(format!("evr_conflict_{n}")),
                test_result_ids: Vec::new(),
                cost_record_ids: Vec::new(),
                model_call_ids: Vec::new(),
                trace_id: None,
                extra: serde_json::Map::new(),
            },
        );
        fields.extra.insert("attemptNote".into(), json!(n));
        Completion::seal(fields).to_json()
    };
    let mut sent: Vec<(&str, Value)> = Vec::new();
    for n in 0..STORED_REFUSALS + 5 {
        let completion = if n % 5 == 4 {
            accepted.clone()
        } else {
            conflict(n)
        };
        let reply = runner.complete(&completion).await;
        // The answer is the same whether the decision is stored or only counted.
        if n % 5 == 4 {
            let body = reply.expect(200);
            assert_eq!(body["decision"], "duplicate", "{reply:?}");
            assert_eq!(
                body["completionId"].is_string(),
                n < STORED_REFUSALS,
                "{reply:?}"
            );
            sent.push(("duplicate", completion));
        } else {
            reply.expect_error(409, "COMPLETION_CONFLICT");
            assert_eq!(
                reply.json()["decision"]["decision"],
                "conflict",
                "{reply:?}"
            );
            sent.push(("conflict", completion));
        }
    }
    let (last_decision, last) = sent.last().expect("sent");
    let last_checksum = last["completionChecksum"].as_str().expect("checksum");

    let shown = get_job(f.key(), &claimed.job_id()).await.expect(200);
    let completions = shown["completions"].as_array().expect("completions");
    assert_eq!(completions.len(), 1 + STORED_REFUSALS, "{shown}");
    assert_eq!(
        completions
            .iter()
            .filter(|c| c["decision"] != "accepted")
            .count(),
        STORED_REFUSALS
    );
    let unstored = &shown["unstoredDecisions"];
    assert_eq!(unstored["count"].as_u64(), Some(5), "{shown}");
    assert_eq!(unstored["lastChecksum"], *last_checksum, "{shown}");
    assert_eq!(unstored["lastDecision"], *last_decision, "{shown}");
    let events: Vec<&str> = shown["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    let recorded = events
        .iter()
        .filter(|t| ["job.completion_duplicate", "job.completion_conflict"].contains(t))
        .count();
    assert_eq!(recorded, STORED_REFUSALS, "{events:?}");
    assert_eq!(
        events
            .iter()
            .filter(|t| **t == "job.completion_decisions_capped")
            .count(),
        1,
        "{events:?}"
    );

    let bundle = get(
        &format!("/api/remote-runners/jobs/{}/bundle", claimed.job_id()),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(
        bundle["completions"].as_array().map(Vec::len),
        Some(1 + STORED_REFUSALS)
    );
    assert_eq!(bundle["unstoredDecisions"], *unstored);
}

#[tokio::test]
async fn a_completion_after_its_lease_expiry_is_refused_before_recovery_runs() {
    let _turn = turn().await;
    let f = StagedPrompt::new(bootstrap_org("bounds-lease")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let completion = claimed.succeeded(None, bare_evidence(f.key()).await);

    // The lease lapses in D1; the job's alarm is still a minute away, and nothing here fires
    // cron, so the job is still running with its claim active when the completion arrives.
    set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() - 1_000);
    runner
        .complete(&completion)
        .await
        .expect_error(409, "LEASE_EXPIRED");
    // The same code a heartbeat gets at that instant.
    runner
        .heartbeat(&claimed.claim_id(), 60)
        .await
        .expect_error(409, "LEASE_EXPIRED");
    let shown = get_job(f.key(), &claimed.job_id()).await.expect(200);
    assert_eq!(shown["state"], "running", "{shown}");
    assert_eq!(
        shown["activeClaimId"],
        claimed.claim_id().as_str(),
        "{shown}"
    );
    assert_eq!(shown["completions"].as_array().map(Vec::len), Some(0));

    // Control: with only the lease moved back into the future, the same completion is accepted.
    set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() + 60_000);
    let answer = runner.complete(&completion).await.expect(200);
    assert_eq!(answer["decision"], "accepted", "{answer}");
}

#[tokio::test]
async fn evidence_added_to_a_run_in_custody_is_refused() {
    let _turn = turn().await;
    let f = StagedPrompt::new(bootstrap_org("bounds-custody")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let run = evaluation_run(f.key()).await;
    // Before custody, rows can be added.
    let result = test_result(f.key(), &run).await;
    let evidence = Evidence {
        evaluation_run_id: run.clone(),
        test_result_ids: vec![result],
        cost_record_ids: Vec::new(),
        model_call_ids: Vec::new(),
        trace_id: None,
        extra: serde_json::Map::new(),
    };
    let answer = runner
        .complete(&claimed.succeeded(None, evidence))
        .await
        .expect(200);
    assert_eq!(answer["decision"], "accepted", "{answer}");

    let rows = [
        (
            "test-results",
            json!({ "name": "late", "status": "passed" }),
        ),
        (
            "cost-records",
            json!({ "amountMicros": 1, "currency": "USD" }),
        ),
        ("model-calls", json!({ "model": "late-model" })),
        ("traces", json!({ "name": "late-trace" })),
    ];
    for (path, body) in rows {
        post(
            &format!("/api/evidence/runs/{}/{path}", run.key()),
            Some(f.key()),
            &body,
        )
        .await
        .expect_error(409, "EVIDENCE_RUN_IN_CUSTODY");
    }
    let shown = get(&format!("/api/evidence/runs/{}", run.key()), f.key())
        .await
        .expect(200);
    assert_eq!(shown["testResults"].as_array().map(Vec::len), Some(1));
    assert_eq!(shown["costRecords"].as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn the_bundle_of_a_job_at_its_stream_byte_limit_is_streamed_and_verifies() {
    let _turn = turn().await;
    let f = StagedPrompt::new(bootstrap_org("bounds-bundle")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    // 64 MiB in 256 KiB chunks, for real: every hash must hold for `verify`.
    let mut writer = claimed.writer();
    let chunks = MAX_STREAM_BYTES_PER_ATTEMPT / MAX_PAYLOAD_BYTES as u64;
    let mut last = None;
    for n in 0..chunks {
        let payload = Value::String(format!("{n:08}{}", "b".repeat(MAX_PAYLOAD_BYTES - 10)));
        let chunk = writer.next(ChunkKind::Log, payload, timestamp_now());
        let reply = runner.stream(&chunk.to_json()).await;
        assert_eq!(reply.status, 200, "chunk {n}: {}", reply.text);
        if n % 16 == 15 {
            runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
        }
        last = Some(chunk.checksum.clone());
    }
    let completion = claimed.succeeded(last.as_ref(), bare_evidence(f.key()).await);
    runner.complete(&completion).await.expect(200);

    let path = format!("/api/remote-runners/jobs/{}/bundle", claimed.job_id());
    let reply = get(&path, f.key()).await;
    assert_eq!(
        reply.status,
        200,
        "bundle: {}",
        &reply.text[..reply.text.len().min(500)]
    );
    // Streamed: the length was not known when the answer began.
    assert!(
        reply.headers.get(reqwest::header::CONTENT_LENGTH).is_none(),
        "the bundle was sent whole: {:?}",
        reply.headers
    );
    assert_eq!(reply.content_type(), "application/json");
    let bundle: Value = serde_json::from_str(&reply.text).expect("the bundle parses");
    assert_eq!(
        bundle["stream"].as_array().map(Vec::len),
        Some(chunks as usize)
    );
    assert_eq!(bundle["completions"].as_array().map(Vec::len), Some(1));

    // The job detail stays small: chunk heads only, and the totals.
    assert_eq!(
        totals(f.key(), &claimed.job_id()).await,
        (chunks, MAX_STREAM_BYTES_PER_ATTEMPT)
    );

    // `edgerunner verify` re-checks every hash and link (EDGERUNNER_BIN, as scripts/test sets).
    if let Ok(bin) = std::env::var("EDGERUNNER_BIN") {
        let file = std::env::temp_dir().join(format!("{}.bundle.json", claimed.job_id()));
        std::fs::write(&file, reply.text.as_bytes()).expect("write the bundle");
        let secret = runner.signing.secret.expose().to_owned();
        let output = std::process::Command::new(bin)
            .args(["verify", file.to_str().expect("UTF-8")])
            .env("EDGERUNNER_SIGNING_SECRET", &secret)
            .output()
            .expect("run edgerunner verify");
        let _ = std::fs::remove_file(&file);
        assert!(
            output.status.success(),
            "verify: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    } else {
        panic!("EDGERUNNER_BIN is not set: the bundle's verification cannot run");
    }
}
