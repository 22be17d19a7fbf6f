//! `/api/developer/api-keys`: more keys for an organization; shown once, stored hashed.

use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::{EventKind, Role};
use serde_json::{json, Value};
use worker::{Request, Response};

use super::views::api_keys::{
    ApiKeyListView, ApiKeyView, MadeApiKeyView, OrganizationView, OwnApiKeyView, RevokedApiKeyView,
};
use super::views::respond;
use super::{optional_str, refuse_unknown, required_name};
use crate::auth::{self, SCOPES};
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::json_object;
use crate::platform::{random_id, random_secret, rfc3339, secret_hash};
use crate::store::writes::Writes;
use crate::store::{self, api_keys, events};

const DAY_MILLIS: i64 = 86_400_000;
/// A key's lifetime in days when the request names none: long enough for a CI secret to be
/// rotated on a schedule, short enough that a key leaked and forgotten ends by itself.
const DEFAULT_EXPIRES_IN_DAYS: i64 = 90;
const MAX_EXPIRES_IN_DAYS: i64 = 365;

/// `expiresInDays`: a whole number from 1 to [`MAX_EXPIRES_IN_DAYS`], the default when absent
/// or null.
fn expires_in_days(body: &serde_json::Map<String, Value>) -> ApiResult<i64> {
    match body.get("expiresInDays") {
        None | Some(Value::Null) => Ok(DEFAULT_EXPIRES_IN_DAYS),
        Some(value) => value
            .as_i64()
            .filter(|days| (1..=MAX_EXPIRES_IN_DAYS).contains(days))
            .ok_or_else(|| {
                ApiError::unprocessable(
                    ErrorCode::InvalidExpiresIn,
                    format!("expiresInDays must be a whole number from 1 to {MAX_EXPIRES_IN_DAYS}"),
                )
            }),
    }
}

pub(crate) async fn create(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["name", "scopes", "role", "expiresInDays"])?;
    let name = required_name(&body, "name", 200)?;
    let role = match optional_str(&body, "role", 16)? {
        None => Role::Member,
        Some(text) => Role::parse(text).ok_or_else(|| {
            ApiError::unprocessable(ErrorCode::InvalidRole, "role must be admin or member")
        })?,
    };
    let scopes: Vec<&str> = match body.get("scopes") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|s| s.as_str().filter(|s| SCOPES.contains(s)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::unprocessable(
                    ErrorCode::InvalidScopes,
                    format!("scopes must be a subset of {SCOPES:?}"),
                )
            })?,
        _ => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidScopes,
                "scopes must be a non-empty array",
            ))
        }
    };
    let mut scopes = scopes;
    scopes.sort_unstable();
    scopes.dedup();
    let scopes_json = serde_json::to_string(&scopes).map_err(ApiError::internal)?;

    let expires_at = ctx.now + expires_in_days(&body)? * DAY_MILLIS;

    let id = random_id("key")?;
    let key = random_secret(auth::API_KEY_PREFIX)?;
    let hash = secret_hash(&key);
    let row = api_keys::NewApiKey {
        id: &id,
        organization_id: &caller.organization_id,
        name,
        key_prefix: key
            .get(..12)
            .ok_or_else(|| ApiError::internal("a new API key shorter than its prefix"))?,
        key_hash: &hash,
        role,
        scopes_json: &scopes_json,
        created_at: ctx.now,
        expires_at,
    };
    let actor = caller.actor();
    let detail = json!({ "apiKeyId": id, "role": role, "scopes": scopes }).to_string();
    store::batch(
        &ctx.db,
        vec![
            api_keys::insert(&ctx.db, &row)?,
            events::insert(
                &ctx.db,
                &events::NewEvent {
                    reason: Some(name),
                    ..events::NewEvent::of_organization(
                        &caller.organization_id,
                        &actor,
                        EventKind::ApiKeyCreated,
                        Some(&detail),
                        ctx.now,
                    )
                },
            )?,
        ],
    )
    .await?;
    // The key as it is stored and will be listed.
    let made = api_keys::ApiKeyRow {
        id,
        organization_id: caller.organization_id.clone(),
        name: name.to_owned(),
        key_prefix: key[..12].to_owned(),
        role,
        scopes: scopes_json,
        created_at: ctx.now,
        last_used_at: None,
        revoked_at: None,
        expires_at: Some(expires_at),
    };
    respond(
        201,
        &MadeApiKeyView {
            key: ApiKeyView::from(&made),
            api_key: &key,
        },
    )
}

