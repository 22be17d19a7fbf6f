//! Retention: how long an organization keeps its finished jobs, and the steps that delete one
//! once that time is over.
//!
//! Each organization keeps its finished jobs [`RetentionDays`] days after their finish (90 by
//! default, 1 to 400, as GitHub keeps logs and artifacts). A job past that cut is deleted by
//! the retention pass in two steps, each recorded on the job row (`jobs.expiring_at`,
//! migration 0011), so that a pass that stops anywhere is finished by the next:
//!
//! ```text
//!   archived (pruned) ──expire──▶ expiring ──delete──▶ (gone)
//! ```
//!
//! - **Expire.** The job row is marked: from then on every read answers `404`, as for a job
//!   that never existed, and a hold is refused.
//! - **Delete.** Its R2 objects (bundle and record) are deleted, then in one D1 batch its
//!   evidence (the evaluation run its accepted completion took into custody and the run's
//!   rows), its custody rows and its job row; the organization's count of deleted jobs grows by
//!   one in that same batch. Deleting an object that is gone already is no error, so a step run
//!   twice changes nothing the second time.
//!
//! Only an archived job (stage `pruned`: no claim, chunk, completion or event left in D1) is
//! deleted; a finished job not yet archived waits for the archive pass first. A held job (an
//! admin's hold, e.g. for an audit) is never expired while held. [`decide`] says which step a
//! job needs from its row and the cut alone. Nothing here performs I/O or reads a clock.

use crate::archive::ArchiveState;
use crate::state::JobState;

/// Days in milliseconds.
const MILLIS_PER_DAY: i64 = 86_400_000;

/// How many days an organization keeps its finished jobs: 1 to 400, 90 by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RetentionDays(u16);

impl RetentionDays {
    /// The fewest days an organization may keep its jobs.
    pub const MIN: u16 = 1;
    /// The most days an organization may keep its jobs.
    pub const MAX: u16 = 400;
    /// What an organization keeps until it says otherwise.
    pub const DEFAULT: RetentionDays = RetentionDays(90);

    /// `days`, when it is within [`Self::MIN`]..=[`Self::MAX`].
    pub fn new(days: i64) -> Result<Self, RetentionDaysError> {
        match u16::try_from(days) {
            Ok(days) if (Self::MIN..=Self::MAX).contains(&days) => Ok(Self(days)),
            _ => Err(RetentionDaysError::OutOfRange),
        }
    }

    /// The value of a request's `retentionDays`: a whole number of days in range. A fraction,
    /// a string, a boolean or null is refused as not a whole number; a number out of range as
    /// such.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, RetentionDaysError> {
        let serde_json::Value::Number(number) = value else {
            return Err(RetentionDaysError::NotAWholeNumber);
        };
        if let Some(days) = number.as_i64() {
            return Self::new(days);
        }
        if number.as_u64().is_some() {
            return Err(RetentionDaysError::OutOfRange);
        }
        // A float (1.5, or 90.0 written with a point) is not a whole number of days.
        Err(RetentionDaysError::NotAWholeNumber)
    }

    pub fn get(self) -> u16 {
        self.0
    }

    /// The retention cut at `now_ms`: a job that finished before it is due for deletion.
    pub fn cut(self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(i64::from(self.0) * MILLIS_PER_DAY)
    }
}

impl Default for RetentionDays {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a `retentionDays` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionDaysError {
    /// Not a JSON number without a fraction.
    NotAWholeNumber,
    /// Below [`RetentionDays::MIN`] or above [`RetentionDays::MAX`].
    OutOfRange,
}

impl core::fmt::Display for RetentionDaysError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotAWholeNumber => write!(f, "retentionDays must be a whole number of days"),
            Self::OutOfRange => write!(
                f,
                "retentionDays must be from {} to {}",
                RetentionDays::MIN,
                RetentionDays::MAX
            ),
        }
    }
}

/// What [`decide`] reads of a job row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionFacts {
    pub state: JobState,
    pub finished_at_ms: Option<i64>,
    pub archive: Option<ArchiveState>,
    /// An admin holds the job (`jobs.held_at` is set).
    pub held: bool,
    /// The job was marked for deletion (`jobs.expiring_at` is set).
    pub expiring: bool,
}

/// The step a job needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionStep {
    /// Nothing: live, not archived yet, held, or finished at or after the cut.
    Keep,
    /// Mark the job row expiring.
    Expire,
    /// Delete its R2 objects, then its rows.
    Delete,
}

