//! `organizations.enrollment_policy` and `enrollment_tokens` (migration 0009): who may enroll a
//! key-pair runner into an organization. A token is found by the SHA-256 of what the runner
//! presents, always within one organization; the token itself is never stored.

use serde::Deserialize;
use worker::D1PreparedStatement;

use super::{all, first, stmt, Arg, Db};
use crate::error::ApiResult;

#[derive(Deserialize)]
pub(crate) struct OrganizationPolicy {
    pub(crate) enrollment_policy: String,
}

/// The organization's policy as stored, `None` for an unknown organization.
pub(crate) async fn policy(db: &Db, org: &str) -> ApiResult<Option<OrganizationPolicy>> {
    first(
        db,
        "SELECT enrollment_policy FROM organizations WHERE id = ?1",
        &[org.into()],
    )
    .await
}

/// Sets the policy; 1 row for a known organization.
pub(crate) fn set_policy(db: &Db, org: &str, policy: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "UPDATE organizations SET enrollment_policy = ?2 WHERE id = ?1",
        &[org.into(), policy.into()],
    )
}

/// The caps the pending-enrollment triggers read, from this Worker's configuration, written
/// only when they differ (so a steady configuration costs no write).
pub(crate) fn set_pending_caps(
    db: &Db,
    org: &str,
    per_organization: i64,
    per_network: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "UPDATE organizations SET max_pending_enrollments = ?2, max_pending_enrollments_per_network = ?3 \
         WHERE id = ?1 AND (max_pending_enrollments <> ?2 OR max_pending_enrollments_per_network <> ?3)",
        &[org.into(), per_organization.into(), per_network.into()],
    )
}

#[derive(Deserialize)]
pub(crate) struct TokenRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) token_prefix: String,
    pub(crate) max_uses: i64,
    pub(crate) uses: i64,
    pub(crate) created_at: i64,
    pub(crate) created_by: String,
    pub(crate) expires_at: i64,
    pub(crate) revoked_at: Option<i64>,
    pub(crate) last_used_at: Option<i64>,
}

const COLUMNS: &str =
    "id, name, token_prefix, max_uses, uses, created_at, created_by, expires_at, \
                       revoked_at, last_used_at";

/// The organization's token whose hash this is; another organization's token is not found.
pub(crate) async fn by_hash(db: &Db, org: &str, token_hash: &str) -> ApiResult<Option<TokenRow>> {
    first(
        db,
        &format!(
            "SELECT {COLUMNS} FROM enrollment_tokens WHERE organization_id = ?1 AND token_hash = ?2"
        ),
        &[org.into(), token_hash.into()],
    )
    .await
}

/// The newest `limit` tokens of the organization, newest first.
pub(crate) async fn list(db: &Db, org: &str, limit: i64) -> ApiResult<Vec<TokenRow>> {
    all(
        db,
        &format!(
            "SELECT {COLUMNS} FROM enrollment_tokens WHERE organization_id = ?1 \
             ORDER BY created_at DESC, id DESC LIMIT ?2"
        ),
        &[org.into(), limit.into()],
    )
    .await
}

pub(crate) struct NewToken<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) token_prefix: &'a str,
    pub(crate) token_hash: &'a str,
    pub(crate) max_uses: i64,
    pub(crate) created_at: i64,
    pub(crate) created_by: &'a str,
    pub(crate) expires_at: i64,
}

/// The insert; the schema refuses the 101st live token of an organization
/// (`enrollment_tokens_at_cap`).
pub(crate) fn insert(db: &Db, t: &NewToken<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "INSERT INTO enrollment_tokens (id, organization_id, name, token_prefix, token_hash, max_uses, \
           created_at, created_by, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        &[
            t.id.into(),
            t.organization_id.into(),
            t.name.into(),
            t.token_prefix.into(),
            t.token_hash.into(),
            Arg::Int(t.max_uses),
            Arg::Int(t.created_at),
            t.created_by.into(),
            Arg::Int(t.expires_at),
        ],
    )
}

/// Revokes a token of the organization not yet revoked; 0 rows when it is unknown, foreign or
/// already revoked.
pub(crate) fn revoke(db: &Db, org: &str, id: &str, now: i64) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "UPDATE enrollment_tokens SET revoked_at = ?3 \
         WHERE organization_id = ?1 AND id = ?2 AND revoked_at IS NULL",
        &[org.into(), id.into(), now.into()],
    )
}

/// Deletes tokens that expired before `cutoff` and admitted no runner (a used one stays, as
/// the runners it admitted name it), at most `limit` of them.
pub(crate) fn purge(db: &Db, cutoff: i64, limit: i64) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "DELETE FROM enrollment_tokens WHERE rowid IN (SELECT rowid FROM enrollment_tokens \
           WHERE expires_at < ?1 AND uses = 0 LIMIT ?2)",
        &[cutoff.into(), limit.into()],
    )
}
