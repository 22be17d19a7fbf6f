//! The release registry (artifacts, their immutable versions, promotions to an environment)
//! and the executable targets runners are set up to serve.

use edgerunner_protocol::capability::{ExecutionKind, Requirements, REQUIREMENTS_SHAPE};
use edgerunner_protocol::envelope::Environment;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::stable_json::{self, MAX_PORTABLE_INTEGER};
use serde_json::{json, Map, Value};
use worker::{Request, Response};

use super::views::releases::{
    ArtifactDetailView, ArtifactListItemView, ArtifactPageView, ArtifactView, NewVersionView,
    PromotionView, TargetListView, TargetView, VersionView,
};
use super::views::respond;
use super::{limit_param, optional_str, refuse_unknown, required_name, required_str, Cursor};
use crate::auth::{self, Scope};
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::{json_object, query_param};
use crate::platform::{random_id, rfc3339};
use crate::store::{self, events, releases};

fn artifact_not_found() -> ApiError {
    ApiError::not_found("no such release artifact")
}

fn version_not_found() -> ApiError {
    ApiError::not_found("no such release version")
}

/// A version id from a path: anything but a positive integer names no version.
fn path_version_id(text: &str) -> ApiResult<i64> {
    text.parse::<i64>()
        .ok()
        .filter(|id| *id >= 1)
        .ok_or_else(version_not_found)
}

/// A version id from a body: a positive integer the SDKs read exactly.
fn body_version_id(value: &Value) -> ApiResult<i64> {
    value
        .as_u64()
        .filter(|id| (1..=MAX_PORTABLE_INTEGER).contains(id))
        .and_then(|id| i64::try_from(id).ok())
        .ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::InvalidField,
                "versionId must be a positive integer",
            )
        })
}

fn kind(body: &Map<String, Value>) -> ApiResult<ExecutionKind> {
    match body.get("kind") {
        None | Some(Value::Null) => Err(ApiError::unprocessable(
            ErrorCode::MissingField,
            "kind is required",
        )),
        Some(value) => value
            .as_str()
            .and_then(ExecutionKind::parse)
            .ok_or_else(|| {
                ApiError::unprocessable(
                    ErrorCode::InvalidKind,
                    "kind must be one of prompt, scorer, tool, workflow, agent",
                )
            }),
    }
}

fn environment(body: &Map<String, Value>) -> ApiResult<Environment> {
    match body.get("environment") {
        None | Some(Value::Null) => Err(ApiError::unprocessable(
            ErrorCode::MissingField,
            "environment is required",
        )),
        Some(value) => value
            .as_str()
            .and_then(|text| Environment::parse(text).ok())
            .ok_or_else(|| {
                ApiError::unprocessable(
                    ErrorCode::InvalidEnvironment,
                    "environment must be one of dev, staging, prod",
                )
            }),
    }
}

// ---------------------------------------------------------------------------------------------
// Artifacts and versions
// ---------------------------------------------------------------------------------------------

pub(crate) async fn create_artifact(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsWrite)?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["kind", "name"])?;
    let kind = kind(&body)?;
    let name = required_name(&body, "name", 200)?;
    let id = random_id("art")?;
    let row = releases::NewArtifact {
        id: &id,
        organization_id: &caller.organization_id,
        kind: kind.as_str(),
        name,
        now: ctx.now,
    };
    match releases::insert_artifact(&ctx.db, &row).await {
        Ok(changed) => store::expect_one(changed, || {
            ApiError::internal("artifact insert changed no row")
        })?,
        Err(err) if err.code() == ErrorCode::ArtifactExists => {
            return Err(ApiError::conflict(
                ErrorCode::ArtifactExists,
                format!("a {} artifact named {name:?} already exists", kind.as_str()),
            ));
        }
        Err(err) => return Err(err),
    }
    let artifact = releases::ArtifactRow {
        id,
        kind: kind.as_str().to_owned(),
        name: name.to_owned(),
        created_at: ctx.now,
    };
    respond(201, &ArtifactView::from(&artifact))
}

