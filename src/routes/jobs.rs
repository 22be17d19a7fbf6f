//! Jobs as an organization's admins and enqueuers see them (API key): enqueue, list, inspect,
//! cancel, and the bounded recovery pass (`reap`). A cancel goes to the job's Durable Object;
//! the rest is D1 behind the store.

use edgerunner_protocol::capability::Requirements;
use edgerunner_protocol::envelope::Environment;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::queue::QueueKey;
use edgerunner_protocol::stable_json::hash;
use edgerunner_protocol::state::JobState;
use serde_json::{json, Map, Value};
use worker::{Request, Response};

use super::views::jobs::{
    ArchiveView, EvidenceLinkView, JobDetailView, JobListView, JobView, UnstoredView,
};
use super::views::respond;
use super::{limit_param, refuse_unknown, required_name, required_str, Cursor};
use crate::archive::reads;
use crate::auth::{self, PresentedKey, Scope};
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::{json_body_capped, json_object, SMALL_BODY_BYTES};
use crate::objects;
use crate::objects::job::{JobOp, JobReply};
use crate::platform::random_id;
use crate::store::batched::{self, Binding, Page};
use crate::store::writes::Writes;
use crate::store::{self, api_keys, events, guards, jobs};
pub(crate) async fn enqueue(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    // The key is settled before the body is read, and its lookup still rides in the enqueue's
    // one read: `PresentedKey::of` refuses, without I/O, a missing key, one not of a key's form
    // and a network refused for failed keys; a key this isolate has not seen authenticate
    // lately is looked up (and its scope checked) before the body, one read more for a
    // client's first enqueue; a key seen lately goes straight to the body, and the one read
    // below authenticates it again (revoked since: 401). So nobody without a live key gets a
    // body read. A refused body is answered only to a caller the key authenticates: anyone
    // else still gets 401 or 403 first.
    let presented = PresentedKey::of(&req, ctx)?;
    if !presented.recently_authenticated(ctx.now) {
        let row = api_keys::by_hash(&ctx.db, presented.hash()).await?;
        presented
            .caller(&req, ctx, row)
            .await?
            .require(Scope::RunsWrite)?;
    }
    let body = match json_object(&mut req).await {
        Ok(body) => body,
        Err(refused) => return Err(refusal_for_caller(&req, ctx, refused).await),
    };
    let asked = match EnqueueRequest::parse(&body) {
        Ok(asked) => asked,
        Err(refused) => return Err(refusal_for_caller(&req, ctx, refused).await),
    };
    let EnqueueRequest {
        key,
        kind,
        artifact,
        version,
        environment,
        input,
        requirements,
    } = asked;

    // The caller's key, the version the job binds and an earlier job under the same key: one
    // read, scoped to the key's organization.
    let key_hash = presented.hash();
    let binding = Binding {
        artifact,
        version,
        environment,
    };
    let read = batched::enqueue_read(&ctx.db, key_hash, &binding, key).await?;
    let caller = presented.caller(&req, ctx, read.api_key).await?;
    caller.require(Scope::RunsWrite)?;
    let earlier = read.earlier;
    let bound = read.bound.ok_or_else(|| {
        ApiError::new(
            404,
            ErrorCode::VersionNotFound,
            "no such artifact version in this organization",
        )
    })?;
    if bound.kind != kind {
        return Err(ApiError::unprocessable(
            ErrorCode::InvalidSubject,
            format!("the artifact is a {}, not a {kind}", bound.kind),
        ));
    }
    if bound.promoted == 0 {
        return Err(ApiError::conflict(
            ErrorCode::VersionNotPromoted,
            format!("version {version} is not promoted to {environment}"),
        ));
    }
    // Number lexemes are kept as sent: the client hashes what it sent.
    let input_hash = hash(input);
    let requirements_value = requirements.to_value();
    let subject_value = json!({
        "kind": kind, "artifactId": artifact, "versionId": version,
        "contentHash": bound.content_hash, "environment": environment,
    });
    let intent_hash = hash(&json!({
        "subject": subject_value,
        "inputHash": input_hash.as_str(),
        "requirements": requirements_value,
    }));

    if let Some(existing) = earlier {
        return same_intent(existing, intent_hash.as_str(), &bound.name);
    }
    let id = random_id("job")?;
    let index = requirements.index_key();
    let tags = Value::Array(
        requirements
            .tags()
            .iter()
            .map(|t| Value::String(t.as_str().to_owned()))
            .collect(),
    );
    let input_json = input.to_string();
    let requirements_json = requirements_value.to_string();
    let tags_json = tags.to_string();
    let queue = QueueKey::of(&requirements);
    let new_job = jobs::NewJob {
        id: &id,
        organization_id: &caller.organization_id,
        idempotency_key: key,
        intent_hash: intent_hash.as_str(),
        subject_kind: kind,
        subject_artifact_id: artifact,
        subject_version_id: version,
        subject_content_hash: &bound.content_hash,
        subject_environment: environment,
        input_json: &input_json,
        input_hash: input_hash.as_str(),
        requirements_json: &requirements_json,
        execution_kind: index.execution_kind.as_str(),
        runtime: index.runtime.as_str(),
        external: index.external,
        problem_type: index.problem_type.as_ref().map(|p| p.as_str()),
        tags_json: &tags_json,
        queue_id: queue.id(),
        now: ctx.now,
    };
    let actor = caller.actor();
    let detail = json!({ "idempotencyKey": key, "subject": subject_value, "inputHash": input_hash.as_str() }).to_string();
    let enqueued = events::NewEvent {
        organization_id: &caller.organization_id,
        job_id: Some(&id),
        runner_id: None,
        claim_id: None,
        actor: &actor,
        kind: EventKind::JobEnqueued,
        attempt: Some(0),
        reason: None,
        detail_json: Some(&detail),
        at: ctx.now,
    };
    let mut writes = Writes::default();
    writes.any(store::queues::register(
        &ctx.db,
        &caller.organization_id,
        &queue,
        ctx.now,
    )?);
    let inserted = writes.any(jobs::insert(&ctx.db, &new_job)?);
    writes.extend([
        store::usage::job_enqueued(
            &ctx.db,
            &caller.organization_id,
            new_job.id,
            store::usage::default_quota(&ctx.env),
        )?,
        events::insert(&ctx.db, &enqueued)?,
    ]);
    let written = store::writes::write(&ctx.db, writes).await;
    let changed = match written {
        Ok(changed) => changed,
        Err(err) => {
            // Two enqueues with one key raced, or the job under the key was archived since
            // it was read: the loser answers as a replay would.
            let taken = [
                guards::UNIQUE_IDEMPOTENCY_KEY,
                guards::IDEMPOTENCY_KEY_ARCHIVED,
            ];
            if err.guard().is_some_and(|guard| taken.contains(&guard)) {
                if let Some(existing) =
                    jobs::by_idempotency_key(&ctx.db, &caller.organization_id, key).await?
                {
                    return same_intent(existing, intent_hash.as_str(), &bound.name);
                }
            }
            return Err(err);
        }
    };
    // Waiting claims wake, and idle runners' next claims read D1 again.
    objects::dispatch::touch(&ctx.env, &caller.organization_id).await;
    let mut job = changed
        .rows::<jobs::JobRow>(inserted)?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("the enqueue's insert answered no row"))?;
    job.subject_artifact_name = Some(bound.name);
    respond(201, &JobView::from(&job))
}

