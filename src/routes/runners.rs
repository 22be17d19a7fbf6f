//! Runner administration: register, list, inspect, change status or tags, rotate, audit, files.

use edgerunner_protocol::capability::parse_tags;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::{EventKind, IdentityModel};
use edgerunner_protocol::state::{RunnerInput, RunnerState};
use serde_json::{json, Map, Value};
use worker::{Request, Response};

use super::views::jobs::EventView;
use super::views::respond;
use super::views::runners::{
    rotation_refusal, RegisteredRunnerView, RegistrationView, RunnerClaimView, RunnerClaimsView,
    RunnerEventsView, RunnerListView, RunnerView,
};
use super::{limit_param, optional_str, plain_number, refuse_unknown, required_name, Cursor};
use crate::auth::{self, Scope};
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::json_object;
use crate::objects;
use crate::platform::{random_id, random_secret, secret_hash};
use crate::store::batched::{self, Page};
use crate::store::writes::Writes;
use crate::store::{self, events, runners};

pub(crate) const BOOTSTRAP_TOKEN_PREFIX: &str = "erb";
/// Bootstrap tokens may be given a lifetime of at most ten years.
const MAX_BOOTSTRAP_TTL_SECONDS: i64 = 10 * 365 * 24 * 3600;
/// A bootstrap token's lifetime when the registration or rotation names none: 90 days. The
/// token is the runner's standing secret (the SDK exchanges it again whenever its credential
/// nears expiry), so it is long enough for a fleet to rotate on a schedule and short enough
/// that a token copied off a host long ago stops working by itself.
const DEFAULT_BOOTSTRAP_TTL_SECONDS: i64 = 90 * 24 * 3600;

/// When a new bootstrap token expires: `bootstrapTokenTtlSeconds` from now (1 s to ten years),
/// [`DEFAULT_BOOTSTRAP_TTL_SECONDS`] when absent or null.
pub(crate) fn bootstrap_ttl(body: &Map<String, Value>, now: i64) -> ApiResult<i64> {
    let seconds = match body.get("bootstrapTokenTtlSeconds") {
        None | Some(Value::Null) => DEFAULT_BOOTSTRAP_TTL_SECONDS,
        Some(v) => v
            .as_i64()
            .filter(|s| (1..=MAX_BOOTSTRAP_TTL_SECONDS).contains(s))
            .ok_or_else(|| {
                ApiError::unprocessable(
                    ErrorCode::InvalidField,
                    format!("bootstrapTokenTtlSeconds must be an integer from 1 to {MAX_BOOTSTRAP_TTL_SECONDS}"),
                )
            })?,
    };
    Ok(now + seconds * 1000)
}

/// `ephemeral`: `true` registers a runner for exactly one job; absent, null or `false`, a
/// runner that stays.
fn ephemeral_flag(body: &Map<String, Value>) -> ApiResult<bool> {
    match body.get("ephemeral") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(_) => Err(ApiError::unprocessable(
            ErrorCode::InvalidField,
            "ephemeral must be true or false",
        )),
    }
}

