//! Retention (migration 0011): the organization's setting and its count of deleted jobs
//! (`queries/retention/*.sql`, each tested for its behaviour by the schema suite). The steps
//! and their rules are the protocol crate's (`edgerunner_protocol::retention`).

use edgerunner_protocol::retention::RetentionDays;
use edgerunner_protocol::state::JobState;
use serde::Deserialize;
use worker::D1PreparedStatement;

use super::events::{self, NewEvent};
use super::{all, changes, first, stmt, usage, write_batch, Db};
use crate::error::{ApiError, ApiResult};

/// The organization's retention row.
#[derive(Deserialize, Debug, Clone, Copy)]
pub(crate) struct RetentionRow {
    pub(crate) retention_days: i64,
    pub(crate) retention_deleted_jobs: i64,
}

/// The organization's retention setting, `None` for an unknown organization.
pub(crate) async fn setting(db: &Db, org: &str) -> ApiResult<Option<RetentionRow>> {
    first(
        db,
        include_str!("queries/retention/setting.sql"),
        &[org.into()],
    )
    .await
}

/// Sets how many days the organization keeps its finished jobs; 1 row for a known one.
pub(crate) fn set_days(db: &Db, org: &str, days: u16) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/retention/set_days.sql"),
        &[org.into(), i64::from(days).into()],
    )
}

impl RetentionRow {
    /// The stored setting (the schema holds it to 1-400).
    pub(crate) fn days(&self) -> ApiResult<RetentionDays> {
        RetentionDays::new(self.retention_days)
            .map_err(|err| ApiError::internal(format!("stored retention_days: {err}")))
    }
}

/// A job the retention pass may expire, with the cut that made it due (expire's guard).
#[derive(Deserialize, Debug, Clone)]
pub(crate) struct DueJob {
    pub(crate) id: String,
    pub(crate) organization_id: String,
    pub(crate) cut: i64,
}

/// A job marked expiring, as its deletion needs it.
#[derive(Deserialize, Debug, Clone)]
pub(crate) struct ExpiringJob {
    pub(crate) id: String,
    pub(crate) organization_id: String,
    pub(crate) bundle_sha256: String,
}

/// Archived jobs of `org`, neither held nor expiring, that finished before `cut`: oldest
/// first, at most `limit`.
pub(crate) async fn due(db: &Db, org: &str, cut: i64, limit: i64) -> ApiResult<Vec<DueJob>> {
    all(
        db,
        include_str!("queries/retention/due.sql"),
        &[org.into(), cut.into(), limit.into()],
    )
    .await
}

/// Such jobs in every organization, each by its own organization's cut at `now`.
pub(crate) async fn due_all(db: &Db, now: i64, limit: i64) -> ApiResult<Vec<DueJob>> {
    all(
        db,
        include_str!("queries/retention/due_all.sql"),
        &[now.into(), limit.into()],
    )
    .await
}

/// Jobs of `org` marked expiring and not yet deleted, at most `limit`.
pub(crate) async fn expiring(db: &Db, org: &str, limit: i64) -> ApiResult<Vec<ExpiringJob>> {
    all(
        db,
        include_str!("queries/retention/expiring.sql"),
        &[org.into(), limit.into()],
    )
    .await
}

/// Such jobs in every organization, at most `limit`.
pub(crate) async fn expiring_all(db: &Db, limit: i64) -> ApiResult<Vec<ExpiringJob>> {
    all(
        db,
        include_str!("queries/retention/expiring_all.sql"),
        &[limit.into()],
    )
    .await
}

/// Marks the job expiring, guarded by what made it due; the job when it was marked, `None`
/// when the guard did not hold (held, or marked by another pass, since it was read).
pub(crate) async fn expire(
    db: &Db,
    org: &str,
    job: &str,
    now: i64,
    cut: i64,
) -> ApiResult<Option<ExpiringJob>> {
    let expire = stmt(
        db,
        include_str!("queries/retention/expire.sql"),
        &[job.into(), org.into(), now.into(), cut.into()],
    )?;
    let results = write_batch(
        db,
        vec![
            expire,
            usage::job_expiring(db, org)?,
            usage::evidence_freed(db, org, job)?,
        ],
    )
    .await?;
    Ok(super::rows_of::<ExpiringJob>(&results, 0)?
        .into_iter()
        .next())
}