/// What an enqueue asks for, as its body says it (checked, not yet looked up).
struct EnqueueRequest<'a> {
    key: &'a str,
    kind: &'a str,
    artifact: &'a str,
    version: i64,
    environment: &'a str,
    input: &'a Value,
    requirements: Requirements,
}

impl<'a> EnqueueRequest<'a> {
    fn parse(body: &'a Map<String, Value>) -> ApiResult<Self> {
        refuse_unknown(
            body,
            &["idempotencyKey", "subject", "input", "requirements"],
        )?;
        let key = required_name(body, "idempotencyKey", 255)?;
        let subject = match body.get("subject") {
            Some(Value::Object(map)) => map,
            _ => {
                return Err(ApiError::unprocessable(
                    ErrorCode::InvalidSubject,
                    "subject must be an object",
                ))
            }
        };
        let (kind, artifact, version, environment) = parse_subject(subject)?;
        let input = body.get("input").ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::MissingField,
                "input is required (any JSON value)",
            )
        })?;
        let requirements = Requirements::parse(body.get("requirements").unwrap_or(&Value::Null))?;
        Ok(Self {
            key,
            kind,
            artifact,
            version,
            environment,
            input,
            requirements,
        })
    }
}

/// `refused` (a bad body) for a caller whose key may enqueue; for anyone else, the `401` or
/// `403` they would have got before their body was read.
async fn refusal_for_caller(req: &Request, ctx: &Ctx, refused: ApiError) -> ApiError {
    let allowed = match auth::admin(req, ctx).await {
        Ok(caller) => caller.require(Scope::RunsWrite),
        Err(err) => Err(err),
    };
    match allowed {
        Ok(()) => refused,
        Err(err) => err,
    }
}

