//! `job_events`: the append-only timeline of jobs and the audit trail of admin actions.

use serde::Deserialize;
use worker::D1PreparedStatement;

use super::{all, stmt, Arg, Db};
use crate::error::ApiResult;

pub(crate) struct NewEvent<'a> {
    pub(crate) organization_id: &'a str,
    pub(crate) job_id: Option<&'a str>,
    pub(crate) runner_id: Option<&'a str>,
    pub(crate) claim_id: Option<&'a str>,
    pub(crate) actor: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) attempt: Option<i64>,
    pub(crate) reason: Option<&'a str>,
    pub(crate) detail_json: Option<&'a str>,
    pub(crate) at: i64,
}

pub(crate) fn insert(db: &Db, event: &NewEvent<'_>) -> ApiResult<D1PreparedStatement> {
    insert_sql(
        db,
        "INSERT INTO job_events (organization_id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        event,
    )
}

/// The event, only if the statement just before it in the same batch changed exactly one row:
/// a guarded update and its audit record then commit together or not at all, and a guard that
/// did not hold leaves no event behind. (`changes()` is per connection; a D1 batch runs its
/// statements in order on one.)
pub(crate) fn insert_if_changed(db: &Db, event: &NewEvent<'_>) -> ApiResult<D1PreparedStatement> {
    insert_sql(
        db,
        "INSERT INTO job_events (organization_id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at) \
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 WHERE changes() = 1",
        event,
    )
}

fn insert_sql(db: &Db, sql: &str, event: &NewEvent<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        sql,
        &[
            event.organization_id.into(),
            event.job_id.into(),
            event.runner_id.into(),
            event.claim_id.into(),
            event.actor.into(),
            event.kind.into(),
            event.attempt.into(),
            event.reason.into(),
            event.detail_json.into(),
            Arg::Int(event.at),
        ],
    )
}

#[derive(Deserialize)]
pub(crate) struct EventRow {
    pub(crate) id: i64,
    pub(crate) job_id: Option<String>,
    pub(crate) runner_id: Option<String>,
    pub(crate) claim_id: Option<String>,
    pub(crate) actor: String,
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) attempt: Option<i64>,
    pub(crate) reason: Option<String>,
    pub(crate) detail: Option<String>,
    pub(crate) at: i64,
}

const COLUMNS: &str = "id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at";

pub(crate) async fn for_runner(
    db: &Db,
    org: &str,
    runner: &str,
    limit: i64,
) -> ApiResult<Vec<EventRow>> {
    all(
        db,
        &format!("SELECT {COLUMNS} FROM job_events WHERE runner_id = ?2 AND organization_id = ?1 ORDER BY id LIMIT ?3"),
        &[org.into(), runner.into(), limit.into()],
    )
    .await
}

pub(crate) async fn for_job(db: &Db, org: &str, job: &str, limit: i64) -> ApiResult<Vec<EventRow>> {
    all(
        db,
        &format!("SELECT {COLUMNS} FROM job_events WHERE job_id = ?2 AND organization_id = ?1 ORDER BY id LIMIT ?3"),
        &[org.into(), job.into(), limit.into()],
    )
    .await
}
