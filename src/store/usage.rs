//! Usage (migration 0014): what an organization stores, in one bounded read
//! (`queries/usage/read.sql`, its plan pinned by the schema suite). The counts are kept on
//! the write path by the schema's triggers; nothing here counts the jobs table.

use serde::Deserialize;
use worker::D1PreparedStatement;

use super::{stmt, Db};
use crate::error::{ApiError, ApiResult};

/// The most jobs the usage view counts as due at the next cut; past it the view says "at
/// least" this many (a range of one index, never longer).
pub(crate) const MAX_DUE_COUNTED: i64 = 10_000;

/// The organization's usage row, as read.
#[derive(Deserialize, Debug, Clone)]
pub(crate) struct UsageRow {
    pub(crate) jobs_live: i64,
    pub(crate) jobs_archived: i64,
    pub(crate) jobs_expiring: i64,
    pub(crate) jobs_held: i64,
    pub(crate) r2_objects: i64,
    pub(crate) r2_bytes: i64,
    pub(crate) retention_days: i64,
    pub(crate) retention_deleted_jobs: i64,
    pub(crate) cut: i64,
    pub(crate) oldest_job_at: Option<i64>,
    pub(crate) due_at_cut: i64,
}

/// The usage row and the database's size in bytes as D1 reports it with the read (the whole
/// database, every organization's and the schema's); `None` for an unknown organization.
pub(crate) async fn read(
    db: &Db,
    org: &str,
    now: i64,
) -> ApiResult<Option<(UsageRow, Option<u64>)>> {
    let statement = stmt(
        db,
        include_str!("queries/usage/read.sql"),
        &[org.into(), now.into(), MAX_DUE_COUNTED.into()],
    )?;
    let result = super::retry_busy(db, || statement.all())
        .await
        .map_err(ApiError::from)?;
    let size = result
        .meta()?
        .and_then(|meta| meta.size_after)
        .and_then(|bytes| u64::try_from(bytes).ok());
    let row = result.results::<UsageRow>()?.into_iter().next();
    Ok(row.map(|row| (row, size)))
}

// The counters' statements: each follows, in its batch, the statement that moves a job, and
// applies only when that statement changed its row (`changes() = 1`).

/// After a job's insert: one more live job.
pub(crate) fn job_enqueued(db: &Db, org: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/job_enqueued.sql"),
        &[org.into()],
    )
}

/// After a job's archive was stored: its two objects, and its bundle's bytes, are in R2.
pub(crate) fn archive_stored(
    db: &Db,
    org: &str,
    bundle_bytes: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/archive_stored.sql"),
        &[org.into(), bundle_bytes.into()],
    )
}

/// After a job's archive was marked pruned: a live job is an archived one.
pub(crate) fn job_pruned(db: &Db, org: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/job_pruned.sql"),
        &[org.into()],
    )
}

/// After a hold (`held`) or a release.
pub(crate) fn job_held(db: &Db, org: &str, held: bool) -> ApiResult<D1PreparedStatement> {
    let change: i64 = if held { 1 } else { -1 };
    stmt(
        db,
        include_str!("queries/usage/job_held.sql"),
        &[org.into(), change.into()],
    )
}

/// After the retention pass marked a job expiring.
pub(crate) fn job_expiring(db: &Db, org: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/job_expiring.sql"),
        &[org.into()],
    )
}

/// In a job's deletion batch, before its row goes.
pub(crate) fn job_deleted(db: &Db, org: &str, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/job_deleted.sql"),
        &[job.into(), org.into()],
    )
}
