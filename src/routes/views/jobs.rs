//! The job views: a job (with what it still allows), its claims, timeline, stream and
//! completions in the detail, and the held job's artifact (the custody reads' views are in
//! `custody`).

use std::collections::BTreeMap;

use edgerunner_protocol::completion::Decision;
use edgerunner_protocol::state::{ClaimState, JobInput, JobState};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{stored_json, to_value};
use crate::error::{ApiError, ApiResult};
use crate::platform::rfc3339;
use crate::store::archive::ArchiveRow;
use crate::store::events::EventRow;
use crate::store::jobs::{
    ChunkRow, ClaimRow, CompletionRow, EvidenceRow, HeldJobData, JobRow, StreamTotal,
};

/// `Job`: a job as enqueue, list, cancel, the detail and the bundle answer it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobView<'a> {
    id: &'a str,
    organization_id: &'a str,
    idempotency_key: &'a str,
    state: &'a str,
    /// No input moves the job on any more ([`JobState::is_terminal`]).
    terminal: bool,
    /// What an operator may ask of the job now ([`job_actions`], then [`hold_action`]).
    actions: Vec<&'static str>,
    dispatch_attempt: i64,
    released_attempts: i64,
    subject: SubjectView<'a>,
    input_hash: &'a str,
    requirements: Value,
    active_claim_id: Option<&'a str>,
    lease_expires_at: Option<String>,
    cancel_reason: Option<&'a str>,
    created_at: Option<String>,
    updated_at: Option<String>,
    finished_at: Option<String>,
    /// An admin's hold, only on a held job (and never in a custody bundle: [`JobView::custody`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<HoldView<'a>>,
}

/// `JobList`: a page of the organization's jobs, with its counts by state and the states in
/// their lifecycle order (the order a client lists and filters them in).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobListView<'a> {
    pub(crate) jobs: Vec<JobView<'a>>,
    pub(crate) next_cursor: Option<String>,
    /// Every state, with the organization's jobs in it (live and archived).
    pub(crate) counts: BTreeMap<&'static str, i64>,
    pub(crate) states: Vec<&'static str>,
}

impl<'a> JobListView<'a> {
    /// `rows` of the page, and the organization's `(state, count)`s.
    pub(crate) fn new(
        rows: &'a [JobRow],
        next_cursor: Option<String>,
        counted: impl IntoIterator<Item = (JobState, i64)>,
    ) -> Self {
        let mut counts: BTreeMap<&'static str, i64> =
            JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for (state, n) in counted {
            counts.insert(state.as_str(), n);
        }
        JobListView {
            jobs: rows.iter().map(JobView::from).collect(),
            next_cursor,
            counts,
            states: JobState::ALL.iter().map(|s| s.as_str()).collect(),
        }
    }
}

/// `JobHold`: an admin holds the finished job past its retention (who, when and why).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HoldView<'a> {
    held_at: Option<String>,
    held_by: &'a str,
    reason: Option<&'a str>,
}

/// `JobSubject`: the exact version a job runs.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SubjectView<'a> {
    kind: &'a str,
    artifact_id: &'a str,
    /// The artifact's name, what an operator knows it by: in the admin's answers, never in a
    /// custody bundle (which names the artifact by id, as the signed envelope does).
    #[serde(skip_serializing_if = "Option::is_none")]
    artifact_name: Option<&'a str>,
    version_id: i64,
    content_hash: &'a str,
    environment: &'a str,
}

/// The operator actions that apply to a job in `state`: `cancel` while a cancel would move it
/// (the job object refuses one on a finished job, and one on a job already cancelling changes
/// nothing).
pub(crate) fn job_actions(state: JobState) -> Vec<&'static str> {
    let moves = state
        .transition(JobInput::Cancel)
        .is_ok_and(|next| next != state);
    if moves {
        vec![JobInput::Cancel.as_str()]
    } else {
        Vec::new()
    }
}

/// An admin's move on a finished job: `hold` it past its retention, or `release` its hold.
pub(crate) fn hold_action(state: JobState, held: bool) -> Option<&'static str> {
    match (state.is_terminal(), held) {
        (false, _) => None,
        (true, false) => Some("hold"),
        (true, true) => Some("release"),
    }
}

