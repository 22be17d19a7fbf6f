//! `job_events`: the append-only timeline of jobs and the audit trail of admin actions.

use edgerunner_protocol::kind::EventKind;
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
    pub(crate) kind: EventKind,
    pub(crate) attempt: Option<i64>,
    pub(crate) reason: Option<&'a str>,
    pub(crate) detail_json: Option<&'a str>,
    pub(crate) at: i64,
}

impl<'a> NewEvent<'a> {
    /// An event of the organization itself (no job, runner or claim): a setting changed, a
    /// key or token made or revoked, a retention pass.
    pub(crate) fn of_organization(
        organization_id: &'a str,
        actor: &'a str,
        kind: EventKind,
        detail_json: Option<&'a str>,
        at: i64,
    ) -> Self {
        NewEvent {
            organization_id,
            job_id: None,
            runner_id: None,
            claim_id: None,
            actor,
            kind,
            attempt: None,
            reason: None,
            detail_json,
            at,
        }
    }
}

/// An admin's change to one of the organization's own settings (`set`, a statement that
/// changes its organization's row) and the event that records it, in one batch: the event is
/// written only with the change. An organization that does not answer `set` is an internal
/// error: the caller authenticated with one of its keys.
pub(crate) async fn set_organization_setting(
    db: &Db,
    set: D1PreparedStatement,
    event: &NewEvent<'_>,
) -> ApiResult<()> {
    let changed = super::batch(db, vec![set, insert_if_changed(db, event)?]).await?;
    super::expect_one(changed[0], || {
        crate::error::ApiError::internal("an authenticated key's organization vanished")
    })
}

pub(crate) fn insert(db: &Db, event: &NewEvent<'_>) -> ApiResult<D1PreparedStatement> {
    insert_sql(db, include_str!("queries/events/insert.sql"), event)
}

/// The event, only if the statement just before it in the same batch changed exactly one row:
/// a guarded update and its audit record then commit together or not at all, and a guard that
/// did not hold leaves no event behind. (`changes()` is per connection; a D1 batch runs its
/// statements in order on one.)
pub(crate) fn insert_if_changed(db: &Db, event: &NewEvent<'_>) -> ApiResult<D1PreparedStatement> {
    insert_sql(
        db,
        include_str!("queries/events/insert_if_changed.sql"),
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
            event.kind.as_str().into(),
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
    pub(crate) kind: EventKind,
    pub(crate) attempt: Option<i64>,
    pub(crate) reason: Option<String>,
    pub(crate) detail: Option<String>,
    pub(crate) at: i64,
}

/// At most `limit` of the runner's events with an id below `before`, newest first.
pub(crate) async fn for_runner(
    db: &Db,
    org: &str,
    runner: &str,
    before: i64,
    limit: i64,
) -> ApiResult<Vec<EventRow>> {
    all(
        db,
        include_str!("queries/events/for_runner.sql"),
        &[org.into(), runner.into(), Arg::Int(before), limit.into()],
    )
    .await
}

pub(crate) fn select_for_job(
    db: &Db,
    org: &str,
    job: &str,
    limit: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/events/for_job.sql"),
        &[org.into(), job.into(), limit.into()],
    )
}
