//! `/api/developer/api-keys`: more keys for an organization; shown once, stored hashed.

use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::EventKind;
use serde_json::{json, Value};
use worker::{Request, Response};

use super::{optional_str, refuse_unknown, required_name};
use crate::auth::{self, SCOPES};
use crate::error::{json_response, ApiError, ApiResult};
use crate::http::json_object;
use crate::platform::{random_id, random_secret, rfc3339, secret_hash};
use crate::store::{self, api_keys, events};
use crate::Ctx;

fn view(row: &api_keys::ApiKeyRow) -> Value {
    json!({
        "id": row.id,
        "name": row.name,
        "prefix": row.key_prefix,
        "role": row.role,
        "scopes": serde_json::from_str::<Value>(&row.scopes).unwrap_or(Value::Null),
        "createdAt": rfc3339(row.created_at),
        "lastUsedAt": row.last_used_at.and_then(rfc3339),
        "revokedAt": row.revoked_at.and_then(rfc3339),
    })
}

pub(crate) async fn create(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["name", "scopes", "role"])?;
    let name = required_name(&body, "name", 200)?;
    let role = optional_str(&body, "role", 16)?.unwrap_or("member");
    if role != "admin" && role != "member" {
        return Err(ApiError::unprocessable(
            ErrorCode::InvalidRole,
            "role must be admin or member",
        ));
    }
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

    let id = random_id("key")?;
    let key = random_secret(auth::API_KEY_PREFIX)?;
    let hash = secret_hash(&key);
    let row = api_keys::NewApiKey {
        id: &id,
        organization_id: &caller.organization_id,
        name,
        key_prefix: &key[..12],
        key_hash: &hash,
        role,
        scopes_json: &scopes_json,
        created_at: ctx.now,
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
                    organization_id: &caller.organization_id,
                    job_id: None,
                    runner_id: None,
                    claim_id: None,
                    actor: &actor,
                    kind: EventKind::ApiKeyCreated,
                    attempt: None,
                    reason: Some(name),
                    detail_json: Some(&detail),
                    at: ctx.now,
                },
            )?,
        ],
    )
    .await?;
    json_response(
        201,
        &json!({
            "id": id,
            "name": name,
            "prefix": &key[..12],
            "role": role,
            "scopes": scopes,
            "createdAt": rfc3339(ctx.now),
            "apiKey": key,
        }),
    )
    .map_err(ApiError::from)
}

pub(crate) async fn list(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let rows = api_keys::list(&ctx.db, &caller.organization_id).await?;
    json_response(
        200,
        &json!({ "apiKeys": rows.iter().map(view).collect::<Vec<_>>() }),
    )
    .map_err(ApiError::from)
}

pub(crate) async fn revoke(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let actor = caller.actor();
    let event = events::NewEvent {
        organization_id: &caller.organization_id,
        job_id: None,
        runner_id: None,
        claim_id: None,
        actor: &actor,
        kind: EventKind::ApiKeyRevoked,
        attempt: None,
        reason: None,
        detail_json: Some(&json!({ "apiKeyId": id }).to_string()),
        at: ctx.now,
    };
    let changed = store::batch(
        &ctx.db,
        vec![
            api_keys::revoke(&ctx.db, &caller.organization_id, id, ctx.now)?,
            events::insert_if_changed(&ctx.db, &event)?,
        ],
    )
    .await?;
    store::expect_one(changed[0], || {
        ApiError::not_found("no live API key with that id")
    })?;
    json_response(200, &json!({ "id": id, "revokedAt": rfc3339(ctx.now) })).map_err(ApiError::from)
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
    json_response(
        200,
        &json!({
            "organization": { "id": org, "name": name },
            "apiKey": view(&caller.key),
        }),
    )
    .map_err(ApiError::from)
}