impl<'a> From<&'a JobRow> for JobView<'a> {
    fn from(job: &'a JobRow) -> Self {
        let mut actions = job_actions(job.state);
        actions.extend(hold_action(job.state, job.held_at.is_some()));
        JobView {
            id: &job.id,
            organization_id: &job.organization_id,
            idempotency_key: &job.idempotency_key,
            state: job.state.as_str(),
            terminal: job.state.is_terminal(),
            actions,
            dispatch_attempt: job.dispatch_attempt,
            released_attempts: job.released_attempts,
            subject: SubjectView {
                kind: &job.subject_kind,
                artifact_id: &job.subject_artifact_id,
                artifact_name: job.subject_artifact_name.as_deref(),
                version_id: job.subject_version_id,
                content_hash: &job.subject_content_hash,
                environment: &job.subject_environment,
            },
            input_hash: &job.input_hash,
            requirements: stored_json(&job.requirements),
            active_claim_id: job.active_claim_id.as_deref(),
            lease_expires_at: job.lease_expires_at.and_then(rfc3339),
            cancel_reason: job.cancel_reason.as_deref(),
            created_at: rfc3339(job.created_at),
            updated_at: rfc3339(job.updated_at),
            finished_at: job.finished_at.and_then(rfc3339),
            hold: job.held_at.map(|at| HoldView {
                held_at: rfc3339(at),
                held_by: job.held_by.as_deref().unwrap_or_default(),
                reason: job.held_reason.as_deref(),
            }),
        }
    }
}

impl<'a> JobView<'a> {
    /// The job as its custody bundle keeps it: what the job was, without an admin's hold or
    /// its action, which are the deployment's business and change after the bundle is sealed.
    /// Nor the artifact's name, which the sealed record names by id.
    pub(crate) fn custody(job: &'a JobRow) -> Self {
        let mut view = JobView {
            hold: None,
            actions: job_actions(job.state),
            ..JobView::from(job)
        };
        view.subject.artifact_name = None;
        view
    }
}

/// `JobUnstoredDecisions`: the decisions counted but not stored (job detail and bundle).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UnstoredView<'a> {
    count: i64,
    last_checksum: Option<&'a str>,
    last_decision: Option<Decision>,
    last_at: Option<String>,
}

impl<'a> From<&'a JobRow> for UnstoredView<'a> {
    fn from(job: &'a JobRow) -> Self {
        UnstoredView {
            count: job.unstored_decisions,
            last_checksum: job.last_unstored_checksum.as_deref(),
            last_decision: job.last_unstored_decision,
            last_at: job.last_unstored_at.and_then(rfc3339),
        }
    }
}

/// `JobClaim`: one dispatch of the job, in its detail.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimView<'a> {
    id: &'a str,
    runner_id: &'a str,
    dispatch_attempt: i64,
    state: &'a str,
    key_id: &'a str,
    issued_at: Option<String>,
    expires_at: Option<String>,
    lease_expires_at: Option<String>,
    started_at: Option<String>,
    ended_at: Option<String>,
    end_reason: Option<&'a str>,
    /// Whether the claim holds its job now (its lease runs): the only claim whose runner may
    /// heartbeat, stream and complete.
    held: bool,
}

impl<'a> From<&'a ClaimRow> for ClaimView<'a> {
    fn from(claim: &'a ClaimRow) -> Self {
        ClaimView {
            id: &claim.id,
            runner_id: &claim.runner_id,
            dispatch_attempt: claim.dispatch_attempt,
            state: claim.state.as_str(),
            key_id: &claim.key_id,
            issued_at: rfc3339(claim.issued_at),
            expires_at: rfc3339(claim.expires_at),
            lease_expires_at: rfc3339(claim.lease_expires_at),
            started_at: claim.started_at.and_then(rfc3339),
            ended_at: claim.ended_at.and_then(rfc3339),
            end_reason: claim.end_reason.as_deref(),
            held: claim.state == ClaimState::Active,
        }
    }
}

