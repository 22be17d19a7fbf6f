//! A completion: the holder (or a runner whose attempt was superseded) reports the result of
//! an attempt. [`decide`] checks who sends it and which claim it names, and asks the protocol
//! crate's `reconcile` what it means: accepted (the job ends, its evidence goes into custody),
//! a duplicate of the accepted one, or a conflicting or stale one (recorded, up to the job's
//! cap, and refused with its decision).

use edgerunner_protocol::archive::ArchiveState;
use edgerunner_protocol::completion::{
    reconcile, AcceptedCompletion, ActiveClaim, Completion, Decision, Evidence, JobCompletionView,
    Outcome,
};
use edgerunner_protocol::envelope::{ClaimId, DispatchAttempt, OrganizationId, RunnerId};
use edgerunner_protocol::kind::{EventKind, EvidenceKind};
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::state::{ClaimState, JobState};
use edgerunner_protocol::time::UnixMillis;
use serde_json::{json, Value};

use super::commit::{event, AlarmChange, Answer, OpCtx, OpResult};
use super::snapshot::Snapshot;
use crate::archive::reads::Archived;
use crate::error::{ApiError, ApiResult};
use crate::objects::job::{CompletionDecision, JobRefusal, JobReply};
use crate::store::archive::StoredSummary;
use crate::store::counters;
use crate::store::lifecycle::{self, Attachment, Finish, NewCompletion};
use crate::store::writes::Writes;
use crate::store::{self, events, guards, jobs};

/// What a completion is, decided: the completion as parsed, the claim it names, what
/// reconciliation made of it, and what is written for it.
#[derive(Debug)]
pub(super) struct Decided<'a> {
    pub(super) completion: Completion,
    pub(super) claim: &'a jobs::ClaimRow,
    pub(super) attempt: i64,
    pub(super) outcome: Outcome,
    pub(super) rationale: String,
    /// The job's state the decision was made in.
    pub(super) state: JobState,
    /// What the decision writes.
    pub(super) verdict: Verdict,
}

/// What a decided completion writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The job ends in `job_state`: its completion, its claim's release and its evidence in
    /// custody, in one batch.
    Accept { job_state: JobState },
    /// A duplicate, conflicting or stale completion, recorded as `record` says and answered
    /// with its decision ([`Refused::reply`]).
    Refuse { refused: Refused, record: Record },
}

/// A completion reconciliation did not accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    Duplicate,
    Conflict,
    Stale,
}

impl Refused {
    /// The runner's answer: a duplicate of the accepted completion is answered like it; a
    /// conflict or a stale completion is refused with its decision.
    pub(super) fn reply(self, answer: CompletionDecision) -> Answer {
        match self {
            Self::Duplicate => Ok(JobReply::Completed(answer)),
            Self::Conflict => Err(JobRefusal::CompletionConflict(answer)),
            Self::Stale => Err(JobRefusal::CompletionStale(answer)),
        }
    }

    /// The event that records it when it is stored in full.
    fn event_kind(self) -> EventKind {
        match self {
            Self::Duplicate => EventKind::JobCompletionDuplicate,
            Self::Conflict => EventKind::JobCompletionConflict,
            Self::Stale => EventKind::JobCompletionStale,
        }
    }
}

impl Verdict {
    fn of(outcome: Outcome, job: &jobs::JobRow, stored_refusals: i64) -> Self {
        let refused = match outcome {
            Outcome::Accepted { job_state } => return Self::Accept { job_state },
            Outcome::Duplicate => Refused::Duplicate,
            Outcome::Conflict => Refused::Conflict,
            Outcome::Stale => Refused::Stale,
        };
        Self::Refuse {
            refused,
            record: Record::of(job, stored_refusals),
        }
    }
}

/// How a refused decision is recorded: in full (a completion row and its event) while the
/// job stores fewer than [`jobs::MAX_STORED_REFUSALS`], past that only counted on the job's
/// row (with the latest checksum), the first one counted marked by one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    Stored,
    FirstCounted,
    Counted,
}

impl Record {
    fn of(job: &jobs::JobRow, stored_refusals: i64) -> Self {
        if stored_refusals < jobs::MAX_STORED_REFUSALS {
            Self::Stored
        } else if job.unstored_decisions == 0 {
            Self::FirstCounted
        } else {
            Self::Counted
        }
    }
}