pub(crate) async fn list(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let rows = api_keys::list(&ctx.db, &caller.organization_id).await?;
    respond(
        200,
        &ApiKeyListView {
            api_keys: rows.iter().map(ApiKeyView::from).collect(),
        },
    )
}

pub(crate) async fn revoke(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let actor = caller.actor();
    let detail = json!({ "apiKeyId": id }).to_string();
    let event = events::NewEvent::of_organization(
        &caller.organization_id,
        &actor,
        EventKind::ApiKeyRevoked,
        Some(&detail),
        ctx.now,
    );
    let mut writes = Writes::default();
    let revoked = writes.any(api_keys::revoke(
        &ctx.db,
        &caller.organization_id,
        id,
        ctx.now,
    )?);
    writes.any(events::insert_if_changed(&ctx.db, &event)?);
    let changed = store::writes::write(&ctx.db, writes).await?;
    store::expect_one(changed.at(revoked), || {
        ApiError::not_found("no live API key with that id")
    })?;
    respond(
        200,
        &RevokedApiKeyView {
            id,
            revoked_at: rfc3339(ctx.now),
        },
    )
}

/// `GET /api/developer/api-keys/self`: the calling key and its organization, for any live key
/// (the panel shows them and offers only the controls the key's scopes and role allow).
pub(crate) async fn get_self(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    // The key itself is what authentication already read; only the organization's name is new.
    let org = caller.organization_id.as_str();
    let name = api_keys::organization_name(&ctx.db, org)
        .await?
        .ok_or_else(|| ApiError::internal("an authenticated key's organization vanished"))?;
    respond(
        200,
        &OwnApiKeyView {
            organization: OrganizationView {
                id: org,
                name: &name,
            },
            api_key: ApiKeyView::from(&caller.key),
        },
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map, Value};

    use super::{expires_in_days, DEFAULT_EXPIRES_IN_DAYS};
    use crate::store::api_keys::ApiKeyRow;

    fn body(value: Value) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("expiresInDays".to_owned(), value);
        body
    }

    #[test]
    fn a_key_lives_90_days_unless_asked_for_1_to_365() {
        assert_eq!(
            expires_in_days(&Map::new()).ok(),
            Some(DEFAULT_EXPIRES_IN_DAYS)
        );
        assert_eq!(expires_in_days(&body(Value::Null)).ok(), Some(90));
        assert_eq!(expires_in_days(&body(json!(1))).ok(), Some(1));
        assert_eq!(expires_in_days(&body(json!(365))).ok(), Some(365));
        for bad in [json!(0), json!(366), json!(-1), json!("30"), json!(1.5)] {
            let err = expires_in_days(&body(bad.clone())).expect_err("refused");
            assert_eq!(err.status(), 422, "{bad}");
        }
    }

    #[test]
    fn a_key_is_live_until_its_end_and_one_without_an_end_until_revoked() {
        let key = |revoked_at, expires_at| ApiKeyRow {
            id: "key_1".into(),
            organization_id: "org_1".into(),
            name: "ci".into(),
            key_prefix: "erk_01234567".into(),
            role: edgerunner_protocol::kind::Role::Member,
            scopes: "[]".into(),
            created_at: 0,
            last_used_at: None,
            revoked_at,
            expires_at,
        };
        assert!(key(None, Some(10)).live_at(9));
        assert!(!key(None, Some(10)).live_at(10));
        assert!(key(None, None).live_at(i64::MAX));
        assert!(!key(Some(5), None).live_at(6));
    }
}