/// `GET /api/releases/artifacts?kind=&limit=&cursor=`: the organization's artifacts, newest
/// first, keyset-paged like the runner and job lists, each with its newest version's id.
pub(crate) async fn list_artifacts(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let limit = limit_param(&req, 100, 1000)?;
    let kind = match query_param(&req, "kind") {
        None => None,
        Some(text) => Some(ExecutionKind::parse(&text).ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::InvalidKind,
                "kind must be one of prompt, scorer, tool, workflow, agent",
            )
        })?),
    };
    let cursor = Cursor::from_query(&req)?;
    let mut rows = releases::list_artifacts(
        &ctx.db,
        &caller.organization_id,
        kind.map(ExecutionKind::as_str),
        cursor.as_ref().map(|c| (c.at, c.id.as_str())),
        limit + 1,
    )
    .await?;
    let next_cursor = (rows.len() as i64 > limit)
        .then(|| {
            rows.truncate(limit as usize);
            rows.last().map(|a| Cursor::encode(a.created_at, &a.id))
        })
        .flatten();
    let artifacts: Vec<_> = rows.iter().map(ArtifactListItemView::from).collect();
    respond(
        200,
        &ArtifactPageView {
            artifacts,
            next_cursor,
        },
    )
}

pub(crate) async fn get_artifact(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let limit = limit_param(&req, 100, 1000)?;
    let org = &caller.organization_id;
    let artifact = releases::get_artifact(&ctx.db, org, id)
        .await?
        .ok_or_else(artifact_not_found)?;
    let versions = releases::versions_of(&ctx.db, org, id, limit).await?;
    let promotions = releases::promotions_of_artifact(&ctx.db, org, id).await?;
    let versions = versions
        .iter()
        .map(|version| {
            let own: Vec<_> = promotions
                .iter()
                .filter(|p| p.version_id == version.id)
                .collect();
            VersionView::new(version, &own)
        })
        .collect();
    respond(
        200,
        &ArtifactDetailView {
            artifact: ArtifactView::from(&artifact),
            versions,
        },
    )
}

pub(crate) async fn create_version(
    mut req: Request,
    ctx: &Ctx,
    artifact_id: &str,
) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsWrite)?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["content"])?;
    let content = match body.get("content") {
        None | Some(Value::Null) => {
            return Err(ApiError::unprocessable(
                ErrorCode::MissingField,
                "content is required (any JSON value but null)",
            ));
        }
        Some(content) => content,
    };
    // The hash is over the lexemes the client sent (`arbitrary_precision` keeps them), and the
    // stored text is the same value re-printed, so re-hashing what is stored gives this hash.
    let content_hash = stable_json::hash(content);
    let content_json = content.to_string();
    let row = releases::NewVersion {
        organization_id: &caller.organization_id,
        artifact_id,
        content_json: &content_json,
        content_hash: content_hash.as_str(),
        now: ctx.now,
    };
    let id = releases::insert_version(&ctx.db, &row, crate::store::usage::default_quota(&ctx.env))
        .await?
        .ok_or_else(artifact_not_found)?;
    respond(
        201,
        &NewVersionView {
            id,
            artifact_id,
            content_hash: content_hash.as_str(),
            created_at: rfc3339(ctx.now),
        },
    )
}

/// The admin view of a version, content included (runners get content only through the
/// job-bound read of the job they hold).
pub(crate) async fn get_version(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let id = path_version_id(id)?;
    let org = &caller.organization_id;
    let version = releases::get_version(&ctx.db, org, id, true)
        .await?
        .ok_or_else(version_not_found)?;
    let promotions = releases::promotions_of_version(&ctx.db, org, id).await?;
    let promotions: Vec<_> = promotions.iter().collect();
    respond(200, &VersionView::new(&version, &promotions))
}

