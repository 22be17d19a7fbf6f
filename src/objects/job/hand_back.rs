//! A hand-back: the holder says it will not finish its claim (it is stopping, or restarted and
//! runs none of it). Decided by the protocol crate's `recovery::decide_release`: the job is
//! queued again (its first five hand-backs free) or ends at the attempt limit; the runner keeps
//! its state and credential (it spoke, so it is not presumed dead) and gets its capacity back.

use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::recovery::{decide_release, lease_expired, ReleaseDecision};
use edgerunner_protocol::state::{ClaimState, JobState};
use serde_json::json;

use super::commit::{event, AlarmChange, Answer, OpCtx, OpResult};
use super::snapshot::Snapshot;
use crate::objects::job::{HandedBack, JobRefusal, JobReply, LeaseUse};
use crate::store::lifecycle::{self, ClaimEnd, Freed};
use crate::store::writes::Writes;
use crate::store::{events, jobs};

/// A hand-back decided: the claim handed back, the protocol's decision, and the answer (whose
/// facts are also the event's detail).
#[derive(Debug)]
pub(super) struct HandBack<'a> {
    pub(super) claim: &'a jobs::ClaimRow,
    pub(super) decision: ReleaseDecision,
    pub(super) from: JobState,
    pub(super) answer: HandedBack,
}

/// What `runner` handing back `claim_id` at `now` does. Recovery owns a lapsed lease (its alarm
/// is due): one decision per lease.
pub(super) fn decide<'a>(
    snap: &'a Snapshot,
    runner: &str,
    claim_id: &str,
    now: i64,
) -> OpResult<HandBack<'a>> {
    let claim = snap.held_claim(runner, claim_id)?;
    let job = &snap.job;
    if lease_expired(job.lease_expires_at.unwrap_or(0), now) {
        return Err(JobRefusal::LeaseExpired(LeaseUse::HandBack));
    }
    let from = snap.state();
    let Some(decision) = decide_release(&snap.lease()?) else {
        return Err(JobRefusal::internal(format!(
            "job {} is {from} yet holds active claim {claim_id}",
            job.id
        )));
    };
    let next = decision.next_state();
    let free = matches!(decision, ReleaseDecision::Requeue { free: Some(_), .. });
    let counted = match decision {
        ReleaseDecision::Requeue { counted, .. } => Some(counted),
        ReleaseDecision::Exhausted { attempts } => Some(attempts),
        ReleaseDecision::Cancel => None,
    };
    let answer = HandedBack {
        job_id: job.id.clone(),
        claim_id: claim_id.to_owned(),
        state: next,
        decision: decision.code(),
        next_attempt: (next == JobState::Queued).then_some(claim.dispatch_attempt + 1),
        counted: !free,
        counted_attempts: counted,
    };
    Ok(HandBack {
        claim,
        decision,
        from,
        answer,
    })
}

/// Decides and writes a hand-back; `why` is the runner's reason.
pub(super) async fn run(ctx: &OpCtx<'_>, snap: Snapshot, claim_id: &str, why: &str) -> Answer {
    let runner = ctx.runner()?;
    let HandBack {
        claim,
        decision,
        from,
        answer,
    } = decide(&snap, runner, claim_id, ctx.now)?;
    let job = &snap.job;
    let next = answer.state;
    let actor = format!("runner:{runner}");
    let rationale = decision.reason();
    let detail = json!({
        "decision": answer.decision,
        "nextAttempt": answer.next_attempt,
        "counted": answer.counted,
        "countedAttempts": answer.counted_attempts,
    })
    .to_string();
    let mut handed_back = event(job, &actor, EventKind::JobReleased);
    handed_back.runner_id = Some(runner);
    handed_back.claim_id = Some(claim_id);
    handed_back.attempt = Some(claim.dispatch_attempt);
    handed_back.reason = Some(why);
    handed_back.detail_json = Some(&detail);
    handed_back.at = ctx.now;
    let end_reason = format!("handed back: {why}");
    let freed = Freed {
        job_id: &job.id,
        claim_id: &claim.id,
        attempt: claim.dispatch_attempt,
        end: ClaimEnd {
            state: ClaimState::Released,
            reason: &end_reason,
        },
        from,
        to: next,
        reason: &rationale,
        free_hand_back: !answer.counted,
    };
    let mut writes = Writes::default();
    lifecycle::free_claim(ctx.db, &mut writes, &freed, ctx.now)?;
    // Capacity comes back at once; the runner's state and credential are untouched (it said
    // what it is doing, it is not presumed dead).
    writes.one(
        "the runner's capacity",
        lifecycle::hand_back_runner(ctx.db, runner, ctx.now)?,
    );
    writes.any(events::insert(ctx.db, &handed_back)?);
    let mut ended;
    if next == JobState::Cancelled {
        ended = event(job, &actor, EventKind::JobCancelled);
        ended.attempt = Some(claim.dispatch_attempt);
        ended.reason = Some(&rationale);
        ended.at = ctx.now;
        writes.any(events::insert(ctx.db, &ended)?);
    }
    ctx.commit(&snap, true, writes).await?;
    ctx.alarm.set(AlarmChange::Clear);
    if next == JobState::Queued {
        ctx.touched.replace(Some(job.organization_id.clone()));
    }
    Ok(JobReply::HandedBack(answer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::job::fixtures::{held, requeued_after_loss, NOW};

    #[test]
    fn a_first_hand_back_queues_the_job_again_for_free() {
        let snap = held(JobState::Running);
        let handed = decide(&snap, "run_1", "job_1-a1", NOW).unwrap();
        assert_eq!(handed.from, JobState::Running);
        assert_eq!(handed.answer.state, JobState::Queued);
        assert_eq!(handed.answer.next_attempt, Some(2));
        assert!(!handed.answer.counted);
        assert_eq!(handed.answer.decision.as_str(), "RELEASED_REQUEUED");
    }

    #[test]
    fn hand_backs_past_the_free_ones_count_and_end_the_job_at_the_limit() {
        let mut snap = held(JobState::Running);
        // Five free hand-backs spent, two attempts counted: this one is the third counted.
        snap.job.released_attempts = 5;
        snap.job.dispatch_attempt = 8;
        snap.claims[0].dispatch_attempt = 8;
        let handed = decide(&snap, "run_1", "job_1-a1", NOW).unwrap();
        assert_eq!(handed.answer.state, JobState::Cancelled);
        assert!(handed.answer.counted);
        assert_eq!(handed.answer.next_attempt, None);
    }

    #[test]
    fn a_hand_back_after_the_lease_lapsed_is_left_to_recovery() {
        let snap = held(JobState::Running);
        let lease = snap.job.lease_expires_at.unwrap();
        assert!(matches!(
            decide(&snap, "run_1", "job_1-a1", lease),
            Err(JobRefusal::LeaseExpired(LeaseUse::HandBack))
        ));
    }

    #[test]
    fn only_the_holder_of_the_active_claim_may_hand_it_back() {
        assert!(matches!(
            decide(&held(JobState::Running), "run_2", "job_1-a1", NOW),
            Err(JobRefusal::NoSuchClaim)
        ));
        assert!(matches!(
            decide(&requeued_after_loss(), "run_1", "job_1-a1", NOW),
            Err(JobRefusal::ClaimNotActive { .. })
        ));
    }
}
