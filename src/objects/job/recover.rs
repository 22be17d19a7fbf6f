//! Recovery's look at the job's lease (its alarm, a runner object's watch, the cron pass and an
//! admin's reap all end here): the protocol crate's `recovery::decide` applied. A lapsed lease
//! loses its claim and its runner, and the job is queued again for its next attempt (or ends
//! at the attempt limit) in one guarded batch, so racing callers produce one loss.

use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::recovery::{
    decide as decide_recovery, next_check_at_ms, RecoveryDecision,
};
use edgerunner_protocol::state::{ClaimState, JobState};
use serde_json::json;

use super::commit::{event, AlarmChange, Answer, OpCtx, OpResult};
use super::snapshot::Snapshot;
use crate::objects::job::{JobReply, LostClaim, Recovered};
use crate::platform::rfc3339;
use crate::store::counters::{self, Counter};
use crate::store::lifecycle::{self, ClaimEnd, Freed};
use crate::store::writes::Writes;
use crate::store::{events, jobs, runners};

/// What recovery does with the job at `now`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Recovery<'a> {
    /// Nothing to lose: no claim, or its lease is alive; with the time the alarm should next
    /// look, when the lease is alive (a heartbeat moved it past this look).
    Nothing {
        state: JobState,
        look_again_at: Option<i64>,
    },
    /// The active claim's lease lapsed: the claim and its runner are lost (see [`Loss`]).
    Lose(Loss<'a>),
}

/// A lapsed lease's loss, and what it leads to.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Loss<'a> {
    pub(super) claim: &'a jobs::ClaimRow,
    pub(super) decision: RecoveryDecision,
    pub(super) from: JobState,
    /// Queued again for the next attempt, or cancelled (at the attempt limit, or with its
    /// cancellation pending).
    pub(super) next: JobState,
    /// The event after the lease's loss: the job requeued or cancelled.
    pub(super) then: EventKind,
    /// The attempt the job is queued for, if it is.
    pub(super) next_attempt: Option<u32>,
    /// The attempts that count against the limit, this one included (none for a pending
    /// cancellation).
    pub(super) counted: Option<u32>,
    /// What the loss led to, counted beside the lost lease: a requeue, or attempts exhausted.
    pub(super) after: Option<Counter>,
}

pub(super) fn decide(snap: &Snapshot, now: i64) -> OpResult<Recovery<'_>> {
    let state = snap.state();
    let lease = snap.lease()?;
    let decision = decide_recovery(&lease, now);
    let Some(claim) = snap.active_claim() else {
        // No claim to lose: a job that is already queued or finished needs nothing. (A job left
        // `lost` cannot exist: loss and requeue commit in one batch.)
        return Ok(Recovery::Nothing {
            state,
            look_again_at: None,
        });
    };
    let (next, then, next_attempt, counted, after) = match decision {
        // The lease is alive (a heartbeat moved it past this alarm, or the move after that
        // heartbeat's commit never happened): watch its current expiry instead.
        RecoveryDecision::Nothing => {
            return Ok(Recovery::Nothing {
                state,
                look_again_at: next_check_at_ms(&lease),
            })
        }
        RecoveryDecision::Requeue {
            next_attempt,
            counted,
        } => (
            JobState::Queued,
            EventKind::JobRequeued,
            Some(next_attempt),
            Some(counted),
            Some(Counter::Requeues),
        ),
        RecoveryDecision::Exhausted { attempts } => (
            JobState::Cancelled,
            EventKind::JobCancelled,
            None,
            Some(attempts),
            Some(Counter::AttemptsExhausted),
        ),
        RecoveryDecision::Cancel => (
            JobState::Cancelled,
            EventKind::JobCancelled,
            None,
            None,
            None,
        ),
    };
    Ok(Recovery::Lose(Loss {
        claim,
        decision,
        from: state,
        next,
        then,
        next_attempt,
        counted,
        after,
    }))
}

