//! A runner object's watch (`JobOp::Watch`): the runner's object granted attempt `attempt` of
//! the job, armed its own alarm at that lease, and asks at the lease's end whether this object
//! watches it itself. [`decide`] says whether it does from what the object knows of its job;
//! when it does not, the watch is recovery's look (`recover`), which loses a lapsed lease.

use super::snapshot::Snapshot;

/// Whether this object watches the lease the runner's object asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Watch {
    /// It does: it knows a later attempt, or that attempt's claim is over.
    Watching,
    /// It does if its alarm is set (every write it made for that attempt left the alarm at the
    /// lease, so only an alarm deleted or never set since leaves the lease unwatched).
    IfAlarmSet,
    /// It does not know the attempt (a fresh object, another job, an earlier attempt): the
    /// lease is looked at as recovery looks at it.
    Recover,
}

/// What the object that knows `known` (from its own last write, if any) does with a watch of
/// attempt `attempt` of job `job_id`.
pub(super) fn decide(known: Option<&Snapshot>, job_id: &str, attempt: i64) -> Watch {
    let Some(job) = known.map(|snap| &snap.job) else {
        return Watch::Recover;
    };
    if job.id != job_id || job.dispatch_attempt < attempt {
        return Watch::Recover;
    }
    if job.dispatch_attempt > attempt || job.active_claim_id.is_none() {
        return Watch::Watching;
    }
    Watch::IfAlarmSet
}

#[cfg(test)]
mod tests {
    use edgerunner_protocol::state::JobState;

    use super::*;
    use crate::objects::job::fixtures::{held, requeued_after_loss};

    #[test]
    fn an_object_that_knows_nothing_of_the_attempt_recovers() {
        assert_eq!(decide(None, "job_1", 1), Watch::Recover);
        let snap = held(JobState::Running);
        assert_eq!(decide(Some(&snap), "job_2", 1), Watch::Recover);
        // It knows attempt 1; the runner's object granted attempt 2 since.
        assert_eq!(decide(Some(&snap), "job_1", 2), Watch::Recover);
    }

    #[test]
    fn a_held_attempt_is_watched_while_the_objects_alarm_is_set() {
        let snap = held(JobState::Running);
        assert_eq!(decide(Some(&snap), "job_1", 1), Watch::IfAlarmSet);
    }

    #[test]
    fn an_attempt_that_is_over_or_superseded_is_watched() {
        // Attempt 1's claim was lost and the job queued again: nothing of it to lose.
        let lost = requeued_after_loss();
        assert_eq!(decide(Some(&lost), "job_1", 1), Watch::Watching);
        // The object knows attempt 2: attempt 1's lease is behind it.
        let mut later = held(JobState::Running);
        later.job.dispatch_attempt = 2;
        assert_eq!(decide(Some(&later), "job_1", 1), Watch::Watching);
    }
}