/// Why the schema refused an accepted completion's batch, when the reason is the completion's
/// evidence or stream rather than its job: the completion is refused with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CustodyRefusal {
    /// An evidence row is in another completion's custody already (or held by an archived
    /// job's run): refused with who holds it.
    Attached,
    /// An evidence row belongs to another evaluation run than the completion's.
    NotInRun,
    /// The completion's final stream checksum is not the stream's head.
    StreamNotClosed,
}

impl CustodyRefusal {
    /// The refusal the guard named `guard` stands for, if it is one of the completion's.
    pub(super) fn of(guard: Option<&str>) -> Option<Self> {
        match guard? {
            guards::UNIQUE_COMPLETION_EVIDENCE | guards::EVIDENCE_RUN_HELD_BY_ARCHIVED_JOB => {
                Some(Self::Attached)
            }
            guards::EVIDENCE_NOT_IN_COMPLETION_RUN => Some(Self::NotInRun),
            guards::COMPLETION_DOES_NOT_CLOSE_STREAM => Some(Self::StreamNotClosed),
            _ => None,
        }
    }
}

/// What `raw`, sent by `runner` at `now`, means for the job. Every stored decision names a real
/// claim of this job, attempt and runner; a completion naming anything else is refused outright
/// and not stored.
pub(super) fn decide<'a>(
    snap: &'a Snapshot,
    runner: &str,
    raw: &Value,
    now: i64,
) -> OpResult<Decided<'a>> {
    let completion = Completion::from_json(raw)?;
    let fields = completion.fields();
    let job = &snap.job;
    if fields.runner_id.as_str() != runner {
        return Err(JobRefusal::RunnerMismatch);
    }
    let attempt = i64::from(fields.dispatch_attempt.get());
    let Some(claim) = snap.claims.iter().find(|c| {
        c.id == fields.claim_id.as_str() && c.dispatch_attempt == attempt && c.runner_id == runner
    }) else {
        if snap.claims.iter().any(|c| c.runner_id == runner) {
            return Err(JobRefusal::ClaimMismatch);
        }
        return Err(JobRefusal::NoJobForRunner);
    };
    let attempt_of = |n: i64| {
        DispatchAttempt::new(u32::try_from(n).unwrap_or(0))
            .ok_or_else(|| ApiError::internal("attempt out of range"))
    };
    let view = JobCompletionView {
        now: UnixMillis::new(now).map_err(ApiError::internal)?,
        organization_id: OrganizationId::parse(&job.organization_id).map_err(ApiError::internal)?,
        state: snap.state(),
        dispatch_attempt: u32::try_from(job.dispatch_attempt).unwrap_or(0),
        input_hash: Sha256Hex::parse(&job.input_hash).map_err(ApiError::internal)?,
        active_claim: match snap.active_claim() {
            Some(active) => Some(ActiveClaim {
                claim_id: ClaimId::parse(&active.id).map_err(ApiError::internal)?,
                runner_id: RunnerId::parse(&active.runner_id).map_err(ApiError::internal)?,
                attempt: attempt_of(active.dispatch_attempt)?,
                stream_checksum: snap
                    .head
                    .first()
                    .map(|c| Sha256Hex::parse(&c.checksum))
                    .transpose()
                    .map_err(ApiError::internal)?,
                // The lease heartbeats and appends are checked against (NULL cannot be: the
                // schema holds a lease exactly while a claim is active).
                lease_expires_at: UnixMillis::new(job.lease_expires_at.unwrap_or(0))
                    .map_err(ApiError::internal)?,
            }),
            None => None,
        },
        accepted: match &snap.accepted {
            Some(a) => Some(AcceptedCompletion {
                attempt: attempt_of(a.dispatch_attempt)?,
                checksum: Sha256Hex::parse(&a.completion_checksum).map_err(ApiError::internal)?,
            }),
            None => None,
        },
    };
    let decision = reconcile(&view, &completion)?;
    let verdict = Verdict::of(decision.outcome, job, snap.stored_refusals);
    Ok(Decided {
        completion,
        claim,
        attempt,
        outcome: decision.outcome,
        rationale: decision.rationale,
        state: view.state,
        verdict,
    })
}