/// A replay's answer: the job under the key when it was asked for the same thing (so it runs
/// the artifact the enqueue named: `artifact_name`), else `409 IDEMPOTENCY_CONFLICT`.
fn same_intent(
    mut existing: jobs::JobRow,
    intent_hash: &str,
    artifact_name: &str,
) -> ApiResult<Response> {
    if existing.intent_hash == intent_hash {
        existing.subject_artifact_name = Some(artifact_name.to_owned());
        respond(200, &JobView::from(&existing))
    } else {
        Err(ApiError::conflict(
            ErrorCode::IdempotencyConflict,
            "this idempotency key was used for a different job (subject, input or requirements differ)",
        ))
    }
}

fn parse_subject(subject: &Map<String, Value>) -> ApiResult<(&str, &str, i64, &str)> {
    refuse_unknown(subject, &["kind", "artifactId", "versionId", "environment"])?;
    let kind = required_str(subject, "kind", 32)?;
    let artifact = required_str(subject, "artifactId", 64)?;
    let version = subject
        .get("versionId")
        .and_then(Value::as_i64)
        .filter(|v| *v > 0)
        .ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::InvalidSubject,
                "subject.versionId must be a positive integer",
            )
        })?;
    let environment = required_str(subject, "environment", 16)?;
    // The protocol's environments, by their canonical names only (no aliases).
    if Environment::parse(environment).is_err() {
        return Err(ApiError::unprocessable(
            ErrorCode::InvalidEnvironment,
            "environment must be dev, staging or prod",
        ));
    }
    Ok((kind, artifact, version, environment))
}

/// `GET /api/remote-runners/jobs?limit=&state=&cursor=`: newest first, keyset-paged, with the
/// organization's count of jobs in each state.
pub(crate) async fn list(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = caller.organization_id.as_str();
    let limit = limit_param(&req, 50, 500)?;
    let state = match crate::http::query_param(&req, "state") {
        None => None,
        Some(state) => Some(
            JobState::parse(&state)
                .map_err(|_| {
                    let states: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
                    ApiError::unprocessable(
                        ErrorCode::InvalidState,
                        format!("state must be one of {}", states.join(", ")),
                    )
                })?
                .as_str(),
        ),
    };
    let cursor = Cursor::from_query(&req)?;
    // One more than the page, to know whether another page follows; the counts in the same
    // round trip.
    let page = batched::jobs_page(
        &ctx.db,
        org,
        state,
        cursor.as_ref().map(|c| (c.at, c.id.as_str())),
        limit + 1,
    );
    let Page {
        mut rows,
        counts: counted,
    } = page.await?;
    let next_cursor = (rows.len() as i64 > limit).then(|| {
        rows.truncate(limit as usize);
        rows.last().map(|j| Cursor::encode(j.created_at, &j.id))
    });
    respond(
        200,
        &JobListView::new(
            &rows,
            next_cursor.flatten(),
            counted.iter().map(|c| (c.state, c.count)),
        ),
    )
}