/// The step `job` needs, given the organization's retention `cut` (see [`RetentionDays::cut`]).
/// A job already expiring is deleted whatever else holds: a hold is refused once it expires,
/// and the cut only moves forward. Pure and total.
pub fn decide(job: &RetentionFacts, cut_ms: i64) -> RetentionStep {
    if job.expiring {
        return RetentionStep::Delete;
    }
    let past_cut = job.finished_at_ms.is_some_and(|finished| finished < cut_ms);
    if job.state.is_terminal() && job.archive == Some(ArchiveState::Pruned) && !job.held && past_cut
    {
        RetentionStep::Expire
    } else {
        RetentionStep::Keep
    }
}

/// Whether an admin may put `job` on hold (or release it): only a finished job that is not
/// expiring. A live job is not retained yet; an expiring one is already gone to every reader.
pub fn may_hold(job: &RetentionFacts) -> bool {
    job.state.is_terminal() && !job.expiring
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;

    fn archived(finished_at_ms: i64) -> RetentionFacts {
        RetentionFacts {
            state: JobState::Succeeded,
            finished_at_ms: Some(finished_at_ms),
            archive: Some(ArchiveState::Pruned),
            held: false,
            expiring: false,
        }
    }

    #[test]
    fn retention_days_are_whole_numbers_from_1_to_400() {
        assert_eq!(RetentionDays::default().get(), 90);
        for days in [1, 90, 400] {
            assert_eq!(
                RetentionDays::from_json(&json!(days)).map(RetentionDays::get),
                Ok(days)
            );
        }
        for days in [
            json!(0),
            json!(401),
            json!(-1),
            json!(u64::MAX),
            json!(i64::MIN),
        ] {
            assert_eq!(
                RetentionDays::from_json(&days),
                Err(RetentionDaysError::OutOfRange),
                "{days}"
            );
        }
        for days in [
            json!(1.5),
            json!(90.0),
            json!("90"),
            json!(true),
            json!(null),
            json!([90]),
        ] {
            assert_eq!(
                RetentionDays::from_json(&days),
                Err(RetentionDaysError::NotAWholeNumber),
                "{days}"
            );
        }
    }

    #[test]
    fn the_cut_is_that_many_days_before_now_and_cannot_overflow() {
        let days = RetentionDays::new(2).unwrap();
        assert_eq!(days.cut(NOW), NOW - 2 * MILLIS_PER_DAY);
        assert_eq!(RetentionDays::new(400).unwrap().cut(i64::MIN), i64::MIN);
    }

    #[test]
    fn an_archived_job_finished_before_the_cut_is_expired_then_deleted() {
        let cut = RetentionDays::DEFAULT.cut(NOW);
        let mut job = archived(cut - 1);
        assert_eq!(decide(&job, cut), RetentionStep::Expire);
        job.expiring = true;
        assert_eq!(decide(&job, cut), RetentionStep::Delete);
        // At the cut exactly, or after it: kept.
        assert_eq!(decide(&archived(cut), cut), RetentionStep::Keep);
        assert_eq!(decide(&archived(NOW), cut), RetentionStep::Keep);
    }

    #[test]
    fn a_live_unarchived_or_held_job_is_kept_whatever_its_age() {
        let cut = NOW;
        for state in JobState::ALL.into_iter().filter(|s| !s.is_terminal()) {
            let job = RetentionFacts {
                state,
                finished_at_ms: Some(0),
                ..archived(0)
            };
            assert_eq!(decide(&job, cut), RetentionStep::Keep, "{state}");
        }
        for archive in [None, Some(ArchiveState::Stored)] {
            let job = RetentionFacts {
                archive,
                ..archived(0)
            };
            assert_eq!(decide(&job, cut), RetentionStep::Keep, "{archive:?}");
        }
        let held = RetentionFacts {
            held: true,
            ..archived(0)
        };
        assert_eq!(decide(&held, cut), RetentionStep::Keep);
        let unfinished = RetentionFacts {
            finished_at_ms: None,
            ..archived(0)
        };
        assert_eq!(decide(&unfinished, cut), RetentionStep::Keep);
    }

    #[test]
    fn an_expiring_job_is_deleted_even_if_a_hold_raced_it() {
        let job = RetentionFacts {
            held: true,
            expiring: true,
            ..archived(NOW)
        };
        assert_eq!(decide(&job, 0), RetentionStep::Delete);
    }

    #[test]
    fn only_a_finished_job_that_is_not_expiring_may_be_held() {
        assert!(may_hold(&archived(NOW)));
        let unarchived = RetentionFacts {
            archive: None,
            ..archived(NOW)
        };
        assert!(may_hold(&unarchived));
        let live = RetentionFacts {
            state: JobState::Running,
            ..archived(NOW)
        };
        assert!(!may_hold(&live));
        let expiring = RetentionFacts {
            expiring: true,
            ..archived(NOW)
        };
        assert!(!may_hold(&expiring));
    }
}
