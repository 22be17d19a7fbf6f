//! A job's writes from its grant on, each statement behind one typed function: the grant (the
//! runner's object writes it), a heartbeat's lease, a completion and its evidence custody, a cancel, and a claim that ends
//! without a completion (lost to recovery, or handed back), with the assertions every such
//! batch starts with. The job object decides; these only bind what it decided.

use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::kind::EvidenceKind;
use edgerunner_protocol::state::{ClaimState, JobState};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use worker::D1PreparedStatement;

use super::writes::Writes;
use super::{events, states, stmt, Db};
use crate::error::ApiResult;

/// The job's state, attempt and active claim an operation decided from, which its write
/// asserts ([`assert_job_as_known`]).
pub(crate) struct AsKnown<'a> {
    pub(crate) job_id: &'a str,
    pub(crate) state: JobState,
    pub(crate) attempt: i64,
    pub(crate) active_claim: Option<&'a str>,
}

/// The assertion that the job is as `known` at the commit, with its claim's lease live at
/// `live_at` when the decision relied on it: `job_moved` aborts the batch otherwise.
pub(crate) fn assert_job_as_known(
    db: &Db,
    known: &AsKnown<'_>,
    live_at: Option<i64>,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/assert_job_as_known.sql"),
        &[
            known.job_id.into(),
            known.state.as_str().into(),
            known.attempt.into(),
            known.active_claim.into(),
            live_at.into(),
        ],
    )
}

/// The assertion that claim `claim_id` is `runner`'s, in organization `org` (`job_moved`
/// otherwise): what a presumed first heartbeat relies on.
pub(crate) fn assert_claim_held(
    db: &Db,
    claim_id: &str,
    runner: &str,
    org: &str,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/assert_claim_held.sql"),
        &[claim_id.into(), runner.into(), org.into()],
    )
}

/// A grant of a queued job's next attempt, as the runner's object prepared it.
pub(crate) struct NewGrant<'a> {
    pub(crate) claim_id: &'a str,
    pub(crate) job_id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) runner_id: &'a str,
    pub(crate) attempt: i64,
    pub(crate) nonce: &'a str,
    pub(crate) key_id: &'a str,
    pub(crate) issued_at: i64,
    pub(crate) expires_at: i64,
    pub(crate) lease_expires_at: i64,
    /// The signed envelope, as signed.
    pub(crate) signed_job: &'a str,
    pub(crate) request_id: Option<&'a str>,
    pub(crate) now: i64,
}

/// A grant's two writes, in the order the schema needs: the claim row while the job is still
/// queued, then the job `queued` at attempt n − 1 → `claimed` at attempt n.
pub(crate) fn grant(db: &Db, writes: &mut Writes, g: &NewGrant<'_>) -> ApiResult<()> {
    writes.one(
        "the claim's insert",
        stmt(
            db,
            include_str!("queries/grant_claim.sql"),
            &[
                g.claim_id.into(),
                g.job_id.into(),
                g.organization_id.into(),
                g.runner_id.into(),
                g.attempt.into(),
                g.nonce.into(),
                g.key_id.into(),
                g.issued_at.into(),
                g.expires_at.into(),
                g.lease_expires_at.into(),
                g.signed_job.into(),
                g.request_id.into(),
            ],
        )?,
    );
    writes.one(
        "the job's grant",
        stmt(
            db,
            include_str!("queries/grant_job.sql"),
            &[
                g.job_id.into(),
                g.organization_id.into(),
                g.attempt.into(),
                g.claim_id.into(),
                g.lease_expires_at.into(),
                g.now.into(),
                JobState::Claimed.as_str().into(),
                JobState::Queued.as_str().into(),
            ],
        )?,
    );
    Ok(())
}

/// What a heartbeat writes: the lease it sets, on `runner`'s claim `claim_id` (attempt
/// `attempt`) of job `job_id`, moving the job `from` → `to`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Beat<'a> {
    pub(crate) org: &'a str,
    pub(crate) job_id: &'a str,
    pub(crate) claim_id: &'a str,
    pub(crate) attempt: i64,
    pub(crate) runner: &'a str,
    pub(crate) lease: i64,
    pub(crate) from: JobState,
    pub(crate) to: JobState,
}