pub(crate) async fn get(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = caller.organization_id.as_str();
    let job = jobs::get(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    // Its claims, timeline, stream and completions: from its rows, or from its archive.
    let detail = reads::detail(&ctx.env, &ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    respond(
        200,
        &JobDetailView {
            job: JobView::from(&job),
            parts: &detail.parts,
            unstored_decisions: UnstoredView::from(&job),
            evidence: detail.evidence.iter().map(EvidenceLinkView::from).collect(),
            archive: ArchiveView::of(&detail.archive)?,
        },
    )
}

/// `POST /api/remote-runners/jobs/{id}/archive`: archive a finished job now, without waiting
/// out its grace period (admin): its bundle and record to R2, checked, then its rows pruned.
/// Answers where its archive stands; a job that is not finished is `409 JOB_NOT_FINISHED`.
pub(crate) async fn archive(mut req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = crate::http::json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    refuse_unknown(&body, &[])?;
    let org = caller.organization_id.as_str();
    // Org scoping before touching the object: a foreign job is simply not found.
    let job = jobs::get(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let op = JobOp::Archive {
        job_id: id.to_owned(),
        mode: crate::archive::Mode::Now,
    };
    let reply = objects::job::call(&ctx.env, ctx.db.trips(), &op).await?;
    if matches!(reply, JobReply::Archived(crate::archive::Progress::Live)) {
        return Err(ApiError::conflict(
            ErrorCode::JobNotFinished,
            format!("the job is {}; only a finished job is archived", job.state),
        ));
    }
    let row = crate::store::archive::row(&ctx.db, id)
        .await?
        .ok_or_else(|| ApiError::internal("an archived job vanished"))?;
    let view = ArchiveView::of(&row)?
        .ok_or_else(|| ApiError::internal("an archive step left no archive"))?;
    respond(200, &view)
}

pub(crate) async fn cancel(mut req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsWrite)?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["reason"])?;
    let reason = required_str(&body, "reason", 1000).map_err(|_| {
        ApiError::unprocessable(ErrorCode::ReasonRequired, "cancellation needs a reason")
    })?;
    // Org scoping before touching the object: a foreign job is simply not found.
    jobs::get(&ctx.db, &caller.organization_id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let op = JobOp::Cancel {
        job_id: id.to_owned(),
        organization_id: caller.organization_id.clone(),
        actor: caller.actor(),
        reason: reason.to_owned(),
    };
    // A refusal is the answer; otherwise the job as D1 now holds it.
    objects::job::call(&ctx.env, ctx.db.trips(), &op).await?;
    let job = jobs::get(&ctx.db, &caller.organization_id, id)
        .await?
        .ok_or_else(|| ApiError::internal("cancelled job vanished"))?;
    respond(200, &JobView::from(&job))
}

// ------------------------------------------------------------------------------------------
// The runner's side
// ------------------------------------------------------------------------------------------

/// `POST /api/remote-runners/jobs/reap`: one bounded recovery pass, for an admin (their
/// organization's leases) or for a scheduler presenting `CRON_SECRET` (every organization).
pub(crate) async fn reap(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    // Who is asking is settled before a byte of the body is read.
    let token = crate::http::bearer_token(&req)?;
    let scope = if token.starts_with("erk_") {
        let caller = auth::admin(&req, ctx).await?;
        caller.require_admin()?;
        Some((caller.organization_id.clone(), caller.actor()))
    } else if crate::secrets::is_cron_secret(&ctx.env, &token)? {
        None
    } else {
        return Err(ApiError::unauthorized(
            "reaping takes an admin API key or CRON_SECRET",
        ));
    };
    let body = json_body_capped(&mut req, SMALL_BODY_BYTES).await?;
    let limit = crate::reaper::limit_from(&body)?;
    let report = match &scope {
        Some((org, actor)) => {
            crate::reaper::pass(&ctx.env, Some(org), ctx.now, limit, actor).await?
        }
        None => crate::reaper::pass(&ctx.env, None, ctx.now, limit, "system:cron-secret").await?,
    };
    respond(200, &report)
}
