//! Who is calling: an admin through an API key, or a runner through its short-lived credential.
//!
//! Handlers take the proof types built here ([`AdminCaller`], [`RunnerCaller`]) as input, so a
//! route cannot forget to authenticate, and the two kinds of credential never cross: an API key
//! on a runner route and a runner credential on an admin route are both `401`.

use std::cell::RefCell;

use edgerunner_protocol::credential::{self, CredentialError, VerifiedCredential};
use edgerunner_protocol::kind::Role;
use worker::Request;

use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::bearer_token;
use crate::memo::Expiring;
use crate::platform::secret_hash;
use crate::secrets::master_secret;
use crate::store::{api_keys, runners};

pub(crate) const API_KEY_PREFIX: &str = "erk";
pub(crate) const SCOPES: [&str; 4] = ["runs:read", "runs:write", "admin:org", "metrics:read"];

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    RunsRead,
    RunsWrite,
    AdminOrg,
    /// The queues view and `/metrics` only (a scraper's or an autoscaler's key).
    MetricsRead,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::RunsRead => "runs:read",
            Scope::RunsWrite => "runs:write",
            Scope::AdminOrg => "admin:org",
            Scope::MetricsRead => "metrics:read",
        }
    }
}

/// An authenticated API key: its organization, role and scopes.
pub(crate) struct AdminCaller {
    pub(crate) organization_id: String,
    pub(crate) key_id: String,
    role_admin: bool,
    scopes: Vec<String>,
    /// The key's row as authentication read it (never its secret: only a hash is stored).
    pub(crate) key: api_keys::ApiKeyRow,
}

impl AdminCaller {
    /// The audit trail's name for this caller.
    pub(crate) fn actor(&self) -> String {
        format!("api_key:{}", self.key_id)
    }

    /// One of `scopes` (`403` naming them all when the key has none).
    pub(crate) fn require_one_of(&self, scopes: &[Scope]) -> ApiResult<()> {
        if scopes.iter().any(|scope| self.require(*scope).is_ok()) {
            return Ok(());
        }
        let names: Vec<&str> = scopes.iter().map(|scope| scope.as_str()).collect();
        Err(ApiError::forbidden(format!(
            "this API key has none of the scopes {}",
            names.join(", ")
        )))
    }

    pub(crate) fn require(&self, scope: Scope) -> ApiResult<()> {
        if self.scopes.iter().any(|s| s == scope.as_str()) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "this API key lacks the {} scope",
                scope.as_str()
            )))
        }
    }

    /// `admin:org` *and* the admin role, as runner administration requires.
    pub(crate) fn require_admin(&self) -> ApiResult<()> {
        self.require(Scope::AdminOrg)?;
        if self.role_admin {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "runner administration requires the admin role",
            ))
        }
    }
}

pub(crate) async fn admin(req: &Request, ctx: &Ctx) -> ApiResult<AdminCaller> {
    let key = PresentedKey::of(req, ctx)?;
    let row = api_keys::by_hash(&ctx.db, key.hash()).await?;
    key.caller(req, ctx, row).await
}

/// Whether `token` has the form every API key is minted in (`random_secret(API_KEY_PREFIX)`
/// and `scripts/bootstrap-admin`): `erk_` and 64 lowercase hex digits. Anything else cannot be
/// a key, so it is refused without a read.
pub(crate) fn is_api_key_form(token: &str) -> bool {
    token.strip_prefix("erk_").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The API key a request presents, checked for its form only (no D1 yet). A route whose first
/// read is scoped to the caller's organization can send the key's lookup in that same read
/// (`store::jobs::select_by_idempotency_key_of_key`) and authenticate from its result ([`PresentedKey::caller`]).
pub(crate) struct PresentedKey {
    hash: String,
}

impl PresentedKey {
    /// `401` for a missing credential or one that is not of an API key's form, `429` when this
    /// network has just failed too many keys: all without I/O, so a caller who cannot hold a
    /// key costs no read (and no body read: routes call this first).
    pub(crate) fn of(req: &Request, ctx: &Ctx) -> ApiResult<Self> {
        let token = bearer_token(req)?;
        if !token.starts_with("erk_") {
            return Err(ApiError::unauthorized(
                "admin endpoints take an API key, not a runner credential",
            ));
        }
        if !is_api_key_form(&token) {
            return Err(ApiError::unauthorized(
                "not an API key: keys are erk_ and 64 lowercase hex digits",
            ));
        }
        crate::objects::gate::refused_network(req, ctx.now)?;
        // Looked up by hash: the stored value is useless to a reader of the database, and
        // equality of two SHA-256 digests reveals nothing about the key through timing.
        Ok(Self {
            hash: secret_hash(&token),
        })
    }

    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }

    /// Whether this isolate authenticated this key within [`KEY_MEMORY_MILLIS`]. Never a
    /// reason to let a caller in: a route that reads its body before its key's lookup (to send
    /// that lookup in its one read) does so only for a key seen valid, and asks D1 first for
    /// any other, so a caller without a live key never gets its body read.
    pub(crate) fn recently_authenticated(&self, now: i64) -> bool {
        AUTHENTICATED.with(|memo| memo.borrow().until(&self.hash, now).is_some())
    }

    /// The caller, from the key's row as read (`None`: no such key): `401` for an unknown,
    /// revoked or expired key, counted against the request's network (`429` once it has failed too many).
    pub(crate) async fn caller(
        &self,
        req: &Request,
        ctx: &Ctx,
        row: Option<api_keys::ApiKeyRow>,
    ) -> ApiResult<AdminCaller> {
        let Some(row) = row.filter(|row| row.live_at(ctx.now)) else {
            crate::objects::gate::count_failed_key(&ctx.env, ctx.db.trips(), req, ctx.now).await?;
            return Err(ApiError::unauthorized(
                "unknown, revoked or expired API key",
            ));
        };
        let scopes: Vec<String> = serde_json::from_str(&row.scopes).map_err(ApiError::internal)?;
        AUTHENTICATED.with(|memo| {
            memo.borrow_mut()
                .remember(&self.hash, ctx.now + KEY_MEMORY_MILLIS, ctx.now)
        });
        ctx.seen.organization(&row.organization_id);
        Ok(AdminCaller {
            organization_id: row.organization_id.clone(),
            key_id: row.id.clone(),
            role_admin: row.role == Role::Admin,
            scopes,
            key: row,
        })
    }
}