/// A heartbeat's statements: the job's lease and state, the claim's lease and beat, the
/// runner's contact time (in that order), and on the first heartbeat (from `claimed`) the
/// `job.started` event.
pub(crate) fn heartbeat(db: &Db, writes: &mut Writes, beat: &Beat<'_>, now: i64) -> ApiResult<()> {
    writes.one(
        "the job's heartbeat",
        stmt(
            db,
            include_str!("queries/heartbeat_job.sql"),
            &[
                beat.job_id.into(),
                beat.claim_id.into(),
                beat.attempt.into(),
                beat.lease.into(),
                beat.to.as_str().into(),
                now.into(),
                beat.from.as_str().into(),
            ],
        )?,
    );
    writes.one(
        "the claim's heartbeat",
        stmt(
            db,
            include_str!("queries/heartbeat_claim.sql"),
            &[
                beat.claim_id.into(),
                beat.lease.into(),
                now.into(),
                ClaimState::Active.as_str().into(),
            ],
        )?,
    );
    writes.any(stmt(
        db,
        include_str!("queries/heartbeat_runner.sql"),
        &[beat.runner.into(), now.into()],
    )?);
    if beat.from == JobState::Claimed {
        let actor = format!("runner:{}", beat.runner);
        writes.any(events::insert(
            db,
            &events::NewEvent {
                organization_id: beat.org,
                job_id: Some(beat.job_id),
                runner_id: Some(beat.runner),
                claim_id: Some(beat.claim_id),
                actor: &actor,
                kind: EventKind::JobStarted,
                attempt: Some(beat.attempt),
                reason: None,
                detail_json: None,
                at: now,
            },
        )?);
    }
    Ok(())
}

/// A completion decision as stored (accepted, duplicate, conflict or stale).
pub(crate) struct NewCompletion<'a> {
    pub(crate) id: &'a str,
    pub(crate) job_id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) claim_id: &'a str,
    pub(crate) runner_id: &'a str,
    pub(crate) attempt: i64,
    pub(crate) decision: &'a str,
    pub(crate) rationale: &'a str,
    pub(crate) checksum: &'a str,
    pub(crate) status: &'a str,
    pub(crate) input_hash: &'a str,
    pub(crate) result_hash: Option<&'a str>,
    pub(crate) final_stream_checksum: Option<&'a str>,
    pub(crate) evaluation_run: &'a str,
    pub(crate) evidence_json: &'a str,
    pub(crate) reported_costs: Option<&'a str>,
    pub(crate) completed_at: &'a str,
    pub(crate) received_at: i64,
    /// The completion as the runner sent it.
    pub(crate) raw: &'a str,
}

pub(crate) fn insert_completion(db: &Db, c: &NewCompletion<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/completion_insert.sql"),
        &[
            c.id.into(),
            c.job_id.into(),
            c.organization_id.into(),
            c.claim_id.into(),
            c.runner_id.into(),
            c.attempt.into(),
            c.decision.into(),
            c.rationale.into(),
            c.checksum.into(),
            c.status.into(),
            c.input_hash.into(),
            c.result_hash.into(),
            c.final_stream_checksum.into(),
            Some(c.evaluation_run).into(),
            c.evidence_json.into(),
            c.reported_costs.into(),
            c.completed_at.into(),
            c.received_at.into(),
            c.raw.into(),
        ],
    )
}

/// An accepted completion's end of its job: `runner`'s claim `claim_id` (attempt `attempt`)
/// of job `job_id`, which finishes as `job_state`.
pub(crate) struct Finish<'a> {
    pub(crate) job_id: &'a str,
    pub(crate) claim_id: &'a str,
    pub(crate) runner: &'a str,
    pub(crate) attempt: i64,
    pub(crate) job_state: JobState,
}

/// An accepted completion's three writes, one row each: the job finished as `job_state`
/// (guarded by its active claim at `attempt`), the claim ended, the runner's capacity back.
pub(crate) fn finish(
    db: &Db,
    writes: &mut Writes,
    &Finish {
        job_id,
        claim_id,
        runner,
        attempt,
        job_state,
    }: &Finish<'_>,
    now: i64,
) -> ApiResult<()> {
    let held = states::held_job_states();
    writes.one(
        "the job's finish",
        stmt(
            db,
            include_str!("queries/complete_job.sql"),
            &[
                job_id.into(),
                claim_id.into(),
                attempt.into(),
                job_state.as_str().into(),
                now.into(),
                held.as_str().into(),
            ],
        )?,
    );
    writes.one(
        "the claim's end",
        stmt(
            db,
            include_str!("queries/complete_claim.sql"),
            &[
                claim_id.into(),
                now.into(),
                ClaimState::Released.as_str().into(),
                ClaimState::Active.as_str().into(),
            ],
        )?,
    );
    writes.one(
        "the runner's capacity",
        stmt(
            db,
            include_str!("queries/complete_runner.sql"),
            &[runner.into(), now.into()],
        )?,
    );
    Ok(())
}

