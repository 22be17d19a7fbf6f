//! Snapshots and completions for the operations' unit tests: job `job_1` of organization
//! `org_1`, its claims by runner `run_1`.

use edgerunner_protocol::completion::{Completion, CompletionFields, Evidence, EvidenceId};
use edgerunner_protocol::envelope::{ClaimId, DispatchAttempt, JobId, OrganizationId, RunnerId};
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::state::{ClaimState, CompletionStatus, JobState};
use edgerunner_protocol::time::Timestamp;
use serde_json::Map;

use super::snapshot::Snapshot;
use crate::store::jobs::{ClaimRow, JobRow};

/// 2026-01-01T00:00:00Z.
pub(super) const NOW: i64 = 1_767_225_600_000;

fn input_hash() -> String {
    "ab".repeat(32)
}

pub(super) fn claim(id: &str, runner: &str, state: ClaimState) -> ClaimRow {
    ClaimRow {
        id: id.to_owned(),
        runner_id: runner.to_owned(),
        dispatch_attempt: ClaimId::job_and_attempt(id).map_or(1, |(_, a)| i64::from(a.get())),
        state,
        key_id: "key_1".to_owned(),
        issued_at: NOW - 10_000,
        expires_at: NOW + 290_000,
        lease_expires_at: NOW + 30_000,
        started_at: Some(NOW - 9_000),
        ended_at: None,
        end_reason: None,
        last_heartbeat_at: Some(NOW - 5_000),
    }
}

/// Job `job_1`, queued and never claimed.
pub(super) fn queued() -> Snapshot {
    Snapshot {
        job: JobRow {
            id: "job_1".to_owned(),
            organization_id: "org_1".to_owned(),
            idempotency_key: "idem_1".to_owned(),
            intent_hash: "cd".repeat(32),
            subject_kind: "prompt".to_owned(),
            subject_artifact_id: "art_1".to_owned(),
            subject_version_id: 1,
            subject_content_hash: "ef".repeat(32),
            subject_environment: "prod".to_owned(),
            input_hash: input_hash(),
            requirements: "{}".to_owned(),
            state: JobState::Queued,
            dispatch_attempt: 0,
            released_attempts: 0,
            active_claim_id: None,
            lease_expires_at: None,
            cancel_reason: None,
            created_at: NOW - 60_000,
            updated_at: NOW - 60_000,
            finished_at: None,
            unstored_decisions: 0,
            last_unstored_checksum: None,
            last_unstored_decision: None,
            last_unstored_at: None,
            held_at: None,
            held_by: None,
            held_reason: None,
            subject_artifact_name: None,
        },
        claims: Vec::new(),
        head: Vec::new(),
        accepted: None,
        stored_refusals: 0,
    }
}

/// Job `job_1` in `state` at attempt 1, its active claim `job_1-a1` held by `run_1` with 30 s
/// of lease left at [`NOW`], nothing streamed.
pub(super) fn held(state: JobState) -> Snapshot {
    let mut snap = queued();
    snap.job.state = state;
    snap.job.dispatch_attempt = 1;
    snap.job.active_claim_id = Some("job_1-a1".to_owned());
    snap.job.lease_expires_at = Some(NOW + 30_000);
    snap.claims = vec![claim("job_1-a1", "run_1", ClaimState::Active)];
    snap
}

/// Job `job_1` after recovery lost attempt 1's claim: queued, its claim `lost`.
pub(super) fn requeued_after_loss() -> Snapshot {
    let mut snap = queued();
    snap.job.dispatch_attempt = 1;
    snap.claims = vec![claim("job_1-a1", "run_1", ClaimState::Lost)];
    snap
}

/// `run_1`'s completion of attempt `attempt` of `job_1`, sealed (its checksum covers it),
/// with nothing streamed, an evaluation run, one test result and a trace as evidence.
pub(super) fn completion(attempt: u32, status: CompletionStatus) -> Completion {
    let claim = format!("job_1-a{attempt}");
    Completion::seal(CompletionFields {
        job_id: JobId::parse("job_1").unwrap(),
        claim_id: ClaimId::parse(&claim).unwrap(),
        runner_id: RunnerId::parse("run_1").unwrap(),
        organization_id: OrganizationId::parse("org_1").unwrap(),
        dispatch_attempt: DispatchAttempt::new(attempt).unwrap(),
        status,
        input_hash: Sha256Hex::parse(&input_hash()).unwrap(),
        result_hash: (status == CompletionStatus::Succeeded)
            .then(|| Sha256Hex::parse(&"12".repeat(32)).unwrap()),
        final_stream_checksum: None,
        evidence: Evidence {
            evaluation_run_id: EvidenceId::Text("evr_1".to_owned()),
            test_result_ids: vec![EvidenceId::Integer(7)],
            cost_record_ids: Vec::new(),
            model_call_ids: Vec::new(),
            trace_id: Some(EvidenceId::Text("trace_1".to_owned())),
            extra: Map::new(),
        },
        completed_at: Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap(),
        extra: Map::new(),
    })
}
