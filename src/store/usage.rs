//! Usage (migration 0014): what an organization stores, in one bounded read
//! (`queries/usage/read.sql`, its plan pinned by the schema suite). The counts are kept on
//! the write path by a guarded statement after each job move, in its batch (queries/usage/*.sql;
//! never triggers: D1 counts a trigger's writes in its statement's row count); nothing here
//! counts the jobs table.

use edgerunner_protocol::kind::EvidenceKind;
use serde::Deserialize;
use worker::D1PreparedStatement;

use super::{stmt, Db};
use crate::error::{ApiError, ApiResult};

/// The most jobs the usage view counts as due at the next cut; past it the view says "at
/// least" this many (a range of one index, never longer).
pub(crate) const MAX_DUE_COUNTED: i64 = 10_000;

/// What a job's row costs an organization's quota besides its input and requirements: its
/// fixed columns and index entries, and while it is live its claims, events and completions
/// (each bounded per job). Migration 0015 estimates what was stored before it the same way.
pub(crate) const JOB_ROW_BYTES: i64 = 1024;
/// What an archived job's row costs (migration 0018) besides its requirements document: its
/// columns and index entries (bench/storage.py measures about 500 bytes), until retention
/// deletes it. A job's charge drops from [`JOB_ROW_BYTES`] and its input to this when its row
/// moves to `archived_jobs`.
pub(crate) const ARCHIVED_JOB_BYTES: i64 = 512;
/// What a stream chunk costs besides its payload: its hashes, names and index entries.
pub(crate) const CHUNK_ROW_BYTES: i64 = 256;
/// What a release version costs besides its content.
pub(crate) const VERSION_ROW_BYTES: i64 = 512;

/// Each organization's quota on its live D1 bytes unless an operator set its own
/// (`organizations.d1_quota_bytes`): 1 GiB, or `ORGANIZATION_D1_QUOTA_BYTES`.
pub(crate) const DEFAULT_QUOTA_BYTES: i64 = 1 << 30;

/// The deployment's default quota (`ORGANIZATION_D1_QUOTA_BYTES`, at least 1 MiB).
pub(crate) fn default_quota(env: &worker::Env) -> i64 {
    crate::platform::setting(
        env,
        "ORGANIZATION_D1_QUOTA_BYTES",
        DEFAULT_QUOTA_BYTES,
        1 << 20,
    )
}

/// `bytes` of a stored text (what SQLite's `length(CAST(x AS BLOB))` says of it).
pub(crate) fn stored_bytes(text: &str) -> i64 {
    i64::try_from(text.len()).unwrap_or(i64::MAX)
}

/// The organization's usage row, as read.
#[derive(Deserialize, Debug, Clone)]
pub(crate) struct UsageRow {
    pub(crate) jobs_live: i64,
    pub(crate) jobs_archived: i64,
    pub(crate) jobs_expiring: i64,
    pub(crate) jobs_held: i64,
    pub(crate) r2_objects: i64,
    pub(crate) r2_bytes: i64,
    pub(crate) d1_bytes: i64,
    /// The organization's own quota, set by an operator; `None`: the deployment's default.
    pub(crate) d1_quota_override: Option<i64>,
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

/// After a job's insert: one more live job, its row charged to the quota (`quota`: the
/// deployment's default).
pub(crate) fn job_enqueued(
    db: &Db,
    org: &str,
    job: &str,
    quota: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/job_enqueued.sql"),
        &[org.into(), job.into(), JOB_ROW_BYTES.into(), quota.into()],
    )
}

/// After a write the quota bounds: `bytes` charged (`quota`: the deployment's default).
pub(crate) fn charge(db: &Db, org: &str, bytes: i64, quota: i64) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/charge.sql"),
        &[org.into(), bytes.into(), quota.into()],
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

/// After a job's archive was marked pruned: a live job is an archived one, its chunks, its
/// input and its live row's excess over an archived row freed.
pub(crate) fn job_pruned(db: &Db, org: &str, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/job_pruned.sql"),
        &[
            org.into(),
            job.into(),
            CHUNK_ROW_BYTES.into(),
            (JOB_ROW_BYTES - ARCHIVED_JOB_BYTES).into(),
        ],
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

/// In an archived job's deletion batch, before its row goes.
pub(crate) fn job_deleted(db: &Db, org: &str, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/job_deleted.sql"),
        &[job.into(), org.into(), ARCHIVED_JOB_BYTES.into()],
    )
}

/// After an evidence row's insert: its bytes charged (`kind`: evaluation_run, test_result,
/// cost_record, model_call or trace).
pub(crate) fn evidence_added(
    db: &Db,
    org: &str,
    kind: EvidenceKind,
    id: &str,
    quota: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/evidence_added.sql"),
        &[org.into(), kind.as_str().into(), id.into(), quota.into()],
    )
}

/// After the retention pass marked a job expiring: the evidence in its custody freed.
pub(crate) fn evidence_freed(db: &Db, org: &str, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/usage/evidence_freed.sql"),
        &[org.into(), job.into()],
    )
}
