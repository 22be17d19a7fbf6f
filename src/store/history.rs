//! Queue history (migration 0021): each organization's five-minute buckets of the last day,
//! written by the cron pass's one sampling statement (never on the hot path) and read by
//! `GET /api/remote-runners/queues/history` in one range of the table's primary key.

use edgerunner_protocol::state::{JobState, RunnerState};
use serde::Deserialize;

use super::{all, run, Arg, Db};
use crate::error::ApiResult;

/// A bucket's width: five minutes.
pub(crate) const BUCKET_MILLIS: i64 = 5 * 60 * 1000;
/// The buckets of a day, the most an organization keeps (`queue_history_keeps_a_day`).
pub(crate) const BUCKETS: i64 = 288;
/// The most organizations one cron pass samples (by id): past it the rest have no history.
pub(crate) const ORGANIZATIONS_PER_PASS: i64 = 1_000;

/// The start of the bucket `at` falls in.
pub(crate) fn bucket_of(at: i64) -> i64 {
    at - at.rem_euclid(BUCKET_MILLIS)
}

/// Samples every organization (at most [`ORGANIZATIONS_PER_PASS`]) into the bucket of `now`;
/// runners seen at or after `online_since` count as online. Answers the rows written.
pub(crate) async fn sample(db: &Db, now: i64, online_since: i64) -> ApiResult<usize> {
    let held = super::states::held_job_states();
    run(
        db,
        include_str!("queries/history/sample.sql"),
        &[
            Arg::Int(bucket_of(now)),
            Arg::Int(online_since),
            Arg::Int(ORGANIZATIONS_PER_PASS),
            JobState::Queued.as_str().into(),
            held.as_str().into(),
            RunnerState::Active.as_str().into(),
        ],
    )
    .await
}

/// One stored bucket (see the migration for what each number is).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
pub(crate) struct BucketRow {
    pub(crate) bucket_at: i64,
    pub(crate) samples: i64,
    pub(crate) queued: i64,
    pub(crate) running: i64,
    pub(crate) busy_slots: i64,
    pub(crate) slots: i64,
    pub(crate) finished_base: i64,
    pub(crate) finished_total: i64,
}

/// The organization's buckets from `from` on, oldest first (at most [`BUCKETS`]).
pub(crate) async fn read(db: &Db, org: &str, from: i64) -> ApiResult<Vec<BucketRow>> {
    all(
        db,
        include_str!("queries/history/read.sql"),
        &[org.into(), Arg::Int(from), Arg::Int(BUCKETS)],
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_starts_on_a_five_minute_mark() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(299_999), 0);
        assert_eq!(bucket_of(300_000), 300_000);
        assert_eq!(bucket_of(1_780_000_123_456), 1_779_999_900_000);
        assert_eq!(BUCKETS * BUCKET_MILLIS, 24 * 3_600_000, "a day of buckets");
    }
}