/// `JobEvent` / `RunnerEvent`: one audit event, in a job's timeline or a runner's.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventView<'a> {
    id: i64,
    job_id: Option<&'a str>,
    runner_id: Option<&'a str>,
    claim_id: Option<&'a str>,
    actor: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    attempt: Option<i64>,
    reason: Option<&'a str>,
    detail: Option<Value>,
    at: Option<String>,
}

impl<'a> From<&'a EventRow> for EventView<'a> {
    fn from(event: &'a EventRow) -> Self {
        EventView {
            id: event.id,
            job_id: event.job_id.as_deref(),
            runner_id: event.runner_id.as_deref(),
            claim_id: event.claim_id.as_deref(),
            actor: &event.actor,
            kind: event.kind.as_str(),
            attempt: event.attempt,
            reason: event.reason.as_deref(),
            detail: event
                .detail
                .as_deref()
                .and_then(|d| serde_json::from_str(d).ok()),
            at: rfc3339(event.at),
        }
    }
}

/// `JobDetail`: the job with its whole timeline, bounded whatever the job holds.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobDetailView<'a> {
    #[serde(flatten)]
    pub(crate) job: JobView<'a>,
    #[serde(flatten)]
    pub(crate) parts: &'a DetailParts,
    pub(crate) unstored_decisions: UnstoredView<'a>,
    pub(crate) evidence: Vec<EvidenceLinkView<'a>>,
    pub(crate) archive: Option<ArchiveView<'a>>,
}

/// What the job detail shows of the job's claims, events, chunks and completions: rendered
/// from their rows while the job is whole, and kept so in its archive record once archived
/// (`crate::archive::record`), so that an archived job's detail reads as it did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DetailParts {
    pub(crate) claims: Vec<Value>,
    pub(crate) events: Vec<Value>,
    pub(crate) stream: Vec<Value>,
    pub(crate) stream_more: bool,
    pub(crate) stream_cursor: String,
    pub(crate) stream_totals: Vec<Value>,
    pub(crate) completions: Vec<Value>,
}

impl DetailParts {
    /// From the job's rows: `chunks` at most the detail's share (the caller read one more to
    /// know whether more follow: `stream_more`).
    pub(crate) fn from_rows(
        claims: &[ClaimRow],
        events: &[EventRow],
        chunks: &[ChunkRow],
        stream_more: bool,
        totals: &[StreamTotal],
        completions: &[CompletionRow],
    ) -> ApiResult<DetailParts> {
        let cursor = chunks
            .last()
            .map_or((0, -1), |c| (c.dispatch_attempt, c.sequence));
        fn values<'r, R: 'r, V: Serialize + From<&'r R>>(rows: &'r [R]) -> ApiResult<Vec<Value>> {
            rows.iter().map(|row| to_value(&V::from(row))).collect()
        }
        Ok(DetailParts {
            claims: values::<_, ClaimView>(claims)?,
            events: values::<_, EventView>(events)?,
            stream: values::<_, ChunkHeadView>(chunks)?,
            stream_more,
            stream_cursor: format!("{}.{}", cursor.0, cursor.1),
            stream_totals: values::<_, StreamTotalView>(totals)?,
            completions: values::<_, CompletionView>(completions)?,
        })
    }
}

/// `JobArchive`: where a finished job's archive stands (`null` until it is stored).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ArchiveView<'a> {
    state: &'static str,
    bundle_sha256: &'a str,
    bundle_key: String,
    bundle_bytes: i64,
    record_key: String,
    stream_chunks: i64,
    stream_bytes: i64,
    stream_head: Option<&'a str>,
    archived_at: Option<String>,
}