/// One evidence row (`kind`, `id`) put in the custody of completion `completion_id`: its key
/// makes a second attachment anywhere abort the whole batch.
pub(crate) struct Attachment<'a> {
    pub(crate) kind: EvidenceKind,
    pub(crate) id: &'a str,
}

pub(crate) fn attach_evidence(
    db: &Db,
    evidence: &Attachment<'_>,
    completion_id: &str,
    job_id: &str,
    org: &str,
    now: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/completion_evidence_insert.sql"),
        &[
            evidence.kind.as_str().into(),
            evidence.id.into(),
            completion_id.into(),
            job_id.into(),
            org.into(),
            now.into(),
        ],
    )
}

/// The accepted completion that already holds an evidence row, as D1 names it.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct EvidenceHolder {
    pub(crate) evidence_kind: EvidenceKind,
    pub(crate) evidence_id: String,
    pub(crate) job_id: String,
}

/// Which accepted completion of organization `org` holds one of `evidence` already (the
/// evaluation run first), if any.
pub(crate) async fn evidence_holder(
    db: &Db,
    org: &str,
    evidence: &[Attachment<'_>],
) -> ApiResult<Option<EvidenceHolder>> {
    let wanted = Value::Array(
        evidence
            .iter()
            .map(|e| json!([e.kind.as_str(), e.id]))
            .collect(),
    )
    .to_string();
    let holders: Vec<EvidenceHolder> = super::all(
        db,
        include_str!("queries/evidence_holder.sql"),
        &[org.into(), wanted.as_str().into()],
    )
    .await?;
    Ok(holders.into_iter().next())
}

/// A cancel of job `job_id` (of `org`) from `from`: a job holding no claim ends at once
/// (`to` is cancelled), one holding a claim is asked to stop (`to` is cancel_requested).
pub(crate) fn cancel_job(
    db: &Db,
    job_id: &str,
    org: &str,
    (from, to): (JobState, JobState),
    reason: &str,
    now: i64,
) -> ApiResult<D1PreparedStatement> {
    let sql = if to == JobState::Cancelled {
        include_str!("queries/cancel_queued_job.sql")
    } else {
        include_str!("queries/cancel_request_job.sql")
    };
    stmt(
        db,
        sql,
        &[
            job_id.into(),
            org.into(),
            from.as_str().into(),
            reason.into(),
            now.into(),
            to.as_str().into(),
        ],
    )
}

/// How a claim ends without a completion: the claim's state and end reason.
pub(crate) struct ClaimEnd<'a> {
    pub(crate) state: ClaimState,
    pub(crate) reason: &'a str,
}

/// A claim that ends without a completion, and its job off it: the two writes, in this order.
pub(crate) struct Freed<'a> {
    pub(crate) job_id: &'a str,
    pub(crate) claim_id: &'a str,
    pub(crate) attempt: i64,
    pub(crate) end: ClaimEnd<'a>,
    /// The job goes `from` → `to` (queued, or cancelled with `reason` unless a cancel reason is
    /// already recorded).
    pub(crate) from: JobState,
    pub(crate) to: JobState,
    pub(crate) reason: &'a str,
    /// A hand-back that does not count against the job's attempts.
    pub(crate) free_hand_back: bool,
}

pub(crate) fn free_claim(
    db: &Db,
    writes: &mut Writes,
    freed: &Freed<'_>,
    now: i64,
) -> ApiResult<()> {
    let finished_at = (freed.to == JobState::Cancelled).then_some(now);
    writes.one(
        "the claim's end",
        stmt(
            db,
            include_str!("queries/end_claim.sql"),
            &[
                freed.claim_id.into(),
                now.into(),
                freed.end.state.as_str().into(),
                freed.end.reason.into(),
                ClaimState::Active.as_str().into(),
            ],
        )?,
    );
    writes.one(
        "the job's release",
        stmt(
            db,
            include_str!("queries/free_job.sql"),
            &[
                freed.job_id.into(),
                freed.claim_id.into(),
                freed.attempt.into(),
                freed.from.as_str().into(),
                freed.to.as_str().into(),
                now.into(),
                finished_at.into(),
                freed.reason.into(),
                i64::from(freed.free_hand_back).into(),
                JobState::Cancelled.as_str().into(),
            ],
        )?,
    );
    Ok(())
}

/// A hand-back gives runner `runner` its capacity back; its state and credential stay.
pub(crate) fn hand_back_runner(db: &Db, runner: &str, now: i64) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/hand_back_runner.sql"),
        &[runner.into(), now.into()],
    )
}