pub(crate) async fn promote(mut req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsWrite)?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["environment"])?;
    let environment = environment(&body)?;
    let id = path_version_id(id)?;
    let org = &caller.organization_id;
    let version = releases::get_version(&ctx.db, org, id, false)
        .await?
        .ok_or_else(version_not_found)?;
    let actor = caller.actor();
    let promotion = releases::NewPromotion {
        organization_id: org,
        version_id: id,
        environment: environment.as_str(),
        promoted_by: &actor,
        now: ctx.now,
    };
    let detail = json!({
        "versionId": id,
        "artifactId": version.artifact_id,
        "kind": version.kind,
        "contentHash": version.content_hash,
        "environment": environment.as_str(),
    })
    .to_string();
    let event = events::NewEvent {
        organization_id: org,
        job_id: None,
        runner_id: None,
        claim_id: None,
        actor: &actor,
        kind: EventKind::ReleasePromoted,
        attempt: None,
        reason: None,
        detail_json: Some(&detail),
        at: ctx.now,
    };
    // Zero rows changed is the idempotent case (already promoted there): the stored promotion
    // and its original time answer, and no second audit event is written.
    store::batch(
        &ctx.db,
        vec![
            releases::promote(&ctx.db, &promotion)?,
            events::insert_if_changed(&ctx.db, &event)?,
        ],
    )
    .await?;
    let stored = releases::get_promotion(&ctx.db, org, id, environment.as_str())
        .await?
        .ok_or_else(|| ApiError::internal(format!("promotion of version {id} not stored")))?;
    respond(200, &PromotionView::from(&stored))
}

// ---------------------------------------------------------------------------------------------
// Executable targets
// ---------------------------------------------------------------------------------------------

pub(crate) async fn create_target(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsWrite)?;
    let body = json_object(&mut req).await?;
    refuse_unknown(
        &body,
        &[
            "key",
            "repository",
            "entrypoint",
            "requirements",
            "evaluationId",
            "versionId",
        ],
    )?;
    let key = required_name(&body, "key", 200)?;
    let repository = required_str(&body, "repository", 2000)?;
    let entrypoint = required_str(&body, "entrypoint", 1000)?;
    let requirements = match body.get("requirements") {
        None | Some(Value::Null) => {
            return Err(ApiError::unprocessable(
                ErrorCode::MissingField,
                format!("requirements is required: {REQUIREMENTS_SHAPE}"),
            ));
        }
        Some(value) => Requirements::parse(value)?,
    };
    let requirements_json = requirements.to_value().to_string();
    let evaluation_id = optional_str(&body, "evaluationId", 200)?;
    let version_id = match body.get("versionId") {
        None | Some(Value::Null) => None,
        Some(value) => Some(body_version_id(value)?),
    };
    let org = &caller.organization_id;
    let version = match version_id {
        Some(id) => Some(
            releases::get_version(&ctx.db, org, id, false)
                .await?
                .ok_or_else(version_not_found)?,
        ),
        None => None,
    };
    let id = random_id("tgt")?;
    let row = releases::NewTarget {
        id: &id,
        organization_id: org,
        key,
        repository,
        entrypoint,
        requirements_json: &requirements_json,
        evaluation_id,
        version: version.as_ref().map(|v| (v.id, v.content_hash.as_str())),
        now: ctx.now,
    };
    match releases::insert_target(&ctx.db, &row).await {
        Ok(changed) => store::expect_one(changed, version_not_found)?,
        Err(err) if err.code() == ErrorCode::TargetExists => {
            return Err(ApiError::conflict(
                ErrorCode::TargetExists,
                format!("a target with key {key:?} already exists"),
            ));
        }
        Err(err) => return Err(err),
    }
    let target = releases::get_target(&ctx.db, org, &id)
        .await?
        .ok_or_else(|| ApiError::internal("created target vanished"))?;
    respond(201, &TargetView::from(&target))
}

pub(crate) async fn list_targets(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let limit = limit_param(&req, 100, 1000)?;
    let evaluation_id = query_param(&req, "evaluationId").filter(|e| !e.is_empty());
    let rows = releases::list_targets(
        &ctx.db,
        &caller.organization_id,
        evaluation_id.as_deref(),
        limit,
    )
    .await?;
    respond(
        200,
        &TargetListView {
            targets: rows.iter().map(TargetView::from).collect(),
        },
    )
}