impl<'a> ArchiveView<'a> {
    /// The view of a stored archive; `None` for a job that has none.
    pub(crate) fn of(row: &'a ArchiveRow) -> ApiResult<Option<ArchiveView<'a>>> {
        let Some(summary) = row.summary.as_ref() else {
            return Ok(None);
        };
        Ok(Some(ArchiveView {
            state: summary.state.as_str(),
            bundle_sha256: &summary.bundle_sha256,
            bundle_key: summary.bundle_key()?,
            bundle_bytes: summary.bundle_bytes,
            record_key: summary.record_key()?,
            stream_chunks: summary.stream_chunks,
            stream_bytes: summary.stream_bytes,
            stream_head: summary.stream_head.as_deref(),
            archived_at: rfc3339(summary.archived_at),
        }))
    }
}

/// `JobStreamChunkHead`: a chunk in the detail, without its payload.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChunkHeadView<'a> {
    claim_id: &'a str,
    dispatch_attempt: i64,
    sequence: i64,
    kind: &'a str,
    previous_checksum: Option<&'a str>,
    payload_hash: &'a str,
    checksum: &'a str,
    emitted_at: &'a str,
    received_at: Option<String>,
}

impl<'a> From<&'a ChunkRow> for ChunkHeadView<'a> {
    fn from(chunk: &'a ChunkRow) -> Self {
        ChunkHeadView {
            claim_id: &chunk.claim_id,
            dispatch_attempt: chunk.dispatch_attempt,
            sequence: chunk.sequence,
            kind: &chunk.kind,
            previous_checksum: chunk.previous_checksum.as_deref(),
            payload_hash: &chunk.payload_hash,
            checksum: &chunk.checksum,
            emitted_at: &chunk.emitted_at,
            received_at: rfc3339(chunk.received_at),
        }
    }
}

/// `JobStreamTotal`: one attempt's whole stream.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StreamTotalView<'a> {
    dispatch_attempt: i64,
    chunks: i64,
    payload_bytes: Option<i64>,
    last_checksum: &'a str,
}

impl<'a> From<&'a StreamTotal> for StreamTotalView<'a> {
    fn from(total: &'a StreamTotal) -> Self {
        StreamTotalView {
            dispatch_attempt: total.dispatch_attempt,
            chunks: total.chunks,
            payload_bytes: total.stream_bytes,
            last_checksum: &total.last_checksum,
        }
    }
}

/// `JobCompletion`: one stored completion decision.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CompletionView<'a> {
    id: &'a str,
    decision: Decision,
    rationale: &'a str,
    dispatch_attempt: i64,
    runner_id: &'a str,
    claim_id: &'a str,
    status: &'a str,
    completion_checksum: &'a str,
    input_hash: &'a str,
    result_hash: Option<&'a str>,
    final_stream_checksum: Option<&'a str>,
    evidence: Value,
    reported_costs: Option<Value>,
    completed_at: &'a str,
    received_at: Option<String>,
}

impl<'a> From<&'a CompletionRow> for CompletionView<'a> {
    fn from(c: &'a CompletionRow) -> Self {
        CompletionView {
            id: &c.id,
            decision: c.decision,
            rationale: &c.rationale,
            dispatch_attempt: c.dispatch_attempt,
            runner_id: &c.runner_id,
            claim_id: &c.claim_id,
            status: &c.status,
            completion_checksum: &c.completion_checksum,
            input_hash: &c.input_hash,
            result_hash: c.result_hash.as_deref(),
            final_stream_checksum: c.final_stream_checksum.as_deref(),
            evidence: stored_json(&c.evidence),
            reported_costs: c.reported_costs.as_deref().map(stored_json),
            completed_at: &c.completed_at,
            received_at: rfc3339(c.received_at),
        }
    }
}

/// `JobEvidenceLink`: an evidence row attached to one of the job's completions.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvidenceLinkView<'a> {
    kind: &'a str,
    id: &'a str,
    completion_id: &'a str,
}

impl<'a> From<&'a EvidenceRow> for EvidenceLinkView<'a> {
    fn from(e: &'a EvidenceRow) -> Self {
        EvidenceLinkView {
            kind: e.evidence_kind.as_str(),
            id: &e.evidence_id,
            completion_id: &e.completion_id,
        }
    }
}

/// `HeldJobArtifact`: the bound artifact version's content, for the runner holding the job.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeldArtifactView<'a> {
    version_id: i64,
    content_hash: &'a str,
    content: Value,
}

