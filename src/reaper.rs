//! The recovery sweep: find expired leases through the lease index and ask each job's object
//! to recover itself.
//!
//! Each job object also sets an alarm at its lease expiry and recovers on its own, to the
//! millisecond; this sweep (cron every minute, and `POST /api/remote-runners/jobs/reap`) is the
//! safety net for anything an alarm missed. All three end in `JobObject` `recover`, which
//! decides from the job's state and `now` and applies the decision with guarded writes under the
//! object's lock, so they can race on one lease and still produce one loss and one requeue.
//!
//! A pass is bounded: it examines at most `limit` expired leases (a batch that fits the Workers
//! CPU limit) and says whether more remain, so a caller can run another pass.
//!
//! Each pass returns a typed report of what it did ([`RecoveryReport`], [`PurgeReport`],
//! [`HistoryReport`], [`RetireReport`]). The reports stay here beside their passes rather than
//! among the REST views (`routes::views`): they are counts a pass keeps as it works, not a
//! store row shaped for a client; their first reader is the cron's log line
//! (`routes::views::shown`), and only the recovery pass's is also a REST body (`ReapReport`,
//! `POST /api/remote-runners/jobs/reap`), sent as a view is, through `serde_json::Value`
//! (members sorted, as they always were).

use edgerunner_protocol::archive::JOBS_PER_PASS;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::state::{JobState, RunnerInput, RunnerState};
use futures_util::future::join_all;
use serde::Serialize;
use serde_json::{json, Value};
use worker::Env;

use crate::archive::{Mode, Progress};
use crate::error::{ApiError, ApiResult};
use crate::objects;
use crate::objects::job::JobOp;
use crate::objects::job::{JobReply, Recovered};
use crate::store;
use crate::store::writes::Writes;

/// Leases examined by one pass unless the caller asks for fewer.
pub(crate) const DEFAULT_PASS_LIMIT: i64 = 200;
pub(crate) const MAX_PASS_LIMIT: i64 = 500;
/// Job objects asked at once.
const CONCURRENCY: usize = 16;

/// `ReapReport`: what one recovery pass did with the expired leases it examined.
#[derive(Serialize, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecoveryReport {
    examined: usize,
    /// Jobs whose lost claim put them back in the queue.
    requeued: u32,
    /// Jobs whose lost claim left them in any other state.
    ended: u32,
    /// Jobs whose recovery found no claim to lose.
    unchanged: u32,
    /// Job objects that answered with an error or not at all.
    failed: u32,
    /// More expired leases than the pass took: another pass has work.
    more: bool,
}

/// What one archive pass did: the due jobs it examined, and what each job's object answered
/// (archived, still pruning, not yet due by the object's clock, failed); `more`: other jobs are
/// due past the pass's limit.
#[derive(Serialize, Debug, Default, PartialEq, Eq)]
pub(crate) struct ArchiveReport {
    examined: usize,
    archived: usize,
    pruning: usize,
    waiting: usize,
    failed: usize,
    more: bool,
}

/// What one purge pass deleted.
#[derive(Serialize, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PurgeReport {
    deleted_enrollments: usize,
    deleted_challenges: usize,
    deleted_enrollment_tokens: usize,
}

/// How many organizations one history pass sampled.
#[derive(Serialize, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HistoryReport {
    organizations_sampled: usize,
}

/// Ephemeral runners one pass revoked, and retired ones it deleted.
#[derive(Serialize, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RetireReport {
    retired_runners: usize,
    deleted_runners: usize,
}

