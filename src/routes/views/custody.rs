//! The custody reads' views: a chunk as its runner sent it, a stream page of them, and the
//! custody bundle's claims and completions (what `GET …/jobs/{id}/stream` and `…/bundle`
//! answer).

use edgerunner_protocol::completion::Decision;
use edgerunner_protocol::state::JobState;
use serde::Serialize;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::platform::rfc3339;
use crate::store::jobs::{BundleClaim, BundleCompletion, ChunkWithPayload};

/// `JobStreamChunk`: a chunk exactly as its runner sent it (the fields its checksum covers,
/// and the payload), as the custody bundle holds it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SentChunkView<'a> {
    job_id: &'a str,
    claim_id: &'a str,
    dispatch_attempt: i64,
    sequence: i64,
    kind: &'a str,
    previous_checksum: Option<&'a str>,
    payload: Value,
    payload_hash: &'a str,
    checksum: &'a str,
    emitted_at: &'a str,
}

impl<'a> SentChunkView<'a> {
    /// A payload that is not JSON is an internal error: the chunk's hashes cover its lexemes,
    /// and no stand-in keeps them.
    pub(crate) fn new(chunk: &'a ChunkWithPayload, job: &'a str) -> ApiResult<Self> {
        Ok(SentChunkView {
            job_id: job,
            claim_id: &chunk.claim_id,
            dispatch_attempt: chunk.dispatch_attempt,
            sequence: chunk.sequence,
            kind: &chunk.kind,
            previous_checksum: chunk.previous_checksum.as_deref(),
            payload: serde_json::from_str(&chunk.payload).map_err(ApiError::internal)?,
            payload_hash: &chunk.payload_hash,
            checksum: &chunk.checksum,
            emitted_at: &chunk.emitted_at,
        })
    }
}

/// `JobStreamChunkReceived`: a chunk of a stream page, as sent and when it was received.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReceivedChunkView<'a> {
    #[serde(flatten)]
    sent: SentChunkView<'a>,
    received_at: Option<String>,
}

impl<'a> ReceivedChunkView<'a> {
    pub(crate) fn new(chunk: &'a ChunkWithPayload, job: &'a str) -> ApiResult<Self> {
        Ok(ReceivedChunkView {
            sent: SentChunkView::new(chunk, job)?,
            received_at: rfc3339(chunk.received_at),
        })
    }
}

/// `JobBundleClaim`: a claim with the signed job its runner was handed.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BundleClaimView<'a> {
    id: &'a str,
    runner_id: &'a str,
    dispatch_attempt: i64,
    state: &'a str,
    signed_job: Option<Value>,
}

impl<'a> BundleClaimView<'a> {
    /// A stored signed job that is not JSON is an internal error: `verify` re-checks its hash.
    pub(crate) fn new(claim: &'a BundleClaim) -> ApiResult<Self> {
        Ok(BundleClaimView {
            id: &claim.id,
            runner_id: &claim.runner_id,
            dispatch_attempt: claim.dispatch_attempt,
            state: claim.state.as_str(),
            signed_job: claim
                .signed_job
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(ApiError::internal)?,
        })
    }
}

/// `JobBundleCompletion`: a completion as received, with its decision.
#[derive(Serialize)]
pub(crate) struct BundleCompletionView<'a> {
    id: &'a str,
    decision: Decision,
    rationale: &'a str,
    completion: Option<Value>,
}

impl<'a> BundleCompletionView<'a> {
    /// A stored completion that is not JSON is an internal error: `verify` re-checks its hash.
    pub(crate) fn new(c: &'a BundleCompletion) -> ApiResult<Self> {
        Ok(BundleCompletionView {
            id: &c.id,
            decision: c.decision,
            rationale: &c.rationale,
            completion: c
                .received
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(ApiError::internal)?,
        })
    }
}

