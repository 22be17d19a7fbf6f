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

mod completion;
mod enqueue;
mod leases;
mod lifecycle;
mod negotiation;
mod race;
mod stream;

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