/// The evidence rows an accepted completion takes into custody, the evaluation run first.
pub(super) fn attachments(evidence: &Evidence) -> Vec<(EvidenceKind, String)> {
    let mut all = vec![(
        EvidenceKind::EvaluationRun,
        evidence.evaluation_run_id.key(),
    )];
    let lists = [
        (EvidenceKind::TestResult, &evidence.test_result_ids),
        (EvidenceKind::CostRecord, &evidence.cost_record_ids),
        (EvidenceKind::ModelCall, &evidence.model_call_ids),
    ];
    for (kind, ids) in lists {
        all.extend(ids.iter().map(|id| (kind, id.key())));
    }
    all.extend(
        evidence
            .trace_id
            .iter()
            .map(|id| (EvidenceKind::Trace, id.key())),
    );
    all
}

/// Decides a completion and writes what it decided.
pub(super) async fn run(ctx: &OpCtx<'_>, snap: Snapshot, raw: &Value) -> Answer {
    let runner = ctx.runner()?;
    // A finished job may be archived: then its rows are (or are being) pruned, and the
    // decision is made from its archive (one read more, for a completion after the finish).
    if snap.state().is_terminal() {
        let row = store::archive::row(ctx.db, &snap.job.id).await?;
        if let Some(summary) = row.and_then(|row| row.summary) {
            return archived(ctx, snap, &summary, raw).await;
        }
    }
    let decided = decide(&snap, runner, raw, ctx.now)?;
    let Decided {
        completion,
        claim,
        attempt,
        outcome,
        ..
    } = &decided;
    let (attempt, outcome) = (*attempt, *outcome);
    let fields = completion.fields();
    let job = &snap.job;
    let completion_id = crate::platform::random_id("cmp")?;
    let evidence_json = fields.evidence.to_json();
    let reported_costs = evidence_json
        .get("costs")
        .or_else(|| raw.get("costs"))
        .map(Value::to_string);
    let evaluation_run = fields.evidence.evaluation_run_id.key();
    let evidence_text = evidence_json.to_string();
    let raw_text = raw.to_string();
    let insert_completion = lifecycle::insert_completion(
        ctx.db,
        &NewCompletion {
            id: &completion_id,
            job_id: &job.id,
            organization_id: &job.organization_id,
            claim_id: &claim.id,
            runner_id: runner,
            attempt,
            decision: outcome.as_str(),
            rationale: &decided.rationale,
            checksum: completion.checksum().as_str(),
            status: fields.status.as_str(),
            input_hash: fields.input_hash.as_str(),
            result_hash: fields.result_hash.as_ref().map(Sha256Hex::as_str),
            final_stream_checksum: fields.final_stream_checksum.as_ref().map(Sha256Hex::as_str),
            evaluation_run: &evaluation_run,
            evidence_json: &evidence_text,
            reported_costs: reported_costs.as_deref(),
            completed_at: fields.completed_at.as_str(),
            received_at: ctx.now,
            raw: &raw_text,
        },
    )?;
    let actor = format!("runner:{runner}");
    let detail = json!({
        "completionId": completion_id,
        "decision": outcome.as_str(),
        "status": fields.status.as_str(),
        "completionChecksum": completion.checksum().as_str(),
    })
    .to_string();
    let kind = match decided.verdict {
        Verdict::Accept { .. } => EventKind::JobCompleted,
        Verdict::Refuse { refused, .. } => refused.event_kind(),
    };
    let mut recorded = event(job, &actor, kind);
    recorded.runner_id = Some(runner);
    recorded.claim_id = Some(&claim.id);
    recorded.attempt = Some(attempt);
    recorded.reason = Some(&decided.rationale);
    recorded.detail_json = Some(&detail);
    recorded.at = ctx.now;

    let job_state = match decided.verdict {
        Verdict::Accept { job_state } => job_state,
        Verdict::Refuse { refused, record } => {
            let mut statements = match record {
                Record::Stored => vec![insert_completion, events::insert(ctx.db, &recorded)?],
                Record::FirstCounted | Record::Counted => vec![jobs::count_unstored_decision(
                    ctx.db,
                    &job.id,
                    outcome.as_str(),
                    completion.checksum().as_str(),
                    ctx.now,
                )?],
            };
            if record == Record::FirstCounted {
                let detail = json!({
                    "stored": snap.stored_refusals,
                    "decision": outcome.as_str(),
                    "completionChecksum": completion.checksum().as_str(),
                })
                .to_string();
                let mut capped = event(job, &actor, EventKind::JobCompletionDecisionsCapped);
                capped.runner_id = Some(runner);
                capped.claim_id = Some(&claim.id);
                capped.attempt = Some(attempt);
                capped.reason = Some(
                    "the job holds as many refused completion decisions as it stores; later ones are counted on the job",
                );
                capped.detail_json = Some(&detail);
                capped.at = ctx.now;
                statements.push(events::insert(ctx.db, &capped)?);
            }
            statements.extend(count_completion(
                ctx,
                &job.organization_id,
                outcome.as_str(),
            )?);
            ctx.commit(&snap, false, statements).await?;
            // The runner's answer is the same however it was recorded, but names a completion
            // only when one is stored.
            let answer = CompletionDecision {
                decision: outcome.decision(),
                rationale: decided.rationale.clone(),
                completion_id: (record == Record::Stored).then_some(completion_id),
                job_state: decided.state,
            };
            return refused.reply(answer);
        }
    };

    // Accepted: decision, job finalization, claim release, capacity, terminal event and
    // evidence custody in one transaction. The completion row goes first, while the job still
    // holds the claim (its triggers check exactly that); evidence goes last (its key makes a
    // second attachment anywhere abort everything).
    recorded.kind = EventKind::JobCompleted;
    let mut writes = Writes::default();
    writes.any(insert_completion);
    let finish = Finish {
        job_id: &job.id,
        claim_id: &claim.id,
        runner,
        attempt,
        job_state,
    };
    lifecycle::finish(ctx.db, &mut writes, &finish, ctx.now)?;
    writes.any(events::insert(ctx.db, &recorded)?);
    let custody = attachments(&fields.evidence);
    let custody: Vec<Attachment<'_>> = custody
        .iter()
        .map(|(kind, id)| Attachment { kind: *kind, id })
        .collect();
    writes.extend(count_completion(
        ctx,
        &job.organization_id,
        job_state.as_str(),
    )?);
    for evidence in &custody {
        writes.any(lifecycle::attach_evidence(
            ctx.db,
            evidence,
            &completion_id,
            &job.id,
            &job.organization_id,
            ctx.now,
        )?);
    }
    if let Err(err) = ctx.commit(&snap, true, writes).await {
        // The guards that judge the evidence rather than the job: the completion is refused.
        return Err(match CustodyRefusal::of(err.guard()) {
            Some(CustodyRefusal::Attached) => JobRefusal::EvidenceAttached(
                lifecycle::evidence_holder(ctx.db, &job.organization_id, &custody).await?,
            ),
            Some(CustodyRefusal::NotInRun) => JobRefusal::EvidenceNotInRun,
            Some(CustodyRefusal::StreamNotClosed) => JobRefusal::StreamNotClosed,
            None => err.into(),
        });
    }
    ctx.alarm.set(AlarmChange::Clear);
    Ok(JobReply::Completed(CompletionDecision {
        decision: outcome.decision(),
        rationale: decided.rationale,
        completion_id: Some(completion_id),
        job_state,
    }))
}