/// One bounded pass over expired leases, across every organization (`org = None`, the cron
/// trigger and `CRON_SECRET`) or within one (an admin).
pub(crate) async fn pass(
    env: &Env,
    org: Option<&str>,
    now: i64,
    limit: i64,
    actor: &str,
) -> ApiResult<RecoveryReport> {
    let db = store::Db::of(env, store::RoundTrips::default())?;
    // One more than the pass takes, to know whether more remain.
    let expired = store::jobs::expired_leases(&db, org, now, limit + 1).await?;
    let more = i64::try_from(expired.len()).unwrap_or(i64::MAX) > limit;
    let batch: Vec<&String> = expired
        .iter()
        .take(usize::try_from(limit).unwrap_or(0))
        .collect();
    let mut requeued = 0;
    let mut ended = 0;
    let mut unchanged = 0;
    let mut failed = 0;
    for group in batch.chunks(CONCURRENCY) {
        let ops: Vec<JobOp> = group
            .iter()
            .map(|job| JobOp::Recover {
                job_id: (*job).clone(),
                actor: actor.to_owned(),
            })
            .collect();
        let replies = join_all(ops.iter().map(|op| objects::job::call(env, db.trips(), op))).await;
        for reply in replies {
            match reply {
                Ok(JobReply::Recovered(Recovered { lost: None, .. })) => unchanged += 1,
                Ok(JobReply::Recovered(Recovered {
                    state: JobState::Queued,
                    ..
                })) => requeued += 1,
                Ok(JobReply::Recovered(_)) => ended += 1,
                Ok(other) => {
                    worker::console_error!("recovery answered {other:?}");
                    failed += 1;
                }
                Err(err) => {
                    worker::console_error!("recovery failed: {err:?}");
                    failed += 1;
                }
            }
        }
    }
    // Counted once it is done (/metrics: edgerunner_reaper_passes_total); a pass whose count
    // fails to write still did its work.
    let counted = match store::counters::reaper_pass(&db) {
        Ok(statement) => store::write_batch(&db, vec![statement]).await.map(|_| ()),
        Err(err) => Err(err),
    };
    if let Err(err) = counted {
        worker::console_error!("the reaper pass was not counted: {err:?}");
    }
    Ok(RecoveryReport {
        examined: batch.len(),
        requeued,
        ended,
        unchanged,
        failed,
        more,
    })
}

/// The limit a caller asked for, within bounds.
pub(crate) fn limit_from(body: &Value) -> ApiResult<i64> {
    match body.get("limit") {
        None | Some(Value::Null) => Ok(DEFAULT_PASS_LIMIT),
        Some(v) => v
            .as_i64()
            .filter(|n| (1..=MAX_PASS_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::unprocessable(
                    ErrorCode::InvalidLimit,
                    format!("limit must be an integer from 1 to {MAX_PASS_LIMIT}"),
                )
            }),
    }
}

/// Pending enrollments and challenges handled by one purge pass, at most.
const PURGE_LIMIT: i64 = 500;
/// How long a key-pair enrollment may wait for approval unless
/// `PENDING_ENROLLMENT_MAX_AGE_HOURS` says otherwise (a day: a real runner's operator approves
/// it while they are at the machine, and a squatter's rows hold their slots for no longer).
const DEFAULT_PENDING_MAX_AGE_HOURS: i64 = 24;
/// An enrollment token that admitted no runner is deleted this long after it expired.
const UNUSED_TOKEN_KEPT_MILLIS: i64 = 7 * 24 * 3_600_000;

fn pending_max_age_millis(env: &Env) -> i64 {
    crate::platform::setting(
        env,
        "PENDING_ENROLLMENT_MAX_AGE_HOURS",
        DEFAULT_PENDING_MAX_AGE_HOURS,
        1,
    ) * 3_600_000
}

/// The cron pass's housekeeping of what strangers can leave behind: enrollments nobody
/// approved in time are deleted with their files and events (so a squatter's rows neither hold
/// slots nor fill the database, and the key of an operator who missed the day may enroll
/// again), used or expired challenges are deleted, and so are enrollment tokens that expired a
/// week ago without admitting anyone. Bounded like a recovery pass; what remains waits for the
/// next minute.
pub(crate) async fn purge(env: &Env, now: i64) -> ApiResult<PurgeReport> {
    let db = store::Db::of(env, store::RoundTrips::default())?;
    let cutoff = now - pending_max_age_millis(env);
    let mut writes = Writes::default();
    let enrollments =
        store::runners::delete_expired_enrollments(&db, &mut writes, cutoff, PURGE_LIMIT)?;
    let challenges = writes.any(store::runners::purge_challenges(&db, now, PURGE_LIMIT)?);
    let tokens = writes.any(store::enrollment::purge(
        &db,
        now - UNUSED_TOKEN_KEPT_MILLIS,
        PURGE_LIMIT,
    )?);
    let changed = store::writes::write(&db, writes).await?;
    Ok(PurgeReport {
        deleted_enrollments: changed.at(enrollments),
        deleted_challenges: changed.at(challenges),
        deleted_enrollment_tokens: changed.at(tokens),
    })
}