/// `JobStreamPage`: a page of a job's stream with its payloads, the cursor to read on from, and
/// the job's state as of the page (terminal with `more: false`: the whole stream was read).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StreamPageView {
    /// `JobStreamChunkReceived`s, from the live rows or the archive's bundle.
    pub(crate) chunks: Vec<Value>,
    /// `"{attempt}.{sequence}"` of the last chunk read (the request's own when none was).
    pub(crate) cursor: String,
    pub(crate) more: bool,
    pub(crate) state: JobState,
    pub(crate) dispatch_attempt: i64,
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;
    use crate::routes::views::{stored_json, to_value};

    /// 2026-01-01T00:00:00Z.
    const NOW: i64 = 1_767_225_600_000;

    /// A row as D1 answers it: its columns by name.
    fn row<T: DeserializeOwned>(columns: Value) -> T {
        serde_json::from_value(columns).unwrap()
    }

    fn chunk_with_payload(payload: &str) -> ChunkWithPayload {
        row(json!({
            "dispatch_attempt": 1, "sequence": 2, "kind": "log", "claim_id": "job_1-a1",
            "previous_checksum": "11".repeat(32), "payload": payload,
            "payload_hash": "44".repeat(32), "checksum": "55".repeat(32),
            "emitted_at": "2026-01-01T00:00:00.1Z", "received_at": NOW,
        }))
    }

    #[test]
    fn a_chunk_reads_as_sent_and_a_page_adds_when_it_was_received() {
        const PAYLOAD: &str = r#"{"line":"x","score":1e-07}"#;
        let chunk = chunk_with_payload(PAYLOAD);
        let sent = json!({
            "jobId": "job_1", "claimId": "job_1-a1", "dispatchAttempt": 1, "sequence": 2,
            "kind": "log", "previousChecksum": "11".repeat(32),
            "payload": stored_json(PAYLOAD), "payloadHash": "44".repeat(32),
            "checksum": "55".repeat(32), "emittedAt": "2026-01-01T00:00:00.1Z",
        });
        let view = to_value(&SentChunkView::new(&chunk, "job_1").unwrap()).unwrap();
        assert_eq!(view, sent);
        assert!(view.to_string().contains(r#""score":1e-07"#), "{view}");
        let mut received = sent;
        received["receivedAt"] = "2026-01-01T00:00:00.000Z".into();
        assert_eq!(
            to_value(&ReceivedChunkView::new(&chunk, "job_1").unwrap()).unwrap(),
            received
        );
    }

    #[test]
    fn the_bundle_parts_carry_what_was_signed_and_received() {
        let claim: BundleClaim = row(json!({
            "id": "job_1-a1", "runner_id": "run_1", "dispatch_attempt": 1, "state": "released",
            "signed_job": r#"{"payload":{"n":1.0}}"#,
        }));
        assert_eq!(
            to_value(&BundleClaimView::new(&claim).unwrap())
                .unwrap()
                .to_string(),
            r#"{"dispatchAttempt":1,"id":"job_1-a1","runnerId":"run_1","signedJob":{"payload":{"n":1.0}},"state":"released"}"#
        );
        let completion: BundleCompletion = row(json!({
            "id": "cmp_1", "decision": "accepted", "rationale": "first", "received": null,
        }));
        assert_eq!(
            to_value(&BundleCompletionView::new(&completion).unwrap()).unwrap(),
            json!({"id": "cmp_1", "decision": "accepted", "rationale": "first", "completion": null})
        );
    }

    #[test]
    fn a_stream_page_reads_with_its_cursor_and_the_jobs_state() {
        let page = StreamPageView {
            chunks: vec![json!({"sequence": 1})],
            cursor: "1.1".to_owned(),
            more: false,
            state: JobState::Succeeded,
            dispatch_attempt: 1,
        };
        assert_eq!(
            to_value(&page).unwrap(),
            json!({
                "chunks": [{"sequence": 1}], "cursor": "1.1", "more": false,
                "state": "succeeded", "dispatchAttempt": 1,
            })
        );
    }
}