/// How long an isolate remembers that a key authenticated ([`PresentedKey::recently_authenticated`]).
const KEY_MEMORY_MILLIS: i64 = 5 * 60 * 1000;

/// The most keys one isolate remembers as authenticated; past it a key is simply looked up
/// before its body is read, one D1 read more.
const MAX_REMEMBERED_KEYS: usize = 1024;

thread_local! {
    /// Key hash → when its memory ends. A Worker isolate runs one thread.
    static AUTHENTICATED: RefCell<Expiring> = RefCell::new(Expiring::new(MAX_REMEMBERED_KEYS));
}

/// A runner whose credential we issued, that has not expired, whose generation is still the
/// runner's current one, and whose runner is not revoked.
pub(crate) struct RunnerCaller {
    pub(crate) runner: runners::RunnerRow,
}

impl RunnerCaller {
    pub(crate) fn organization_id(&self) -> &str {
        &self.runner.organization_id
    }

    pub(crate) fn runner_id(&self) -> &str {
        &self.runner.id
    }
}

/// A credential we issued and that has not expired — without asking whether its generation is
/// still current. Only for callers that check the generation themselves against the runner's
/// live row (the runner's object does, on every claim).
pub(crate) fn runner_credential(req: &Request, ctx: &Ctx) -> ApiResult<VerifiedCredential> {
    let token = bearer_token(req)?;
    if token.starts_with("erk_") {
        return Err(ApiError::unauthorized(
            "runner endpoints take a runner credential, not an API key",
        ));
    }
    let master = master_secret(&ctx.env)?;
    let verified = credential::verify(&master, &token, ctx.now)
        .map_err(|e: CredentialError| ApiError::unauthorized(e.to_string()))?;
    ctx.seen.organization(&verified.claims().organization_id);
    Ok(verified)
}

pub(crate) async fn runner(req: &Request, ctx: &Ctx) -> ApiResult<RunnerCaller> {
    let verified = runner_credential(req, ctx)?;
    let claims = verified.claims();
    let runner = runners::get(&ctx.db, &claims.organization_id, &claims.runner_id)
        .await?
        .ok_or_else(|| ApiError::unauthorized("the credential's runner no longer exists"))?;
    if !runner.state.can_authenticate() {
        return Err(ApiError::unauthorized(format!(
            "runner is {}",
            runner.state
        )));
    }
    if i64::try_from(claims.generation).ok() != Some(runner.credential_generation) {
        return Err(ApiError::unauthorized(
            "credential was revoked by a rotation; exchange a new one",
        ));
    }
    Ok(RunnerCaller { runner })
}

#[cfg(test)]
mod tests {
    use super::is_api_key_form;

    #[test]
    fn only_keys_of_the_minted_form_are_looked_up() {
        let minted = format!("erk_{}", "0123456789abcdef".repeat(4));
        assert!(is_api_key_form(&minted));
        for bad in [
            "erk_x".to_owned(),
            "erk_".to_owned(),
            format!("erk_{}", "a".repeat(63)),
            format!("erk_{}", "a".repeat(65)),
            format!("erk_{}", "A".repeat(64)),
            format!("erk_{}", "g".repeat(64)),
            format!("ERK_{}", "a".repeat(64)),
        ] {
            assert!(!is_api_key_form(&bad), "{bad:?}");
        }
    }
}