impl<'a> HeldArtifactView<'a> {
    /// The version's content as stored; stored content that does not parse is an internal
    /// error, not a `null`.
    pub(crate) fn new(held: &'a HeldJobData) -> ApiResult<Self> {
        Ok(HeldArtifactView {
            version_id: held.subject_version_id,
            content_hash: &held.subject_content_hash,
            content: serde_json::from_str(&held.content).map_err(ApiError::internal)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;
    use crate::routes::views::to_value;

    /// 2026-01-01T00:00:00Z.
    const NOW: i64 = 1_767_225_600_000;

    /// Stored JSON with a lexeme a re-rendered number would lose.
    const REQUIREMENTS: &str = r#"{"limits":{"cpuSeconds":60},"ratio":1.50}"#;

    /// A row as D1 answers it: its columns by name.
    fn row<T: DeserializeOwned>(columns: Value) -> T {
        serde_json::from_value(columns).unwrap()
    }

    fn job(state: &str) -> JobRow {
        row(json!({
            "id": "job_1", "organization_id": "org_1", "idempotency_key": "idem_1",
            "intent_hash": "cd".repeat(32), "subject_kind": "prompt", "subject_artifact_id": "art_1",
            "subject_version_id": 3, "subject_content_hash": "ef".repeat(32),
            "subject_environment": "prod", "input_hash": "ab".repeat(32),
            "requirements": REQUIREMENTS, "state": state,
            "dispatch_attempt": 1, "released_attempts": 0, "active_claim_id": "job_1-a1",
            "lease_expires_at": NOW + 30_000, "cancel_reason": null, "created_at": NOW - 60_000,
            "updated_at": NOW, "finished_at": null, "unstored_decisions": 2,
            "last_unstored_checksum": "aa".repeat(32), "last_unstored_decision": "duplicate",
            "last_unstored_at": NOW,
        }))
    }

    #[test]
    fn a_job_reads_as_it_always_has_with_its_terminal_flag_and_actions() {
        let job = job("running");
        assert_eq!(
            to_value(&JobView::from(&job)).unwrap().to_string(),
            json!({
                "id": "job_1", "organizationId": "org_1", "idempotencyKey": "idem_1",
                "state": "running", "terminal": false, "actions": ["cancel"],
                "dispatchAttempt": 1, "releasedAttempts": 0,
                "subject": {
                    "kind": "prompt", "artifactId": "art_1", "versionId": 3,
                    "contentHash": "ef".repeat(32), "environment": "prod",
                },
                "inputHash": "ab".repeat(32),
                "requirements": stored_json(REQUIREMENTS),
                "activeClaimId": "job_1-a1", "leaseExpiresAt": "2026-01-01T00:00:30.000Z",
                "cancelReason": null, "createdAt": "2025-12-31T23:59:00.000Z",
                "updatedAt": "2026-01-01T00:00:00.000Z", "finishedAt": null,
            })
            .to_string()
        );
        // The stored lexeme, not a re-rendered number.
        assert!(to_value(&JobView::from(&job))
            .unwrap()
            .to_string()
            .contains(r#""ratio":1.50"#));
    }

    #[test]
    fn a_job_offers_cancel_while_a_cancel_would_move_it_and_is_terminal_as_the_protocol_says() {
        for state in JobState::ALL {
            let view = to_value(&JobView::from(&job(state.as_str()))).unwrap();
            assert_eq!(view["terminal"], state.is_terminal(), "{state}");
            let offered = matches!(
                state,
                JobState::Queued | JobState::Claimed | JobState::Running | JobState::Lost
            );
            let expected = if offered {
                json!(["cancel"])
            } else if state.is_terminal() {
                json!(["hold"])
            } else {
                json!([])
            };
            assert_eq!(view["actions"], expected, "{state}");
            // Its custody bundle keeps the job machine's moves only.
            let sealed = to_value(&JobView::custody(&job(state.as_str()))).unwrap();
            let machine = if offered {
                json!(["cancel"])
            } else {
                json!([])
            };
            assert_eq!(sealed["actions"], machine, "{state}");
        }
        // Held: released, not held again; and the hold shows, except in the bundle.
        let mut held = job("succeeded");
        held.held_at = Some(NOW);
        held.held_by = Some("api_key:key_1".to_owned());
        held.held_reason = Some("audit".to_owned());
        let view = to_value(&JobView::from(&held)).unwrap();
        assert_eq!(view["actions"], json!(["release"]));
        assert_eq!(
            view["hold"],
            json!({"heldAt": "2026-01-01T00:00:00.000Z", "heldBy": "api_key:key_1", "reason": "audit"})
        );
        let sealed = to_value(&JobView::custody(&held)).unwrap();
        assert!(sealed.get("hold").is_none(), "{sealed}");
        assert_eq!(sealed["actions"], json!([]));
        // A lost job is not terminal: recovery requeues it, or an operator cancels it.
        assert!(!JobState::Lost.is_terminal());
    }

    #[test]
    fn a_job_list_counts_every_state_and_names_them_in_the_lifecycles_order() {
        let rows = [job("queued")];
        let list = JobListView::new(&rows, Some("c1".to_owned()), [(JobState::Queued, 4)]);
        let value = to_value(&list).unwrap();
        let states: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(value["states"], json!(states));
        assert_eq!(value["states"][0], "queued");
        assert_eq!(value["counts"]["queued"], 4);
        assert_eq!(value["counts"].as_object().map(|c| c.len()), Some(8));
        assert_eq!(value["counts"]["lost"], 0);
        assert_eq!(value["nextCursor"], "c1");
        assert_eq!(value["jobs"][0]["id"], "job_1");
    }

    #[test]
    fn an_admins_job_names_its_artifact_and_its_custody_bundle_does_not() {
        let mut named = job("succeeded");
        named.subject_artifact_name = Some("capitals".to_owned());
        let view = to_value(&JobView::from(&named)).unwrap();
        assert_eq!(view["subject"]["artifactName"], "capitals");
        assert_eq!(view["subject"]["artifactId"], "art_1");
        let sealed = to_value(&JobView::custody(&named)).unwrap();
        assert!(sealed["subject"].get("artifactName").is_none(), "{sealed}");
        // A read that did not look the name up says nothing rather than null.
        let unnamed = to_value(&JobView::from(&job("queued"))).unwrap();
        assert!(
            unnamed["subject"].get("artifactName").is_none(),
            "{unnamed}"
        );
    }

    #[test]
    fn the_unstored_decisions_read_as_counted() {
        assert_eq!(
            to_value(&UnstoredView::from(&job("succeeded"))).unwrap(),
            json!({
                "count": 2, "lastChecksum": "aa".repeat(32), "lastDecision": "duplicate",
                "lastAt": "2026-01-01T00:00:00.000Z",
            })
        );
    }

    #[test]
    fn a_claim_and_an_event_read_with_their_times() {
        let claim: ClaimRow = row(json!({
            "id": "job_1-a1", "runner_id": "run_1", "dispatch_attempt": 1, "state": "active",
            "key_id": "rk_1", "issued_at": NOW, "expires_at": NOW + 300_000,
            "lease_expires_at": NOW + 30_000, "started_at": null, "ended_at": null,
            "end_reason": null,
        }));
        assert_eq!(
            to_value(&ClaimView::from(&claim)).unwrap(),
            json!({
                "id": "job_1-a1", "runnerId": "run_1", "dispatchAttempt": 1, "state": "active",
                "keyId": "rk_1", "issuedAt": "2026-01-01T00:00:00.000Z",
                "expiresAt": "2026-01-01T00:05:00.000Z",
                "leaseExpiresAt": "2026-01-01T00:00:30.000Z", "startedAt": null,
                "endedAt": null, "endReason": null, "held": true,
            })
        );
        let event: EventRow = row(json!({
            "id": 7, "job_id": "job_1", "runner_id": null, "claim_id": null, "actor": "key:k1",
            "type": "job.enqueued", "attempt": 0, "reason": null, "detail": r#"{"n":1}"#,
            "at": NOW,
        }));
        assert_eq!(
            to_value(&EventView::from(&event)).unwrap(),
            json!({
                "id": 7, "jobId": "job_1", "runnerId": null, "claimId": null, "actor": "key:k1",
                "type": "job.enqueued", "attempt": 0, "reason": null, "detail": {"n": 1},
                "at": "2026-01-01T00:00:00.000Z",
            })
        );
    }

    #[test]
    fn the_detail_is_the_job_with_its_timeline_beside_it() {
        let job = job("succeeded");
        let chunk: ChunkRow = row(json!({
            "dispatch_attempt": 1, "sequence": 0, "kind": "log", "previous_checksum": null,
            "payload_hash": "11".repeat(32), "checksum": "22".repeat(32),
            "emitted_at": "2026-01-01T00:00:00.123456Z", "received_at": NOW, "claim_id": "job_1-a1",
        }));
        let total: StreamTotal = row(json!({
            "dispatch_attempt": 1, "chunks": 1, "stream_bytes": null, "last_checksum": "22".repeat(32),
        }));
        let completion: CompletionRow = row(json!({
            "id": "cmp_1", "claim_id": "job_1-a1", "runner_id": "run_1", "dispatch_attempt": 1,
            "decision": "accepted", "rationale": "first", "completion_checksum": "33".repeat(32),
            "status": "succeeded", "input_hash": "ab".repeat(32), "result_hash": null,
            "final_stream_checksum": "22".repeat(32), "evidence": r#"{"evaluationRunId":"er_1"}"#,
            "reported_costs": null, "completed_at": "2026-01-01T00:00:01Z", "received_at": NOW,
        }));
        let link: EvidenceRow = row(json!({
            "evidence_kind": "evaluation_run", "evidence_id": "er_1", "completion_id": "cmp_1",
        }));
        let parts =
            DetailParts::from_rows(&[], &[], &[chunk], false, &[total], &[completion]).unwrap();
        let detail = JobDetailView {
            job: JobView::from(&job),
            parts: &parts,
            unstored_decisions: UnstoredView::from(&job),
            evidence: vec![EvidenceLinkView::from(&link)],
            archive: None,
        };
        let mut expected = to_value(&JobView::from(&job)).unwrap();
        let extra = json!({
            "claims": [], "events": [],
            "stream": [{
                "claimId": "job_1-a1", "dispatchAttempt": 1, "sequence": 0, "kind": "log",
                "previousChecksum": null, "payloadHash": "11".repeat(32),
                "checksum": "22".repeat(32), "emittedAt": "2026-01-01T00:00:00.123456Z",
                "receivedAt": "2026-01-01T00:00:00.000Z",
            }],
            "streamMore": false, "streamCursor": "1.0",
            "streamTotals": [{
                "dispatchAttempt": 1, "chunks": 1, "payloadBytes": null,
                "lastChecksum": "22".repeat(32),
            }],
            "completions": [{
                "id": "cmp_1", "decision": "accepted", "rationale": "first", "dispatchAttempt": 1,
                "runnerId": "run_1", "claimId": "job_1-a1", "status": "succeeded",
                "completionChecksum": "33".repeat(32), "inputHash": "ab".repeat(32),
                "resultHash": null, "finalStreamChecksum": "22".repeat(32),
                "evidence": {"evaluationRunId": "er_1"}, "reportedCosts": null,
                "completedAt": "2026-01-01T00:00:01Z", "receivedAt": "2026-01-01T00:00:00.000Z",
            }],
            "unstoredDecisions": to_value(&UnstoredView::from(&job)).unwrap(),
            "evidence": [{"kind": "evaluation_run", "id": "er_1", "completionId": "cmp_1"}],
            "archive": null,
        });
        for (key, value) in extra.as_object().unwrap() {
            expected[key] = value.clone();
        }
        assert_eq!(to_value(&detail).unwrap(), expected);
    }

    #[test]
    fn a_held_artifact_reads_its_content_as_stored() {
        let held: HeldJobData = row(json!({
            "input": "{}", "subject_version_id": 3, "subject_content_hash": "ef".repeat(32),
            "content": r#"{"temperature":0.10}"#,
        }));
        // The body's text: the content's lexemes as stored, the members sorted.
        assert_eq!(
            to_value(&HeldArtifactView::new(&held).unwrap())
                .unwrap()
                .to_string(),
            format!(
                r#"{{"content":{{"temperature":0.10}},"contentHash":"{}","versionId":3}}"#,
                "ef".repeat(32)
            )
        );
    }
}
