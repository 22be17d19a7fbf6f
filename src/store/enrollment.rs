//! `organizations.enrollment_policy` and `enrollment_tokens` (migration 0009): who may enroll a
//! key-pair runner into an organization. A token is found by the SHA-256 of what the runner
//! presents, always within one organization; the token itself is never stored.

use edgerunner_protocol::enrollment::{EnrollmentPolicy, TokenState};
use serde::Deserialize;
use worker::D1PreparedStatement;

use super::{all, first, stmt, Arg, Db};
use crate::error::ApiResult;

#[derive(Deserialize)]
pub(crate) struct OrganizationPolicy {
    pub(crate) enrollment_policy: EnrollmentPolicy,
}

/// The organization's policy as stored, `None` for an unknown organization.
pub(crate) async fn policy(db: &Db, org: &str) -> ApiResult<Option<OrganizationPolicy>> {
    first(
        db,
        include_str!("queries/enrollment/policy.sql"),
        &[org.into()],
    )
    .await
}

/// Sets the policy; 1 row for a known organization.
pub(crate) fn set_policy(
    db: &Db,
    org: &str,
    policy: EnrollmentPolicy,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/enrollment/set_policy.sql"),
        &[org.into(), policy.as_str().into()],
    )
}

/// The caps the pending-enrollment triggers read, from this Worker's configuration, written
/// only when they differ (so a steady configuration costs no write).
pub(crate) fn set_pending_caps(
    db: &Db,
    org: &str,
    per_organization: i64,
    per_network: i64,
    per_site: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/enrollment/set_pending_caps.sql"),
        &[
            org.into(),
            per_organization.into(),
            per_network.into(),
            per_site.into(),
        ],
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

impl TokenRow {
    /// The token's state at `now` (the protocol's rule).
    pub(crate) fn state(&self, now: i64) -> TokenState {
        TokenState::at(
            self.revoked_at.is_some(),
            self.uses,
            self.max_uses,
            self.expires_at,
            now,
        )
    }
}

/// The organization's token whose hash this is; another organization's token is not found.
pub(crate) async fn by_hash(db: &Db, org: &str, token_hash: &str) -> ApiResult<Option<TokenRow>> {
    first(
        db,
        include_str!("queries/enrollment/by_hash.sql"),
        &[org.into(), token_hash.into()],
    )
    .await
}

/// The newest `limit` tokens of the organization, newest first.
pub(crate) async fn list(db: &Db, org: &str, limit: i64) -> ApiResult<Vec<TokenRow>> {
    all(
        db,
        include_str!("queries/enrollment/list.sql"),
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
        include_str!("queries/enrollment/insert.sql"),
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
        include_str!("queries/enrollment/revoke.sql"),
        &[org.into(), id.into(), now.into()],
    )
}

/// Deletes tokens that expired before `cutoff` and admitted no runner (a used one stays, as
/// the runners it admitted name it), at most `limit` of them.
pub(crate) fn purge(db: &Db, cutoff: i64, limit: i64) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/enrollment/purge.sql"),
        &[cutoff.into(), limit.into()],
    )
}