/// One batch of an expiring job's evidence: up to `limit` rows of each evidence table of the
/// evaluation run in its custody. What each statement deleted, in order.
pub(crate) async fn delete_evidence_batch(
    db: &Db,
    org: &str,
    job: &str,
    limit: i64,
) -> ApiResult<[i64; 4]> {
    let args = [job.into(), org.into(), limit.into()];
    let statements = vec![
        stmt(
            db,
            include_str!("queries/retention/delete_test_results.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/retention/delete_cost_records.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/retention/delete_model_calls.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/retention/delete_traces.sql"),
            &args,
        )?,
    ];
    let results = write_batch(db, statements).await?;
    let deleted = |i: usize| -> ApiResult<i64> {
        let result = results
            .get(i)
            .ok_or_else(|| ApiError::internal(format!("evidence batch answered no result {i}")))?;
        i64::try_from(changes(result)?).map_err(ApiError::internal)
    };
    Ok([deleted(0)?, deleted(1)?, deleted(2)?, deleted(3)?])
}

/// The expiring job's last batch: its organization's count grows by one, then its run in
/// custody, its custody rows and its archived row go, with its requirements document when no
/// other archived job names it. `false`: the row was gone already.
pub(crate) async fn delete_job(db: &Db, org: &str, job: &str) -> ApiResult<bool> {
    let args = [job.into(), org.into()];
    let statements = vec![
        stmt(
            db,
            include_str!("queries/retention/count_deleted.sql"),
            &args,
        )?,
        usage::job_deleted(db, org, job)?,
        stmt(db, include_str!("queries/retention/delete_runs.sql"), &args)?,
        stmt(
            db,
            include_str!("queries/retention/delete_custody.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/retention/release_requirements.sql"),
            &args,
        )?,
        stmt(db, include_str!("queries/retention/delete_job.sql"), &args)?,
        stmt(
            db,
            include_str!("queries/retention/drop_requirements.sql"),
            &[org.into()],
        )?,
    ];
    let changed = super::batch(db, statements).await?;
    Ok(changed.get(5) == Some(&1))
}

/// Holds the finished job (who and why) and records `event` with it, in one batch; `false`
/// when the guard did not hold (held already, not finished, expiring, or not the
/// organization's), and then nothing is recorded.
pub(crate) async fn hold(
    db: &Db,
    org: &str,
    job: &str,
    now: i64,
    who: &str,
    reason: &str,
    event: &NewEvent<'_>,
) -> ApiResult<bool> {
    // The states a hold needs: the finished ones (`JobState::is_terminal`).
    let finished: Vec<&str> = JobState::ALL
        .into_iter()
        .filter(|state| state.is_terminal())
        .map(JobState::as_str)
        .collect();
    let finished = serde_json::to_string(&finished).map_err(ApiError::internal)?;
    let args = [
        job.into(),
        org.into(),
        now.into(),
        who.into(),
        finished.as_str().into(),
        reason.into(),
    ];
    // The job is in jobs or in archived_jobs, never both: one of the two holds applies, and
    // each is followed by its own counter and event (each guarded by the write before it).
    let changed = super::batch(
        db,
        vec![
            stmt(db, include_str!("queries/retention/hold.sql"), &args)?,
            usage::job_held(db, org, true)?,
            events::insert_if_changed(db, event)?,
            stmt(
                db,
                include_str!("queries/retention/hold_archived.sql"),
                &args,
            )?,
            usage::job_held(db, org, true)?,
            events::insert_if_changed(db, event)?,
        ],
    )
    .await?;
    held_once(&changed)
}

/// Whether exactly one of a hold's (or a release's) two writes, at 0 and 3, changed its row.
fn held_once(changed: &[usize]) -> ApiResult<bool> {
    match (changed.first(), changed.get(3)) {
        (Some(0), Some(0)) => Ok(false),
        (Some(1), Some(0)) | (Some(0), Some(1)) => Ok(true),
        other => Err(ApiError::internal(format!(
            "a hold's writes changed {other:?} rows"
        ))),
    }
}

/// Releases the held job and records `event` with it, in one batch; `false` when it was not
/// held (or is expiring, or not the organization's), and then nothing is recorded.
pub(crate) async fn release(
    db: &Db,
    org: &str,
    job: &str,
    event: &NewEvent<'_>,
) -> ApiResult<bool> {
    let args = [job.into(), org.into()];
    let changed = super::batch(
        db,
        vec![
            stmt(db, include_str!("queries/retention/release.sql"), &args)?,
            usage::job_held(db, org, false)?,
            events::insert_if_changed(db, event)?,
            stmt(
                db,
                include_str!("queries/retention/release_archived.sql"),
                &args,
            )?,
            usage::job_held(db, org, false)?,
            events::insert_if_changed(db, event)?,
        ],
    )
    .await?;
    held_once(&changed)
}
