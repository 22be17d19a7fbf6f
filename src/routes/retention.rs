//! How long an organization keeps its finished jobs (`/api/developer/retention`): 90 days by
//! default, 1 to 400 (`edgerunner_protocol::retention`); and an admin's retention pass at once
//! (`/api/developer/retention/run`, see [`crate::retention`]).

use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::retention::RetentionDays;
use edgerunner_protocol::time::UnixMillis;
use serde_json::{json, Value};
use worker::{Request, Response};

use super::refuse_unknown;
use super::views::{respond, retention::RetentionView};
use crate::auth;
use crate::error::{json_response, ApiError, ApiResult};
use crate::http::{json_object_capped, SMALL_BODY_BYTES};
use crate::store::{events, retention};
use crate::Ctx;

/// `GET /api/developer/retention`.
pub(crate) async fn get_setting(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let org = caller.organization_id.as_str();
    let row = retention::setting(&ctx.db, org)
        .await?
        .ok_or_else(|| ApiError::internal("an authenticated key's organization vanished"))?;
    respond(200, &RetentionView::of(org, &row))
}

/// `PUT /api/developer/retention`: `{"retentionDays": 1..=400}`, recorded as a
/// `retention.set` event. Anything else is `422 INVALID_RETENTION`, missing included.
pub(crate) async fn put_setting(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    refuse_unknown(&body, &["retentionDays"])?;
    let days = body
        .get("retentionDays")
        .ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::InvalidRetention,
                "retentionDays is required: a whole number of days from 1 to 400",
            )
        })
        .and_then(|value| {
            RetentionDays::from_json(value).map_err(|error| {
                ApiError::unprocessable(ErrorCode::InvalidRetention, error.to_string())
            })
        })?;
    let org = caller.organization_id.as_str();
    let actor = caller.actor();
    let detail = json!({ "retentionDays": days.get() }).to_string();
    events::set_organization_setting(
        &ctx.db,
        retention::set_days(&ctx.db, org, days.get())?,
        &events::NewEvent::of_organization(
            org,
            &actor,
            EventKind::RetentionSet,
            Some(&detail),
            ctx.now,
        ),
    )
    .await?;
    let row = retention::setting(&ctx.db, org)
        .await?
        .ok_or_else(|| ApiError::internal("an authenticated key's organization vanished"))?;
    respond(200, &RetentionView::of(org, &row))
}

/// `POST /api/developer/retention/run` `{"limit"?: 1-25, "asOf"?: RFC 3339}`: one bounded
/// retention pass over the caller's organization, at once. `asOf` (the time the pass runs as)
/// is for local test servers only: anywhere else it is `403 LOCAL_HOOKS_ONLY`, so nothing in
/// production lets a caller move the clock.
pub(crate) async fn run(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    refuse_unknown(&body, &["limit", "asOf"])?;
    let limit = match body.get("limit") {
        None | Some(Value::Null) => crate::retention::JOBS_PER_PASS,
        Some(value) => value
            .as_i64()
            .filter(|n| (1..=crate::retention::JOBS_PER_PASS).contains(n))
            .ok_or_else(|| {
                ApiError::unprocessable(
                    ErrorCode::InvalidLimit,
                    format!(
                        "limit must be an integer from 1 to {}",
                        crate::retention::JOBS_PER_PASS
                    ),
                )
            })?,
    };
    let now = match body.get("asOf") {
        None | Some(Value::Null) => ctx.now,
        Some(value) => {
            if !crate::platform::local_hooks(&ctx.env) {
                return Err(ApiError::new(
                    403,
                    ErrorCode::LocalHooksOnly,
                    "asOf is honoured only by a local test server",
                ));
            }
            value
                .as_str()
                .and_then(|text| UnixMillis::parse_rfc3339(text).ok())
                .map(UnixMillis::get)
                .ok_or_else(|| {
                    ApiError::unprocessable(
                        ErrorCode::InvalidField,
                        "asOf must be an RFC 3339 time",
                    )
                })?
        }
    };
    let org = caller.organization_id.as_str();
    let report = crate::retention::pass(&ctx.env, Some(org), now, limit, &caller.actor()).await?;
    json_response(200, &report).map_err(ApiError::from)
}
