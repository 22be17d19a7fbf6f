//! How long an organization keeps its finished jobs (`/api/developer/retention`): 90 days by
//! default, 1 to 400 (`edgerunner_protocol::retention`); an admin's retention pass at once
//! (`/api/developer/retention/run`, see [`crate::retention`]); an admin's hold on a finished
//! job (`/api/remote-runners/jobs/{id}/hold`), which retention passes by; and what the
//! organization stores (`/api/developer/usage`).

use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::retention::RetentionDays;
use edgerunner_protocol::time::UnixMillis;
use serde_json::{json, Value};
use worker::{Request, Response};

use super::views::jobs::JobView;
use super::views::respond;
use super::views::retention::{RetentionView, UsageView};
use super::{refuse_unknown, required_str};
use crate::auth;
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::{json_object_capped, SMALL_BODY_BYTES};
use crate::store::{events, jobs, retention, usage};

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
    respond(200, &report)
}

/// `GET /api/developer/usage`: what the organization stores, in one bounded read.
pub(crate) async fn usage(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let org = caller.organization_id.as_str();
    let (row, database_bytes) = usage::read(&ctx.db, org, ctx.now)
        .await?
        .ok_or_else(|| ApiError::internal("an authenticated key's organization vanished"))?;
    let default_quota = usage::default_quota(&ctx.env);
    respond(
        200,
        &UsageView::of(org, &row, database_bytes, default_quota),
    )
}

/// The organization's job for a hold or its release: an unknown, foreign or expiring job is
/// `404`, a live one `409 JOB_NOT_FINISHED`.
async fn finished_job(ctx: &Ctx, org: &str, id: &str) -> ApiResult<jobs::JobRow> {
    let job = jobs::get(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    if !job.state.is_terminal() {
        return Err(ApiError::conflict(
            ErrorCode::JobNotFinished,
            format!("the job is {}; only a finished job is held", job.state),
        ));
    }
    Ok(job)
}

/// The job as it stands after a hold or a release (gone in between: `404`).
async fn job_now(ctx: &Ctx, org: &str, id: &str) -> ApiResult<Response> {
    let job = jobs::get(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    respond(200, &JobView::from(&job))
}

/// `POST /api/remote-runners/jobs/{id}/hold` `{"reason"}`: the finished job is kept past its
/// retention until released, recorded as a `job.held` event of the organization (a job's own
/// events are its archive's). Holding a held job changes nothing and answers it as it is.
pub(crate) async fn hold(mut req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    refuse_unknown(&body, &["reason"])?;
    let reason = required_str(&body, "reason", 1000).map_err(|_| {
        ApiError::unprocessable(
            ErrorCode::ReasonRequired,
            "a hold needs a reason (1 to 1000 characters)",
        )
    })?;
    let org = caller.organization_id.as_str();
    let job = finished_job(ctx, org, id).await?;
    if job.held_at.is_none() {
        let actor = caller.actor();
        let detail = json!({ "jobId": id }).to_string();
        let event = events::NewEvent {
            reason: Some(reason),
            ..events::NewEvent::of_organization(
                org,
                &actor,
                EventKind::JobHeld,
                Some(&detail),
                ctx.now,
            )
        };
        retention::hold(&ctx.db, org, id, ctx.now, &actor, reason, &event).await?;
    }
    job_now(ctx, org, id).await
}

/// `DELETE /api/remote-runners/jobs/{id}/hold`: retention applies to the job again, recorded
/// as a `job.hold_released` event. Releasing a job that is not held changes nothing.
pub(crate) async fn release(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let org = caller.organization_id.as_str();
    let job = finished_job(ctx, org, id).await?;
    if job.held_at.is_some() {
        let actor = caller.actor();
        let detail = json!({ "jobId": id }).to_string();
        let event = events::NewEvent::of_organization(
            org,
            &actor,
            EventKind::JobHoldReleased,
            Some(&detail),
            ctx.now,
        );
        retention::release(&ctx.db, org, id, &event).await?;
    }
    job_now(ctx, org, id).await
}