/// The cron pass's sample of every organization's queues (at most
/// `store::history::ORGANIZATIONS_PER_PASS`) into its five-minute bucket of the queue history
/// (migration 0021); runners seen within the queues view's offline time count as online.
pub(crate) async fn sample_history(env: &Env, now: i64) -> ApiResult<HistoryReport> {
    let db = store::Db::of(env, store::RoundTrips::default())?;
    let online_since = now - crate::routes::views::queues::OFFLINE_AFTER_MILLIS;
    let sampled = store::history::sample(&db, now, online_since).await?;
    Ok(HistoryReport {
        organizations_sampled: sampled,
    })
}

/// Ephemeral runners revoked by one pass, and retired ones deleted, at most.
const RETIRE_LIMIT: i64 = 100;
/// How long a retired ephemeral runner's record is kept unless `EPHEMERAL_RUNNER_KEPT_HOURS`
/// says otherwise (a day: its job's events and evidence name it meanwhile, and an operator
/// reading yesterday's runs finds it).
const DEFAULT_EPHEMERAL_KEPT_HOURS: i64 = 24;
/// Why the cron pass revoked an ephemeral runner.
pub(crate) const EPHEMERAL_RETIRED_REASON: &str = "ephemeral: its one job ended";

/// The cron pass's retirement of ephemeral runners (migration 0020): each that is spent (its
/// grant drained it and its claim ended, or an admin drained it before it took a job) is
/// revoked as an admin's revoke does it (its credentials die with their generation), with its
/// `runner.revoked` event; and each revoked more than `EPHEMERAL_RUNNER_KEPT_HOURS` ago that
/// nothing of its job names any more (its job archived) is deleted with its own events, files
/// and credentials. At most [`RETIRE_LIMIT`] of each a pass. A fleet of one-job runners thus
/// never leaves records that look able to work, and keeps about a day of retired ones.
pub(crate) async fn retire_ephemeral(env: &Env, now: i64) -> ApiResult<RetireReport> {
    let db = store::Db::of(env, store::RoundTrips::default())?;
    let kept = crate::platform::setting(
        env,
        "EPHEMERAL_RUNNER_KEPT_HOURS",
        DEFAULT_EPHEMERAL_KEPT_HOURS,
        1,
    ) * 3_600_000;
    let spent = store::runners::spent_ephemeral(&db, RETIRE_LIMIT).await?;
    let detail = json!({
        "from": RunnerState::Draining.as_str(),
        "to": RunnerState::Revoked.as_str(),
        "ephemeral": true,
    })
    .to_string();
    let mut writes = Writes::default();
    let mut revokes = Vec::with_capacity(spent.len());
    for runner in &spent {
        let change = store::runners::StateChange {
            org: &runner.organization_id,
            id: &runner.id,
            from: RunnerState::Draining,
            input: RunnerInput::Revoke,
            reason: EPHEMERAL_RETIRED_REASON,
            now,
            key_id: None,
        };
        revokes.push(writes.any(store::runners::change_state(&db, &change)?));
        writes.any(store::events::insert_if_changed(
            &db,
            &store::events::NewEvent {
                organization_id: &runner.organization_id,
                job_id: None,
                runner_id: Some(&runner.id),
                claim_id: None,
                actor: "system:cron",
                kind: EventKind::RunnerRevoked,
                attempt: None,
                reason: Some(EPHEMERAL_RETIRED_REASON),
                detail_json: Some(&detail),
                at: now,
            },
        )?);
    }
    let mut retired = 0;
    if !revokes.is_empty() {
        // A runner an admin changed meanwhile is left as the admin left it (its guard matches
        // none).
        let changed = store::writes::write(&db, writes).await?;
        retired = revokes.iter().filter(|at| changed.at(**at) == 1).count();
    }
    // Then the deletion of those retired long enough; a failure leaves them for the next pass
    // and takes nothing from the retirement above.
    let mut deletion = Writes::default();
    let deleted = match store::runners::delete_retired_ephemeral(
        &db,
        &mut deletion,
        now - kept,
        RETIRE_LIMIT,
    ) {
        Ok(runners) => store::writes::write(&db, deletion)
            .await
            .map(|changed| changed.at(runners)),
        Err(err) => Err(err),
    };
    let deleted = deleted.unwrap_or_else(|err| {
        worker::console_error!("deleting retired ephemeral runners failed: {err:?}");
        0
    });
    Ok(RetireReport {
        retired_runners: retired,
        deleted_runners: deleted,
    })
}