pub(crate) async fn register(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object(&mut req).await?;
    refuse_unknown(
        &body,
        &[
            "name",
            "runnerKey",
            "capabilities",
            "maxConcurrentJobs",
            "tags",
            "bootstrapTokenTtlSeconds",
            "ephemeral",
        ],
    )?;
    let name = required_name(&body, "name", 200)?;
    let runner_key = required_name(&body, "runnerKey", 200)?;
    let ephemeral = ephemeral_flag(&body)?;
    let document = super::capability_document(&body, &["maxConcurrentJobs"])?;
    // An ephemeral runner takes one job: its grant drains it (migration 0020).
    if ephemeral && document.max_concurrent_jobs() != 1 {
        return Err(ApiError::unprocessable(
            ErrorCode::InvalidField,
            "an ephemeral runner takes one job: maxConcurrentJobs must be 1 (or absent)",
        ));
    }
    let tags = match body.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => parse_tags(v)?,
    };
    let tags_json = Value::Array(
        tags.iter()
            .map(|t| Value::String(t.as_str().to_owned()))
            .collect(),
    )
    .to_string();
    let token_expires_at = bootstrap_ttl(&body, ctx.now)?;

    let id = random_id("run")?;
    let token = random_secret(BOOTSTRAP_TOKEN_PREFIX)?;
    let token_hash = secret_hash(&token);
    let capabilities = document.to_value();
    let capabilities_json = capabilities.to_string();
    let capabilities_hash = document.hash();
    let problem_types = Value::Array(
        document
            .problem_types()
            .iter()
            .map(|p| Value::String(p.as_str().to_owned()))
            .collect(),
    )
    .to_string();
    let row = runners::NewRunner {
        id: &id,
        organization_id: &caller.organization_id,
        identity_model: IdentityModel::Bootstrap,
        name,
        runner_key: Some(runner_key),
        bootstrap_token_hash: Some(&token_hash),
        bootstrap_token_expires_at: Some(token_expires_at),
        public_key: None,
        fingerprint: None,
        product: None,
        version: None,
        machine_json: None,
        address: None,
        enroll_network: None,
        enrollment_token_id: None,
        enroll_site: None,
        state: RunnerState::Active,
        capabilities_json: &capabilities_json,
        capabilities_hash: capabilities_hash.as_str(),
        protocol_version: edgerunner_protocol::capability::PROTOCOL_VERSION,
        problem_types_json: &problem_types,
        external: document.external(),
        tags_json: &tags_json,
        max_concurrent_jobs: i64::from(document.max_concurrent_jobs()),
        key_id: None,
        approved_at: Some(ctx.now),
        ephemeral,
        now: ctx.now,
    };
    let actor = caller.actor();
    let detail = json!({ "runnerKey": runner_key, "capabilityHash": capabilities_hash.as_str() })
        .to_string();
    let event = events::NewEvent {
        organization_id: &caller.organization_id,
        job_id: None,
        runner_id: Some(&id),
        claim_id: None,
        actor: &actor,
        kind: EventKind::RunnerRegistered,
        attempt: None,
        reason: None,
        detail_json: Some(&detail),
        at: ctx.now,
    };
    let result = store::batch(
        &ctx.db,
        vec![
            runners::insert(&ctx.db, &row)?,
            events::insert(&ctx.db, &event)?,
        ],
    )
    .await;
    if let Err(err) = result {
        if err.code() == ErrorCode::RunnerKeyTaken {
            return Err(ApiError::conflict(
                ErrorCode::RunnerKeyTaken,
                format!("runnerKey {runner_key} is already registered"),
            ));
        }
        return Err(err);
    }
    let runner = runners::get(&ctx.db, &caller.organization_id, &id)
        .await?
        .ok_or_else(|| ApiError::internal("registered runner vanished"))?;
    respond(
        201,
        &RegisteredRunnerView {
            runner: RunnerView::new(&runner, &[], ctx.now),
            bootstrap_token: &token,
        },
    )
}

/// `GET /api/remote-runners?limit=&cursor=`: registration order, keyset-paged.
pub(crate) async fn list(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let limit = limit_param(&req, 100, 1000)?;
    let cursor = Cursor::from_query(&req)?;
    let org = caller.organization_id.as_str();
    // One more than the page, to know whether another page follows; the fleet's counts in the
    // same round trip.
    let Page {
        mut rows,
        counts: counted,
    } = batched::runners_page(
        &ctx.db,
        org,
        cursor.as_ref().map(|c| (c.at, c.id.as_str())),
        limit + 1,
    )
    .await?;
    let next_cursor = (rows.len() as i64 > limit).then(|| {
        rows.truncate(limit as usize);
        rows.last().map(|r| Cursor::encode(r.registered_at, &r.id))
    });
    let runners: Vec<RunnerView> = rows
        .iter()
        .map(|r| RunnerView::new(r, &[], ctx.now))
        .collect();
    respond(
        200,
        &RunnerListView::new(
            runners,
            next_cursor.flatten(),
            counted
                .iter()
                .map(|c| (c.state, c.count, c.in_use, c.maximum)),
        ),
    )
}

/// `GET /api/remote-runners/registration`: what a registration may declare (the panel's
/// register dialog reads it rather than knowing it).
pub(crate) async fn registration(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    respond(200, &RegistrationView::new())
}

/// `GET /api/remote-runners/{id}/claims?limit=`: the runner's claims, newest first.
pub(crate) async fn claims(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let limit = limit_param(&req, 50, 500)?;
    load(ctx, &caller.organization_id, id).await?;
    let rows = runners::claims(
        &ctx.db,
        &caller.organization_id,
        id,
        runners::ClaimsOf::History,
        limit,
    )
    .await?;
    respond(
        200,
        &RunnerClaimsView {
            claims: rows.iter().map(RunnerClaimView::from).collect(),
        },
    )
}

