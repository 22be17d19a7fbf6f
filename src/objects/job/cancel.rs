//! A cancel from an operator: a queued job ends at once; a held one is asked to stop (its
//! holder hears so on its next heartbeat and completes it as cancelled).

use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::state::{JobInput, JobState};

use super::commit::{event, Answer, OpCtx, OpResult};
use super::snapshot::Snapshot;
use crate::objects::job::{Cancelled, JobRefusal, JobReply};
use crate::store::writes::Writes;
use crate::store::{events, lifecycle};

/// What a cancel of the job by organization `org` does: the move `from → to`, which is no
/// move at all when the job is already cancelling.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Cancel {
    pub(super) from: JobState,
    pub(super) to: JobState,
}

pub(super) fn decide(snap: &Snapshot, org: &str) -> OpResult<Cancel> {
    if snap.job.organization_id != org {
        return Err(JobRefusal::NoSuchJob);
    }
    let from = snap.state();
    if from.is_terminal() {
        return Err(JobRefusal::JobFinished(from));
    }
    Ok(Cancel {
        from,
        to: from.transition(JobInput::Cancel)?,
    })
}

/// Decides and writes a cancel.
pub(super) async fn run(
    ctx: &OpCtx<'_>,
    snap: Snapshot,
    org: &str,
    actor: &str,
    reason: &str,
) -> Answer {
    let Cancel { from, to } = decide(&snap, org)?;
    let job = &snap.job;
    let cancelled = |state| {
        JobReply::Cancelled(Cancelled {
            job_id: job.id.clone(),
            state,
        })
    };
    if to == from {
        return Ok(cancelled(from));
    }
    let kind = match to {
        JobState::Cancelled => EventKind::JobCancelled,
        _ => EventKind::JobCancelRequested,
    };
    let mut recorded = event(job, actor, kind);
    recorded.reason = Some(reason);
    recorded.attempt = Some(job.dispatch_attempt);
    recorded.at = ctx.now;
    let mut writes = Writes::default();
    writes.one(
        "the job's cancellation",
        lifecycle::cancel_job(ctx.db, &job.id, org, (from, to), reason, ctx.now)?,
    );
    writes.any(events::insert_if_changed(ctx.db, &recorded)?);
    ctx.commit(&snap, false, writes).await?;
    Ok(cancelled(to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::job::fixtures::{held, queued};

    #[test]
    fn a_queued_job_ends_at_once_and_a_held_one_is_asked_to_stop() {
        assert_eq!(
            decide(&queued(), "org_1").unwrap(),
            Cancel {
                from: JobState::Queued,
                to: JobState::Cancelled
            }
        );
        for state in [JobState::Claimed, JobState::Running] {
            assert_eq!(
                decide(&held(state), "org_1").unwrap(),
                Cancel {
                    from: state,
                    to: JobState::CancelRequested
                }
            );
        }
        // Asked again: no move, answered as it stands.
        let again = decide(&held(JobState::CancelRequested), "org_1").unwrap();
        assert_eq!(again.from, again.to);
    }

    #[test]
    fn a_job_of_another_organization_does_not_exist_for_the_caller() {
        assert!(matches!(
            decide(&queued(), "org_2"),
            Err(JobRefusal::NoSuchJob)
        ));
    }

    #[test]
    fn a_finished_job_cannot_be_cancelled() {
        for state in [JobState::Succeeded, JobState::Failed, JobState::Cancelled] {
            let mut done = queued();
            done.job.state = state;
            assert!(
                matches!(decide(&done, "org_1"), Err(JobRefusal::JobFinished(s)) if s == state),
                "{state}"
            );
        }
    }
}
