//! `api_keys`: found by the SHA-256 of the presented key; the key itself is never stored.

use serde::Deserialize;

use super::{all, first, Arg, Db};
use crate::error::ApiResult;

#[derive(Deserialize)]
pub(crate) struct ApiKeyRow {
    pub(crate) id: String,
    pub(crate) organization_id: String,
    pub(crate) name: String,
    pub(crate) key_prefix: String,
    pub(crate) role: String,
    pub(crate) scopes: String,
    pub(crate) created_at: i64,
    pub(crate) last_used_at: Option<i64>,
    pub(crate) revoked_at: Option<i64>,
}

const COLUMNS: &str =
    "id, organization_id, name, key_prefix, role, scopes, created_at, last_used_at, revoked_at";

pub(crate) async fn by_hash(db: &Db, key_hash: &str) -> ApiResult<Option<ApiKeyRow>> {
    first(db, &by_hash_sql(), &[key_hash.into()]).await
}

/// [`by_hash`] as a statement, to ride in a batch.
pub(crate) fn select_by_hash(db: &Db, key_hash: &str) -> ApiResult<worker::D1PreparedStatement> {
    super::stmt(db, &by_hash_sql(), &[key_hash.into()])
}

fn by_hash_sql() -> String {
    format!("SELECT {COLUMNS} FROM api_keys WHERE key_hash = ?1")
}

pub(crate) async fn list(db: &Db, org: &str) -> ApiResult<Vec<ApiKeyRow>> {
    all(
        db,
        &format!(
            "SELECT {COLUMNS} FROM api_keys WHERE organization_id = ?1 ORDER BY created_at, id"
        ),
        &[org.into()],
    )
    .await
}

pub(crate) struct NewApiKey<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) key_prefix: &'a str,
    pub(crate) key_hash: &'a str,
    pub(crate) role: &'a str,
    pub(crate) scopes_json: &'a str,
    pub(crate) created_at: i64,
}

pub(crate) fn insert(db: &Db, key: &NewApiKey<'_>) -> ApiResult<worker::D1PreparedStatement> {
    super::stmt(
        db,
        "INSERT INTO api_keys (id, organization_id, name, key_prefix, key_hash, role, scopes, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        &[
            key.id.into(),
            key.organization_id.into(),
            key.name.into(),
            key.key_prefix.into(),
            key.key_hash.into(),
            key.role.into(),
            key.scopes_json.into(),
            Arg::Int(key.created_at),
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
        "UPDATE api_keys SET revoked_at = ?3 WHERE organization_id = ?1 AND id = ?2 AND revoked_at IS NULL",
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
        "SELECT name FROM organizations WHERE id = ?1",
        &[org.into()],
    )
    .await?;
    Ok(row.map(|r| r.name))
}