/// A completion for a job whose archive is stored: decided from the archive's record (the
/// job's claims and accepted completion as they were archived) and counted on the job's row,
/// in jobs or archived_jobs (the job's one row that still takes writes), so that nothing is
/// added beside what the archive holds and nothing of it is lost. The runner's answer is the
/// one it would have had before.
async fn archived(
    ctx: &OpCtx<'_>,
    mut snap: Snapshot,
    summary: &StoredSummary,
    raw: &Value,
) -> Answer {
    let runner = ctx.runner()?;
    let record = Archived::open(ctx.env, summary)?.record().await?;
    snap.claims = record_claims(&record.detail.claims)?;
    snap.accepted = record_accepted(&record.detail.completions)?;
    snap.head.clear();
    let decided = decide(&snap, runner, raw, ctx.now)?;
    let (outcome, checksum) = (decided.outcome, decided.completion.checksum().clone());
    let Verdict::Refuse { refused, .. } = decided.verdict else {
        return Err(JobRefusal::internal(format!(
            "a completion of archived job {} was decided accepted",
            snap.job.id
        )));
    };
    let answer = CompletionDecision {
        decision: outcome.decision(),
        rationale: decided.rationale,
        completion_id: None,
        job_state: decided.state,
    };
    // Stored: the job's row is still in jobs; pruned: it moved to archived_jobs.
    let count_unstored = match summary.state {
        ArchiveState::Stored => jobs::count_unstored_decision,
        ArchiveState::Pruned => jobs::count_unstored_decision_archived,
    };
    let count = count_unstored(
        ctx.db,
        &snap.job.id,
        outcome.as_str(),
        checksum.as_str(),
        ctx.now,
    )?;
    let mut statements = vec![count];
    statements.extend(count_completion(
        ctx,
        &snap.job.organization_id,
        outcome.as_str(),
    )?);
    ctx.commit(&snap, false, statements).await?;
    refused.reply(answer)
}

