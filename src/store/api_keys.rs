//! `api_keys`: found by the SHA-256 of the presented key; the key itself is never stored.

use edgerunner_protocol::kind::Role;
use serde::Deserialize;

use super::{all, first, Arg, Db};
use crate::error::ApiResult;

#[derive(Deserialize)]
pub(crate) struct ApiKeyRow {
    pub(crate) id: String,
    pub(crate) organization_id: String,
    pub(crate) name: String,
    pub(crate) key_prefix: String,
    pub(crate) role: Role,
    pub(crate) scopes: String,
    pub(crate) created_at: i64,
    pub(crate) last_used_at: Option<i64>,
    pub(crate) revoked_at: Option<i64>,
    /// When the key stops authenticating; `None` for keys made before keys expired (migration
    /// 0013) and for `scripts/bootstrap-admin`'s first key.
    pub(crate) expires_at: Option<i64>,
}

impl ApiKeyRow {
    /// Whether the key authenticates at `now`: not revoked and not past its end.
    pub(crate) fn live_at(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| now < at)
    }
}

pub(crate) async fn by_hash(db: &Db, key_hash: &str) -> ApiResult<Option<ApiKeyRow>> {
    first(
        db,
        include_str!("queries/api_keys/by_hash.sql"),
        &[key_hash.into()],
    )
    .await
}

/// [`by_hash`] as a statement, to ride in a batch.
pub(crate) fn select_by_hash(db: &Db, key_hash: &str) -> ApiResult<worker::D1PreparedStatement> {
    super::stmt(
        db,
        include_str!("queries/api_keys/by_hash.sql"),
        &[key_hash.into()],
    )
}

pub(crate) async fn list(db: &Db, org: &str) -> ApiResult<Vec<ApiKeyRow>> {
    all(db, include_str!("queries/api_keys/list.sql"), &[org.into()]).await
}

pub(crate) struct NewApiKey<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) key_prefix: &'a str,
    pub(crate) key_hash: &'a str,
    pub(crate) role: Role,
    pub(crate) scopes_json: &'a str,
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
}

pub(crate) fn insert(db: &Db, key: &NewApiKey<'_>) -> ApiResult<worker::D1PreparedStatement> {
    super::stmt(
        db,
        include_str!("queries/api_keys/insert.sql"),
        &[
            key.id.into(),
            key.organization_id.into(),
            key.name.into(),
            key.key_prefix.into(),
            key.key_hash.into(),
            key.role.as_str().into(),
            key.scopes_json.into(),
            Arg::Int(key.created_at),
            Arg::Int(key.expires_at),
        ],
    )
}

/// Revokes a live key of the organization; 0 rows when it is unknown, foreign or already revoked.
pub(crate) fn revoke(
    db: &Db,
    org: &str,
    id: &str,
    now: i64,
) -> ApiResult<worker::D1PreparedStatement> {
    super::stmt(
        db,
        include_str!("queries/api_keys/revoke.sql"),
        &[org.into(), id.into(), now.into()],
    )
}

#[derive(Deserialize)]
struct OrganizationName {
    name: String,
}

pub(crate) async fn organization_name(db: &Db, org: &str) -> ApiResult<Option<String>> {
    let row: Option<OrganizationName> = first(
        db,
        include_str!("queries/api_keys/organization_name.sql"),
        &[org.into()],
    )
    .await?;
    Ok(row.map(|r| r.name))
}