/// Decides recovery and writes the loss it decided.
pub(super) async fn run(ctx: &OpCtx<'_>, snap: Snapshot, actor: &str) -> Answer {
    let job = &snap.job;
    let loss = match decide(&snap, ctx.now)? {
        Recovery::Nothing {
            state,
            look_again_at,
        } => {
            if let Some(at) = look_again_at {
                ctx.alarm.set(AlarmChange::At(at));
            }
            return Ok(JobReply::Recovered(Recovered {
                job_id: job.id.clone(),
                state,
                lost: None,
            }));
        }
        Recovery::Lose(loss) => loss,
    };
    let Loss {
        claim,
        decision,
        from,
        next,
        ..
    } = loss;
    let reason = decision.reason();
    let mut lost = event(job, actor, EventKind::JobLeaseLost);
    lost.runner_id = Some(&claim.runner_id);
    lost.claim_id = Some(&claim.id);
    lost.attempt = Some(claim.dispatch_attempt);
    let lapse = lapse_reason(claim, job.lease_expires_at);
    lost.reason = Some(&lapse);
    lost.at = ctx.now;
    let detail = json!({
        "decision": decision.code(),
        "nextAttempt": loss.next_attempt,
        "countedAttempts": loss.counted,
    })
    .to_string();
    let mut then = event(job, actor, loss.then);
    then.attempt = Some(claim.dispatch_attempt);
    then.reason = Some(&reason);
    then.detail_json = Some(&detail);
    then.at = ctx.now;
    let freed = Freed {
        job_id: &job.id,
        claim_id: &claim.id,
        attempt: claim.dispatch_attempt,
        end: ClaimEnd {
            state: ClaimState::Lost,
            reason: "lease expired",
        },
        from,
        to: next,
        reason: &reason,
        free_hand_back: false,
    };
    let mut writes = Writes::default();
    lifecycle::free_claim(ctx.db, &mut writes, &freed, ctx.now)?;
    // The runner takes the protocol's lease_lost move from whatever state it is in now: an
    // active one is marked lost and its credential generation moves on (its next call gets
    // 401, the SDK re-exchanges at once, and that fresh session is what brings it back to
    // active); a draining, lost or revoked one keeps its state.
    writes.one(
        "the runner's loss",
        runners::recover(
            ctx.db,
            &claim.runner_id,
            ctx.now,
            &format!("job {}: {lapse}", job.id),
        )?,
    );
    writes.extend([
        events::insert(ctx.db, &lost)?,
        events::insert(ctx.db, &then)?,
        counters::add(ctx.db, &job.organization_id, Counter::LeasesLost, 1)?,
    ]);
    if let Some(counter) = loss.after {
        writes.any(counters::add(ctx.db, &job.organization_id, counter, 1)?);
    }
    ctx.commit(&snap, false, writes).await?;
    ctx.alarm.set(AlarmChange::Clear);
    // The job is queued again (or finished), and its runner lost: claims must read D1.
    ctx.touched.replace(Some(job.organization_id.clone()));
    Ok(JobReply::Recovered(Recovered {
        job_id: job.id.clone(),
        state: next,
        lost: Some(LostClaim {
            claim_id: claim.id.clone(),
            runner_id: claim.runner_id.clone(),
            decision: decision.code(),
        }),
    }))
}