/// The claims of an archived job as its record shows them (the detail's `JobClaim`s), with
/// what a completion's decision reads of them.
fn record_claims(claims: &[Value]) -> Result<Vec<jobs::ClaimRow>, JobRefusal> {
    let field = |claim: &Value, name: &str| -> Result<String, JobRefusal> {
        claim[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| JobRefusal::internal(format!("an archived claim without {name}")))
    };
    claims
        .iter()
        .map(|claim| {
            let state = field(claim, "state")?;
            Ok(jobs::ClaimRow {
                id: field(claim, "id")?,
                runner_id: field(claim, "runnerId")?,
                dispatch_attempt: claim["dispatchAttempt"]
                    .as_i64()
                    .ok_or_else(|| JobRefusal::internal("an archived claim without its attempt"))?,
                state: ClaimState::parse(&state).ok_or_else(|| {
                    JobRefusal::internal(format!("archived claim state {state:?}"))
                })?,
                key_id: field(claim, "keyId")?,
                issued_at: 0,
                expires_at: 0,
                lease_expires_at: 0,
                started_at: None,
                ended_at: None,
                end_reason: None,
                last_heartbeat_at: None,
            })
        })
        .collect()
}

/// The accepted completion of an archived job, from its record's completions.
fn record_accepted(completions: &[Value]) -> Result<Option<jobs::AcceptedRow>, JobRefusal> {
    let Some(accepted) = completions
        .iter()
        .find(|c| c["decision"] == Decision::Accepted.as_str())
    else {
        return Ok(None);
    };
    Ok(Some(jobs::AcceptedRow {
        dispatch_attempt: accepted["dispatchAttempt"]
            .as_i64()
            .ok_or_else(|| JobRefusal::internal("an archived completion without its attempt"))?,
        completion_checksum: accepted["completionChecksum"]
            .as_str()
            .ok_or_else(|| JobRefusal::internal("an archived completion without its checksum"))?
            .to_owned(),
    }))
}

/// The completion counter for `outcome` (an accepted completion's job state, or a refusal's
/// decision), for the end of the completion's batch.
fn count_completion(
    ctx: &OpCtx<'_>,
    org: &str,
    outcome: &str,
) -> ApiResult<Option<worker::D1PreparedStatement>> {
    counters::completion(outcome)
        .map(|counter| counters::add(ctx.db, org, counter, 1))
        .transpose()
}

#[cfg(test)]
mod tests {
    use edgerunner_protocol::completion::CompletionError;
    use edgerunner_protocol::state::{ClaimState, CompletionStatus};

    use super::*;
    use crate::objects::job::fixtures::{completion, held, requeued_after_loss, NOW};