async fn load(ctx: &Ctx, org: &str, id: &str) -> ApiResult<runners::RunnerRow> {
    runners::get(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such runner"))
}

pub(crate) async fn get(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let runner = load(ctx, &caller.organization_id, id).await?;
    let files = runners::record_files(&ctx.db, &caller.organization_id, id).await?;
    respond(200, &RunnerView::new(&runner, &files, ctx.now))
}

pub(crate) async fn patch(mut req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["status", "tags", "reason", "fingerprint"])?;
    let reason = match optional_str(&body, "reason", 1000) {
        Ok(Some(reason)) => reason,
        _ => {
            return Err(ApiError::unprocessable(
                ErrorCode::ReasonRequired,
                "every status or tag change needs a reason",
            ))
        }
    };
    let status = optional_str(&body, "status", 32)?;
    let tags = match body.get("tags") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_tags(v)?),
    };
    if status.is_none() && tags.is_none() {
        return Err(ApiError::unprocessable(
            ErrorCode::MissingField,
            "give a status, tags, or both",
        ));
    }
    let confirmed_fingerprint = optional_str(&body, "fingerprint", 200)?;
    let runner = load(ctx, &caller.organization_id, id).await?;
    // The admin names the fingerprint they compared with the runner's own print-out (required
    // to approve a key-pair runner, optional otherwise): a different one changes nothing.
    // The key is public, so a plain comparison leaks nothing.
    if let Some(fingerprint) = confirmed_fingerprint {
        if runner.fingerprint.as_deref() != Some(fingerprint) {
            return Err(ApiError::conflict(
                ErrorCode::FingerprintMismatch,
                "the fingerprint given is not this runner's; compare it again with the runner's",
            ));
        }
    }
    let actor = caller.actor();
    // Status and tags change together or not at all: the batch opens by asserting the runner
    // is still in the state this change was decided from.
    let mut writes = Writes::default();
    writes.any(runners::assert_state(
        &ctx.db,
        &caller.organization_id,
        id,
        runner.state,
    )?);
    // The changes whose guard must hold (one row each), or the runner moved under this request.
    let mut guarded = Vec::new();
    if let Some(status) = status {
        let current = runner.state;
        let mut input = RunnerInput::from_admin_status(status)?;
        // "active" on a pending runner is how an admin approves it.
        if current == RunnerState::PendingApproval && input == RunnerInput::Activate {
            input = RunnerInput::Approve;
        }
        // Approval is of a key: the admin must say which fingerprint they compared, whichever
        // word asked for it ("active", "approve", "approved").
        if input == RunnerInput::Approve
            && runner.fingerprint.is_some()
            && confirmed_fingerprint.is_none()
        {
            return Err(ApiError::unprocessable(
                ErrorCode::FingerprintRequired,
                "approving a key-pair runner takes the fingerprint you compared with the runner's own print-out",
            ));
        }
        let next = current.transition(input)?;
        if next != current {
            let change = runners::StateChange {
                org: &caller.organization_id,
                id,
                from: current,
                input,
                reason,
                now: ctx.now,
                key_id: None,
            };
            let mut detail = json!({ "from": current.as_str(), "to": next.as_str() });
            if let Some(fingerprint) = confirmed_fingerprint {
                detail["fingerprintConfirmed"] = fingerprint.into();
            }
            let detail = detail.to_string();
            let event = events::NewEvent {
                organization_id: &caller.organization_id,
                job_id: None,
                runner_id: Some(id),
                claim_id: None,
                actor: &actor,
                kind: match next {
                    RunnerState::Revoked => EventKind::RunnerRevoked,
                    RunnerState::Draining => EventKind::RunnerDrained,
                    _ if input == RunnerInput::Approve => EventKind::RunnerApproved,
                    _ => EventKind::RunnerActivated,
                },
                attempt: None,
                reason: Some(reason),
                detail_json: Some(&detail),
                at: ctx.now,
            };
            guarded.push(writes.any(runners::change_state(&ctx.db, &change)?));
            writes.any(events::insert_if_changed(&ctx.db, &event)?);
        }
    }
    if let Some(tags) = &tags {
        let tags_json = Value::Array(
            tags.iter()
                .map(|t| Value::String(t.as_str().to_owned()))
                .collect(),
        )
        .to_string();
        let detail =
            json!({ "tags": serde_json::from_str::<Value>(&tags_json).unwrap_or(Value::Null) })
                .to_string();
        let event = events::NewEvent {
            organization_id: &caller.organization_id,
            job_id: None,
            runner_id: Some(id),
            claim_id: None,
            actor: &actor,
            kind: EventKind::RunnerTagsChanged,
            attempt: None,
            reason: Some(reason),
            detail_json: Some(&detail),
            at: ctx.now,
        };
        guarded.push(writes.any(runners::set_tags(
            &ctx.db,
            &caller.organization_id,
            id,
            &tags_json,
            ctx.now,
        )?));
        writes.any(events::insert_if_changed(&ctx.db, &event)?);
    }
    if !guarded.is_empty() {
        let changed = store::writes::write(&ctx.db, writes).await?;
        for at in guarded {
            store::expect_one(changed.at(at), || {
                ApiError::conflict(
                    ErrorCode::RunnerChanged,
                    "the runner changed while this request was decided; reload and retry",
                )
            })?;
        }
        // What the runner's claims may get changed: its object must not answer from memory.
        objects::dispatch::touch(&ctx.env, &caller.organization_id).await;
    }
    let runner = load(ctx, &caller.organization_id, id).await?;
    let files = runners::record_files(&ctx.db, &caller.organization_id, id).await?;
    respond(200, &RunnerView::new(&runner, &files, ctx.now))
}