/// What a lapsed lease says happened: when the claim last heartbeated, or that it never did.
fn lapse_reason(claim: &jobs::ClaimRow, lease: Option<i64>) -> String {
    let at = |ms: i64| rfc3339(ms).unwrap_or_else(|| format!("{ms} ms"));
    let expired = lease.map_or_else(
        || "its lease".to_owned(),
        |ms| format!("its lease ({})", at(ms)),
    );
    match (claim.last_heartbeat_at, claim.started_at) {
        (Some(last), _) => format!(
            "{expired} expired with no heartbeat since {} (attempt {})",
            at(last),
            claim.dispatch_attempt
        ),
        (None, Some(first)) => format!(
            "{expired} expired; heartbeats were accepted from {} (the last one's time was not recorded)",
            at(first)
        ),
        (None, None) => format!(
            "{expired} expired before any heartbeat (claimed {}, attempt {})",
            at(claim.issued_at),
            claim.dispatch_attempt
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::job::fixtures::{held, queued, NOW};

    #[test]
    fn a_live_lease_is_left_alone_and_looked_at_again_at_its_end() {
        let snap = held(JobState::Running);
        let lease = snap.job.lease_expires_at.unwrap();
        assert_eq!(
            decide(&snap, lease - 1).unwrap(),
            Recovery::Nothing {
                state: JobState::Running,
                look_again_at: Some(lease)
            }
        );
        // A job that holds no claim has nothing to lose.
        assert_eq!(
            decide(&queued(), NOW).unwrap(),
            Recovery::Nothing {
                state: JobState::Queued,
                look_again_at: None
            }
        );
    }

    #[test]
    fn a_lapsed_lease_loses_its_claim_and_queues_the_job_again() {
        let snap = held(JobState::Running);
        let lease = snap.job.lease_expires_at.unwrap();
        let Recovery::Lose(loss) = decide(&snap, lease).unwrap() else {
            panic!("a lapsed lease was not lost");
        };
        assert_eq!(loss.claim.id, "job_1-a1");
        assert_eq!(
            (loss.from, loss.next),
            (JobState::Running, JobState::Queued)
        );
        assert_eq!(loss.decision.code().as_str(), "LEASE_LOST_REQUEUED");
        assert_eq!(loss.then, EventKind::JobRequeued);
        assert_eq!((loss.next_attempt, loss.counted), (Some(2), Some(1)));
        assert_eq!(loss.after, Some(Counter::Requeues));
    }

    #[test]
    fn a_lapsed_lease_at_the_last_attempt_ends_the_job() {
        let mut snap = held(JobState::Running);
        snap.job.dispatch_attempt = 3;
        snap.claims[0].dispatch_attempt = 3;
        let lease = snap.job.lease_expires_at.unwrap();
        let Recovery::Lose(loss) = decide(&snap, lease).unwrap() else {
            panic!("a lapsed lease was not lost");
        };
        assert_eq!(loss.next, JobState::Cancelled);
        assert!(matches!(
            loss.decision,
            RecoveryDecision::Exhausted { attempts: 3 }
        ));
        assert_eq!(loss.then, EventKind::JobCancelled);
        assert_eq!((loss.next_attempt, loss.counted), (None, Some(3)));
        assert_eq!(loss.after, Some(Counter::AttemptsExhausted));
    }

    #[test]
    fn a_lapsed_lease_with_cancellation_pending_ends_the_job_and_counts_no_attempt() {
        let snap = held(JobState::CancelRequested);
        let lease = snap.job.lease_expires_at.unwrap();
        let Recovery::Lose(loss) = decide(&snap, lease).unwrap() else {
            panic!("a lapsed lease was not lost");
        };
        assert_eq!(loss.decision, RecoveryDecision::Cancel);
        assert_eq!(
            (loss.from, loss.next, loss.then),
            (
                JobState::CancelRequested,
                JobState::Cancelled,
                EventKind::JobCancelled
            )
        );
        assert_eq!(
            (loss.next_attempt, loss.counted, loss.after),
            (None, None, None)
        );
    }

    #[test]
    fn a_lapse_says_when_the_claim_last_heartbeated_or_that_it_never_did() {
        let snap = held(JobState::Running);
        let mut claim = snap.claims[0].clone();
        let lease = Some(claim.lease_expires_at);
        claim.last_heartbeat_at = None;
        claim.started_at = None;
        assert!(lapse_reason(&claim, lease).contains("expired before any heartbeat"));
        claim.last_heartbeat_at = Some(NOW);
        assert!(lapse_reason(&claim, lease).contains("with no heartbeat since"));
    }
}