    #[test]
    fn the_holders_completion_is_accepted_and_ends_the_job() {
        let snap = held(JobState::Running);
        let sent = completion(1, CompletionStatus::Succeeded);
        let decided = decide(&snap, "run_1", &sent.to_json(), NOW).unwrap();
        assert_eq!(
            decided.outcome,
            Outcome::Accepted {
                job_state: JobState::Succeeded
            }
        );
        assert_eq!(
            (decided.claim.id.as_str(), decided.attempt),
            ("job_1-a1", 1)
        );
        let failed = completion(1, CompletionStatus::Failed);
        let decided = decide(&snap, "run_1", &failed.to_json(), NOW).unwrap();
        assert_eq!(
            decided.outcome,
            Outcome::Accepted {
                job_state: JobState::Failed
            }
        );
    }

    #[test]
    fn a_completion_for_another_runner_is_refused_as_a_mismatch() {
        let sent = completion(1, CompletionStatus::Succeeded);
        let snap = held(JobState::Running);
        let refused = decide(&snap, "run_2", &sent.to_json(), NOW);
        assert!(
            matches!(refused, Err(JobRefusal::RunnerMismatch)),
            "{refused:?}"
        );
    }

    #[test]
    fn a_completion_naming_no_claim_of_its_runner_is_refused_and_not_stored() {
        // Its runner holds a claim of this job, but not this attempt's.
        let sent = completion(2, CompletionStatus::Succeeded);
        let snap = held(JobState::Running);
        let refused = decide(&snap, "run_1", &sent.to_json(), NOW);
        assert!(
            matches!(refused, Err(JobRefusal::ClaimMismatch)),
            "{refused:?}"
        );
        // A runner that never held a claim of this job learns nothing about it.
        let mut stranger = held(JobState::Running);
        stranger.claims[0].runner_id = "run_2".to_owned();
        let sent = completion(1, CompletionStatus::Succeeded);
        let refused = decide(&stranger, "run_1", &sent.to_json(), NOW);
        assert!(
            matches!(refused, Err(JobRefusal::NoJobForRunner)),
            "{refused:?}"
        );
    }

    #[test]
    fn a_completion_whose_checksum_does_not_cover_it_is_refused_by_the_protocol() {
        let mut sent = completion(1, CompletionStatus::Succeeded).to_json();
        sent["status"] = json!("failed");
        let snap = held(JobState::Running);
        let refused = decide(&snap, "run_1", &sent, NOW);
        assert!(
            matches!(
                refused,
                Err(JobRefusal::Completion(
                    CompletionError::ChecksumMismatch { .. }
                ))
            ),
            "{refused:?}"
        );
    }

    #[test]
    fn a_replay_of_the_accepted_completion_is_a_duplicate_and_another_one_a_conflict() {
        let sent = completion(1, CompletionStatus::Succeeded);
        let done = accepted(&sent);
        let decided = decide(&done, "run_1", &sent.to_json(), NOW).unwrap();
        assert_eq!(decided.outcome, Outcome::Duplicate);
        let other = completion(1, CompletionStatus::Failed);
        let decided = decide(&done, "run_1", &other.to_json(), NOW).unwrap();
        assert_eq!(decided.outcome, Outcome::Conflict);
    }

    #[test]
    fn a_completion_of_a_claim_lost_to_recovery_is_stale() {
        let sent = completion(1, CompletionStatus::Succeeded);
        let snap = requeued_after_loss();
        let decided = decide(&snap, "run_1", &sent.to_json(), NOW).unwrap();
        assert_eq!(decided.outcome, Outcome::Stale);
        assert_eq!(decided.state, JobState::Queued);
        assert!(matches!(
            decided.verdict,
            Verdict::Refuse {
                refused: Refused::Stale,
                ..
            }
        ));
    }

    /// `held(Succeeded)` after `run_1`'s attempt-1 completion `sent` was accepted.
    fn accepted(sent: &Completion) -> Snapshot {
        let mut done = held(JobState::Succeeded);
        done.job.active_claim_id = None;
        done.claims[0].state = ClaimState::Released;
        done.accepted = Some(jobs::AcceptedRow {
            dispatch_attempt: 1,
            completion_checksum: sent.checksum().as_str().to_owned(),
        });
        done
    }

    #[test]
    fn an_accepted_completion_writes_the_jobs_end() {
        let sent = completion(1, CompletionStatus::Succeeded);
        let snap = held(JobState::Running);
        let decided = decide(&snap, "run_1", &sent.to_json(), NOW).unwrap();
        assert_eq!(
            decided.verdict,
            Verdict::Accept {
                job_state: JobState::Succeeded
            }
        );
    }