/// Job objects one archive pass asks at once.
const ARCHIVE_CONCURRENCY: usize = 4;

/// One bounded pass over finished jobs whose archive is due, oldest finish first (the cron
/// trigger's; the backfill of jobs that finished before archiving existed too): each job's
/// object runs its next step (`crate::archive::advance`). At most `limit` jobs; `more` says
/// whether others are due.
pub(crate) async fn archive(env: &Env, now: i64, limit: u32) -> ApiResult<ArchiveReport> {
    let db = store::Db::of(env, store::RoundTrips::default())?;
    let limit = i64::from(limit.min(JOBS_PER_PASS));
    let due_before = now.saturating_sub(crate::archive::grace_ms(env));
    let due = store::archive::due(&db, due_before, limit + 1).await?;
    let batch: Vec<&str> = due
        .iter()
        .take(usize::try_from(limit).unwrap_or(0))
        .map(|job| job.id.as_str())
        .collect();
    let mut report = ArchiveReport {
        examined: batch.len(),
        more: i64::try_from(due.len()).unwrap_or(i64::MAX) > limit,
        ..ArchiveReport::default()
    };
    for group in batch.chunks(ARCHIVE_CONCURRENCY) {
        let ops: Vec<JobOp> = group
            .iter()
            .map(|id| JobOp::Archive {
                job_id: (*id).to_owned(),
                mode: Mode::Due,
            })
            .collect();
        let replies = join_all(ops.iter().map(|op| objects::job::call(env, db.trips(), op))).await;
        for reply in replies {
            match reply {
                Ok(JobReply::Archived(Progress::Done)) => report.archived += 1,
                Ok(JobReply::Archived(Progress::More)) => report.pruning += 1,
                // Due by the pass's clock, a moment early by the object's; its alarm is set.
                Ok(JobReply::Archived(Progress::WaitUntil(_) | Progress::Live)) => {
                    report.waiting += 1;
                }
                Ok(other) => {
                    worker::console_error!("archive pass: answered {other:?}");
                    report.failed += 1;
                }
                Err(err) => {
                    worker::console_error!("archive pass: {err:?}");
                    report.failed += 1;
                }
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_pass_reports_as_it_always_has_members_sorted() {
        let recovery = RecoveryReport {
            examined: 4,
            requeued: 1,
            ended: 1,
            unchanged: 1,
            failed: 1,
            more: true,
        };
        assert_eq!(
            serde_json::to_value(&recovery).unwrap(),
            json!({"examined": 4, "requeued": 1, "ended": 1, "unchanged": 1, "failed": 1, "more": true})
        );
        assert_eq!(
            crate::routes::views::shown(&recovery),
            r#"{"ended":1,"examined":4,"failed":1,"more":true,"requeued":1,"unchanged":1}"#
        );
        assert_eq!(
            serde_json::to_value(PurgeReport {
                deleted_enrollments: 1,
                deleted_challenges: 2,
                deleted_enrollment_tokens: 3,
            })
            .unwrap(),
            json!({"deletedEnrollments": 1, "deletedChallenges": 2, "deletedEnrollmentTokens": 3})
        );
        assert_eq!(
            serde_json::to_value(ArchiveReport {
                examined: 5,
                archived: 1,
                pruning: 1,
                waiting: 1,
                failed: 2,
                more: false,
            })
            .unwrap(),
            json!({"examined": 5, "archived": 1, "pruning": 1, "waiting": 1, "failed": 2, "more": false})
        );
        assert_eq!(
            serde_json::to_value(HistoryReport {
                organizations_sampled: 2,
            })
            .unwrap(),
            json!({"organizationsSampled": 2})
        );
        assert_eq!(
            serde_json::to_value(RetireReport {
                retired_runners: 1,
                deleted_runners: 0,
            })
            .unwrap(),
            json!({"retiredRunners": 1, "deletedRunners": 0})
        );
    }
}