pub(crate) async fn rotate(mut req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["bootstrapTokenTtlSeconds", "reason"])?;
    let token_expires_at = bootstrap_ttl(&body, ctx.now)?;
    let reason = optional_str(&body, "reason", 1000)?;
    let runner = load(ctx, &caller.organization_id, id).await?;
    if let Some(refused) = rotation_refusal(runner.identity_model.as_str(), runner.state) {
        return Err(refused);
    }
    let token = random_secret(BOOTSTRAP_TOKEN_PREFIX)?;
    let token_hash = secret_hash(&token);
    let rotation = runners::Rotation {
        org: &caller.organization_id,
        id,
        read_generation: runner.credential_generation,
        token_hash: &token_hash,
        token_expires_at: Some(token_expires_at),
        now: ctx.now,
    };
    let actor = caller.actor();
    let detail = json!({ "generation": runner.credential_generation + 1 }).to_string();
    let event = events::NewEvent {
        organization_id: &caller.organization_id,
        job_id: None,
        runner_id: Some(id),
        claim_id: None,
        actor: &actor,
        kind: EventKind::RunnerRotated,
        attempt: None,
        reason,
        detail_json: Some(&detail),
        at: ctx.now,
    };
    let mut writes = Writes::default();
    let rotated = writes.any(runners::rotate(&ctx.db, &rotation)?);
    writes.any(events::insert_if_changed(&ctx.db, &event)?);
    let changed = store::writes::write(&ctx.db, writes).await?;
    store::expect_one(changed.at(rotated), || {
        ApiError::conflict(
            ErrorCode::RunnerChanged,
            "the runner changed while rotating; reload and retry",
        )
    })?;
    // The old credential's claims must be refused, not answered from the runner object's memory.
    objects::dispatch::touch(&ctx.env, &caller.organization_id).await;
    let runner = load(ctx, &caller.organization_id, id).await?;
    respond(
        200,
        &RegisteredRunnerView {
            runner: RunnerView::new(&runner, &[], ctx.now),
            bootstrap_token: &token,
        },
    )
}

/// `GET /api/remote-runners/{id}/events?limit=&cursor=`: the runner's audit trail, newest
/// first (by event id, the timeline's total order), keyset-paged as the other lists are.
pub(crate) async fn events(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    load(ctx, &caller.organization_id, id).await?;
    let limit = limit_param(&req, 200, 1000)?;
    let before = match Cursor::from_query(&req)? {
        None => i64::MAX,
        Some(cursor) => plain_number(&cursor.id, 18).ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::InvalidCursor,
                "cursor must be a nextCursor this list returned",
            )
        })?,
    };
    // One more than the page, to know whether another page follows.
    let mut rows =
        events::for_runner(&ctx.db, &caller.organization_id, id, before, limit + 1).await?;
    let next_cursor = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|e| Cursor::encode(e.at, &e.id.to_string()))
    } else {
        None
    };
    respond(
        200,
        &RunnerEventsView {
            events: rows.iter().map(EventView::from).collect(),
            next_cursor,
        },
    )
}

/// `GET /api/remote-runners/{id}/files?limit=&cursor=`: the runner's files, by name.
pub(crate) async fn files(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    load(ctx, &caller.organization_id, id).await?;
    super::runner_files::files_page(&req, ctx, &caller.organization_id, id).await
}

pub(crate) async fn file(req: Request, ctx: &Ctx, id: &str, name: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let file = runners::file(&ctx.db, &caller.organization_id, id, name)
        .await?
        .ok_or_else(|| ApiError::not_found("no such file for that runner"))?;
    let mut res = Response::ok(file.content)?;
    res.headers_mut()
        .set("content-type", "text/plain; charset=utf-8")?;
    Ok(res)
}