    #[test]
    fn refusals_are_stored_in_full_up_to_the_cap_then_counted_the_first_one_marked() {
        let sent = completion(1, CompletionStatus::Failed);
        let mut done = accepted(&completion(1, CompletionStatus::Succeeded));
        let verdict =
            |snap: &Snapshot| decide(snap, "run_1", &sent.to_json(), NOW).unwrap().verdict;
        done.stored_refusals = jobs::MAX_STORED_REFUSALS - 1;
        let conflict = |record| Verdict::Refuse {
            refused: Refused::Conflict,
            record,
        };
        assert_eq!(verdict(&done), conflict(Record::Stored));
        done.stored_refusals = jobs::MAX_STORED_REFUSALS;
        assert_eq!(verdict(&done), conflict(Record::FirstCounted));
        done.job.unstored_decisions = 1;
        assert_eq!(verdict(&done), conflict(Record::Counted));
        // A stale completion is capped the same way.
        let mut lost = requeued_after_loss();
        lost.stored_refusals = jobs::MAX_STORED_REFUSALS;
        let stale = completion(1, CompletionStatus::Succeeded);
        let decided = decide(&lost, "run_1", &stale.to_json(), NOW).unwrap();
        assert_eq!(
            decided.verdict,
            Verdict::Refuse {
                refused: Refused::Stale,
                record: Record::FirstCounted
            }
        );
    }

    #[test]
    fn a_duplicate_is_answered_like_the_accepted_one_a_conflict_or_stale_one_is_refused() {
        let answer = |decision: Decision| CompletionDecision {
            decision,
            rationale: "why".to_owned(),
            completion_id: None,
            job_state: JobState::Succeeded,
        };
        assert!(matches!(
            Refused::Duplicate.reply(answer(Decision::Duplicate)),
            Ok(JobReply::Completed(CompletionDecision { decision, .. })) if decision == Decision::Duplicate
        ));
        assert!(matches!(
            Refused::Conflict.reply(answer(Decision::Conflict)),
            Err(JobRefusal::CompletionConflict(_))
        ));
        assert!(matches!(
            Refused::Stale.reply(answer(Decision::Stale)),
            Err(JobRefusal::CompletionStale(_))
        ));
        // Stored in full, each is recorded by its own event.
        assert_eq!(
            [Refused::Duplicate, Refused::Conflict, Refused::Stale].map(Refused::event_kind),
            [
                EventKind::JobCompletionDuplicate,
                EventKind::JobCompletionConflict,
                EventKind::JobCompletionStale
            ]
        );
    }

    #[test]
    fn the_evidence_and_stream_guards_refuse_the_completion_and_no_other_guard_does() {
        use CustodyRefusal::{Attached, NotInRun, StreamNotClosed};
        let cases = [
            (guards::UNIQUE_COMPLETION_EVIDENCE, Some(Attached)),
            (guards::EVIDENCE_RUN_HELD_BY_ARCHIVED_JOB, Some(Attached)),
            (guards::EVIDENCE_NOT_IN_COMPLETION_RUN, Some(NotInRun)),
            (
                guards::COMPLETION_DOES_NOT_CLOSE_STREAM,
                Some(StreamNotClosed),
            ),
            // A guard about the job (it moved under the decision) is the job's refusal.
            (guards::JOB_MOVED, None),
        ];
        for (guard, refusal) in cases {
            assert_eq!(CustodyRefusal::of(Some(guard)), refusal, "{guard}");
        }
        assert_eq!(CustodyRefusal::of(None), None);
    }

    #[test]
    fn custody_takes_the_run_first_then_every_evidence_row() {
        let sent = completion(1, CompletionStatus::Succeeded);
        let kinds: Vec<EvidenceKind> = attachments(&sent.fields().evidence)
            .iter()
            .map(|(kind, _)| *kind)
            .collect();
        assert_eq!(
            kinds,
            [
                EvidenceKind::EvaluationRun,
                EvidenceKind::TestResult,
                EvidenceKind::Trace
            ]
        );
    }
}
