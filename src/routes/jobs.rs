//! Jobs: enqueue, list, inspect and cancel (API key), and the runner's claim, job-bound reads,
//! heartbeat, stream and completion (runner credential). State changes go to the job's (or the
//! runner's) Durable Object; the edge authenticates, parses and forwards.

use edgerunner_protocol::capability::{parse_served_targets, Requirements};
use edgerunner_protocol::credential::VerifiedCredential;
use edgerunner_protocol::envelope::ClaimId;
use edgerunner_protocol::recovery::MAX_DISPATCHES;
use edgerunner_protocol::stable_json::hash;
use edgerunner_protocol::state::JobState;
use serde_json::{json, Map, Value};
use worker::{Request, Response};

use super::{limit_param, refuse_unknown, required_name, required_str, Cursor};
use crate::auth::{self, PresentedKey, Scope};
use crate::error::{json_response, ApiError, ApiResult};
use crate::http::{
    json_body, json_body_capped, json_object, json_object_capped, CLAIM_BODY_BYTES,
    SMALL_BODY_BYTES,
};
use crate::objects;
use crate::objects::job::{Holder, JobOp};
use crate::objects::runner::{RunnerOp, RunnerReply};
use crate::platform::{now_ms, random_id};
use crate::store::{self, api_keys, events, guards, jobs, Db, RoundTrips};
use crate::Ctx;

const ENVIRONMENTS: [&str; 3] = ["dev", "staging", "prod"];

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
    let read = store::read_batch(
        &ctx.db,
        vec![
            api_keys::select_by_hash(&ctx.db, key_hash)?,
            jobs::select_bindable_version_of_key(
                &ctx.db,
                key_hash,
                artifact,
                version,
                environment,
            )?,
            jobs::select_by_idempotency_key_of_key(&ctx.db, key_hash, key)?,
        ],
    )
    .await?;
    let caller = presented
        .caller(
            &req,
            ctx,
            store::rows_of::<api_keys::ApiKeyRow>(&read, 0)?
                .into_iter()
                .next(),
        )
        .await?;
    caller.require(Scope::RunsWrite)?;
    let earlier = store::rows_of::<jobs::JobRow>(&read, 2)?.into_iter().next();
    let bound = store::rows_of::<jobs::BindableVersion>(&read, 1)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            ApiError::new(
                404,
                "VERSION_NOT_FOUND",
                "no such artifact version in this organization",
            )
        })?;
    if bound.kind != kind {
        return Err(ApiError::unprocessable(
            "INVALID_SUBJECT",
            format!("the artifact is a {}, not a {kind}", bound.kind),
        ));
    }
    if bound.promoted == 0 {
        return Err(ApiError::conflict(
            "VERSION_NOT_PROMOTED",
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
        return same_intent(existing, intent_hash.as_str());
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
        kind: "job.enqueued",
        attempt: Some(0),
        reason: None,
        detail_json: Some(&detail),
        at: ctx.now,
    };
    let written = store::write_batch(
        &ctx.db,
        vec![
            jobs::insert(&ctx.db, &new_job)?,
            events::insert(&ctx.db, &enqueued)?,
        ],
    )
    .await;
    let results = match written {
        Ok(results) => results,
        Err(err) => {
            // Two enqueues with one key raced; the loser answers as a replay would.
            if err.guard() == Some(guards::UNIQUE_IDEMPOTENCY_KEY) {
                if let Some(existing) =
                    jobs::by_idempotency_key(&ctx.db, &caller.organization_id, key).await?
                {
                    return same_intent(existing, intent_hash.as_str());
                }
            }
            return Err(err);
        }
    };
    // Waiting claims wake, and idle runners' next claims read D1 again.
    objects::dispatch::touch(&ctx.env, &caller.organization_id).await;
    let job = store::rows_of::<jobs::JobRow>(&results, 0)?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("the enqueue's insert answered no row"))?;
    json_response(201, &job.to_json()).map_err(ApiError::from)
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
                    "INVALID_SUBJECT",
                    "subject must be an object",
                ))
            }
        };
        let (kind, artifact, version, environment) = parse_subject(subject)?;
        let input = body.get("input").ok_or_else(|| {
            ApiError::unprocessable("MISSING_FIELD", "input is required (any JSON value)")
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

fn same_intent(existing: jobs::JobRow, intent_hash: &str) -> ApiResult<Response> {
    if existing.intent_hash == intent_hash {
        json_response(200, &existing.to_json()).map_err(ApiError::from)
    } else {
        Err(ApiError::conflict(
            "IDEMPOTENCY_CONFLICT",
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
                "INVALID_SUBJECT",
                "subject.versionId must be a positive integer",
            )
        })?;
    let environment = required_str(subject, "environment", 16)?;
    if !ENVIRONMENTS.contains(&environment) {
        return Err(ApiError::unprocessable(
            "INVALID_ENVIRONMENT",
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
                        "INVALID_STATE",
                        format!("state must be one of {}", states.join(", ")),
                    )
                })?
                .as_str(),
        ),
    };
    let cursor = Cursor::from_query(&req)?;
    // One more than the page, to know whether another page follows; the counts in the same
    // round trip.
    let page = jobs::select_page(
        &ctx.db,
        org,
        state,
        cursor.as_ref().map(|c| (c.at, c.id.as_str())),
        limit + 1,
    )?;
    let results = store::read_batch(
        &ctx.db,
        vec![page, jobs::select_state_counts(&ctx.db, org)?],
    )
    .await?;
    let mut rows: Vec<jobs::JobRow> = store::rows_of(&results, 0)?;
    let next_cursor = (rows.len() as i64 > limit).then(|| {
        rows.truncate(limit as usize);
        rows.last().map(|j| Cursor::encode(j.created_at, &j.id))
    });
    let mut counts = serde_json::Map::new();
    for state in JobState::ALL {
        counts.insert(state.as_str().into(), 0.into());
    }
    for row in store::rows_of::<jobs::StateCount>(&results, 1)? {
        counts.insert(row.state, row.count.into());
    }
    json_response(
        200,
        &json!({
            "jobs": rows.iter().map(jobs::JobRow::to_json).collect::<Vec<_>>(),
            "nextCursor": next_cursor.flatten(),
            "counts": counts,
        }),
    )
    .map_err(ApiError::from)
}

/// Chunks per page of `GET …/jobs/{id}/stream`, and the payload bytes a page stops at.
const STREAM_PAGE_DEFAULT: i64 = 100;
const STREAM_PAGE_MAX: i64 = 500;
const STREAM_PAGE_BYTES: i64 = 1024 * 1024;

/// `GET /api/remote-runners/jobs/{id}/stream?after=&attempt=&limit=`: the stored chunks with
/// their payloads, in order (attempt, then sequence), after the cursor `"{attempt}.{sequence}"`.
/// A page holds at most `limit` chunks and stops once 1 MiB of payload is reached, so
/// following a running job's log costs one small read per poll.
pub(crate) async fn stream_read(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = caller.organization_id.as_str();
    let limit = limit_param(&req, STREAM_PAGE_DEFAULT, STREAM_PAGE_MAX)?;
    let after = match crate::http::query_param(&req, "after") {
        None => (0, -1),
        Some(text) => parse_stream_cursor(&text).ok_or_else(|| {
            ApiError::unprocessable(
                "INVALID_CURSOR",
                "after must be a cursor this stream returned (\"{attempt}.{sequence}\")",
            )
        })?,
    };
    let attempts = match crate::http::query_param(&req, "attempt") {
        None => (1, LAST_ATTEMPT),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if (1..=LAST_ATTEMPT).contains(&n) => (n, n),
            _ => {
                return Err(ApiError::unprocessable(
                    "INVALID_ATTEMPT",
                    format!("attempt must be an integer from 1 to {LAST_ATTEMPT}"),
                ))
            }
        },
    };
    let page = jobs::StreamPage {
        after,
        attempts,
        limit,
        byte_budget: STREAM_PAGE_BYTES,
        job: id,
    };
    // The organization's job and the page in one round trip (a reader following a running job
    // asks every few seconds). One batch is one transaction, so the job's state is as of the
    // page: a terminal state with `more: false` means the whole stream has been read (a
    // completion closes its stream, and nothing is appended after it).
    let results = store::read_batch(
        &ctx.db,
        vec![
            jobs::select_found(&ctx.db, org, id)?,
            jobs::select_stream_page(&ctx.db, org, &page)?,
        ],
    )
    .await?;
    let job = store::rows_of::<jobs::Found>(&results, 0)?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let rows: Vec<jobs::ChunkWithPayload> = store::rows_of(&results, 1)?;
    let in_range = rows.first().map_or(0, |r| r.page_rows);
    let more = (rows.len() as i64) < in_range || in_range == limit;
    let cursor = rows
        .last()
        .map_or(after, |c| (c.dispatch_attempt, c.sequence));
    let chunks = rows
        .iter()
        .map(|c| {
            let mut chunk = c.sent_json(id)?;
            chunk["receivedAt"] = crate::platform::rfc3339(c.received_at).into();
            Ok(chunk)
        })
        .collect::<ApiResult<Vec<_>>>()?;
    json_response(
        200,
        &json!({
            "chunks": chunks,
            "cursor": format!("{}.{}", cursor.0, cursor.1),
            "more": more,
            "state": job.state,
            "dispatchAttempt": job.dispatch_attempt,
        }),
    )
    .map_err(ApiError::from)
}

/// The highest attempt number a job's stream can hold: every dispatch, hand-backs included.
const LAST_ATTEMPT: i64 = MAX_DISPATCHES as i64;

/// `"{attempt}.{sequence}"` as the stream pages write it: attempt one digit 0–8, sequence
/// `-1` or 1–18 digits (`"0.-1"` is the stream's start).
fn parse_stream_cursor(text: &str) -> Option<(i64, i64)> {
    let (attempt, sequence) = text.split_once('.')?;
    let attempt = super::plain_number(attempt, 1).filter(|a| *a <= LAST_ATTEMPT)?;
    let sequence = match sequence {
        "-1" => -1,
        digits => super::plain_number(digits, 18)?,
    };
    Some((attempt, sequence))
}

/// Chunks the job detail shows (without payloads); the rest is read page by page with
/// `GET …/stream?after=` from the cursor it returns. The detail's size stays bounded whatever
/// the stream holds (the other lists are bounded by the per-job limits).
const DETAIL_STREAM_CHUNKS: i64 = 1_000;
/// Events the job detail shows.
const DETAIL_EVENTS: i64 = 1_000;

pub(crate) async fn get(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = caller.organization_id.as_str();
    let job = jobs::get(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let results = store::read_batch(
        &ctx.db,
        vec![
            jobs::select_claims(&ctx.db, id)?,
            jobs::select_chunk_heads(&ctx.db, org, id, DETAIL_STREAM_CHUNKS + 1)?,
            jobs::select_stream_totals(&ctx.db, org, id)?,
        ],
    )
    .await?;
    let claims: Vec<jobs::ClaimRow> = store::rows_of(&results, 0)?;
    let mut chunks: Vec<jobs::ChunkRow> = store::rows_of(&results, 1)?;
    let totals: Vec<jobs::StreamTotal> = store::rows_of(&results, 2)?;
    let stream_more = chunks.len() as i64 > DETAIL_STREAM_CHUNKS;
    chunks.truncate(DETAIL_STREAM_CHUNKS as usize);
    let stream_cursor = chunks
        .last()
        .map_or((0, -1), |c| (c.dispatch_attempt, c.sequence));
    let timeline = events::for_job(&ctx.db, org, id, DETAIL_EVENTS).await?;
    let completions = jobs::completions(&ctx.db, org, id).await?;
    let evidence = jobs::evidence(&ctx.db, org, id).await?;
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let mut view = job.to_json();
    if let Value::Object(map) = &mut view {
        map.insert(
            "claims".into(),
            claims.iter().map(jobs::ClaimRow::to_json).collect(),
        );
        map.insert(
            "events".into(),
            timeline.iter().map(events::EventRow::to_json).collect(),
        );
        map.insert(
            "stream".into(),
            chunks
                .iter()
                .map(|c| {
                    json!({
                        "claimId": c.claim_id,
                        "dispatchAttempt": c.dispatch_attempt,
                        "sequence": c.sequence,
                        "kind": c.kind,
                        "previousChecksum": c.previous_checksum,
                        "payloadHash": c.payload_hash,
                        "checksum": c.checksum,
                        "emittedAt": c.emitted_at,
                        "receivedAt": crate::platform::rfc3339(c.received_at),
                    })
                })
                .collect(),
        );
        map.insert("streamMore".into(), stream_more.into());
        map.insert(
            "streamCursor".into(),
            format!("{}.{}", stream_cursor.0, stream_cursor.1).into(),
        );
        map.insert(
            "streamTotals".into(),
            totals
                .iter()
                .map(|t| {
                    json!({
                        "dispatchAttempt": t.dispatch_attempt,
                        "chunks": t.chunks,
                        "payloadBytes": t.stream_bytes,
                        "lastChecksum": t.last_checksum,
                    })
                })
                .collect(),
        );
        map.insert(
            "completions".into(),
            completions
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "decision": c.decision,
                        "rationale": c.rationale,
                        "dispatchAttempt": c.dispatch_attempt,
                        "runnerId": c.runner_id,
                        "claimId": c.claim_id,
                        "status": c.status,
                        "completionChecksum": c.completion_checksum,
                        "inputHash": c.input_hash,
                        "resultHash": c.result_hash,
                        "finalStreamChecksum": c.final_stream_checksum,
                        "evidence": parse(&c.evidence),
                        "reportedCosts": c.reported_costs.as_deref().map(parse),
                        "completedAt": c.completed_at,
                        "receivedAt": crate::platform::rfc3339(c.received_at),
                    })
                })
                .collect(),
        );
        map.insert("unstoredDecisions".into(), job.unstored_json());
        map.insert(
            "evidence".into(),
            evidence
                .iter()
                .map(|e| json!({ "kind": e.evidence_kind, "id": e.evidence_id, "completionId": e.completion_id }))
                .collect(),
        );
    }
    json_response(200, &view).map_err(ApiError::from)
}

pub(crate) async fn cancel(mut req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsWrite)?;
    let body = json_object(&mut req).await?;
    refuse_unknown(&body, &["reason"])?;
    let reason = required_str(&body, "reason", 1000)
        .map_err(|_| ApiError::unprocessable("REASON_REQUIRED", "cancellation needs a reason"))?;
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
    json_response(200, &job.to_json()).map_err(ApiError::from)
}

// ------------------------------------------------------------------------------------------
// The runner's side
// ------------------------------------------------------------------------------------------

pub(crate) async fn claim(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    // The runner's object checks generation and state against the live row itself.
    let credential = auth::runner_credential(&req, ctx)?;
    let claims = credential.claims();
    let body = json_object_capped(&mut req, CLAIM_BODY_BYTES).await?;
    refuse_unknown(&body, &["servedTargets", "requestId", "waitSeconds"])?;
    let wait_ms = wait_seconds(&body)? * 1000;
    let mut op = RunnerOp::Claim {
        organization_id: claims.organization_id.clone(),
        runner_id: claims.runner_id.clone(),
        generation: i64::try_from(claims.generation).map_err(ApiError::internal)?,
        served_targets: body.get("servedTargets").cloned(),
        request_id: request_id(&body)?,
        wait_ms,
        stamp: None,
    };
    // Checked here, after the rest of the body as before: the runner's object can then only
    // find them well formed.
    if let Some(served) = body.get("servedTargets").filter(|v| !v.is_null()) {
        parse_served_targets(served)?;
    }
    // A long poll waits here, at the edge, in the organization's dispatcher, and asks the
    // runner's object again when the queue moved. Here, because a runner that stops waiting (it
    // drops the connection) ends this invocation: no claim is made for it after it left.
    let deadline = now_ms() + i64::from(wait_ms);
    // This claim was woken (by a touch, or a wake passed on) and asks its runner's object again.
    let mut woken = false;
    for _ in 0..MAX_WAIT_ROUNDS {
        let (reply, quiet) =
            objects::runner::call(&ctx.env, ctx.db.trips(), &claims.runner_id, &op).await?;
        let left = u32::try_from(deadline - now_ms()).unwrap_or(0);
        let nothing = matches!(reply, RunnerReply::Nothing);
        let Some(quiet) = quiet.filter(|_| nothing && left > 0) else {
            return reply.into_response();
        };
        // Woken, and nothing for this runner at the stamp it was woken at: the wake goes on to
        // another waiting claim (it waits again itself).
        let pass_on =
            woken && matches!(&op, RunnerOp::Claim { stamp: Some(at), .. } if *at == quiet);
        match objects::dispatch::wait(
            &ctx.env,
            &claims.organization_id,
            Some(&quiet),
            left,
            pass_on,
        )
        .await
        {
            Ok(looked) if looked.stamp != quiet => {
                woken = looked.woken;
                if let RunnerOp::Claim { stamp, .. } = &mut op {
                    *stamp = Some(looked.stamp);
                }
            }
            // The wait ended with nothing queued, or the dispatcher failed: nothing, now.
            Ok(_) => return reply.into_response(),
            Err(err) => {
                worker::console_error!("claim: waiting in the dispatcher failed: {err:?}");
                return reply.into_response();
            }
        }
    }
    RunnerReply::Nothing.into_response()
}

/// Wakes of one long poll (a job queued that another runner took or this one cannot run):
/// a bound on the reads one claim makes while its organization's queue keeps moving.
const MAX_WAIT_ROUNDS: usize = 16;

/// The longest a claim may wait for a job (`waitSeconds`).
const MAX_WAIT_SECONDS: u32 = objects::dispatch::MAX_WAIT_MILLIS / 1000;

/// A claim's optional `waitSeconds`: an integer from 0 to 25; without it the claim answers at
/// once, as the published SDK expects.
fn wait_seconds(body: &Map<String, Value>) -> ApiResult<u32> {
    match body.get("waitSeconds") {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v
            .as_u64()
            .filter(|s| *s <= u64::from(MAX_WAIT_SECONDS))
            .and_then(|s| u32::try_from(s).ok())
            .ok_or_else(|| {
                ApiError::unprocessable(
                    "INVALID_WAIT",
                    format!("waitSeconds must be an integer from 0 to {MAX_WAIT_SECONDS}"),
                )
            }),
    }
}

/// Longest claim `requestId` (migration 0008 holds the same bound).
const MAX_REQUEST_ID_CHARS: usize = 64;

/// A claim's optional `requestId`: the runner's idempotency key, 1–64 characters of
/// `A–Z a–z 0–9 . _ : -`.
fn request_id(body: &Map<String, Value>) -> ApiResult<Option<String>> {
    let refused = || {
        ApiError::unprocessable(
            "INVALID_REQUEST_ID",
            format!(
                "requestId must be 1 to {MAX_REQUEST_ID_CHARS} characters of A-Z a-z 0-9 . _ : -"
            ),
        )
    };
    match body.get("requestId") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id))
            if (1..=MAX_REQUEST_ID_CHARS).contains(&id.len())
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')) =>
        {
            Ok(Some(id.clone()))
        }
        Some(_) => Err(refused()),
    }
}

/// The job a claim id names (`ClaimId::for_attempt`), so a heartbeat (which names only the
/// claim) reaches its job's object without a lookup.
/// The job a claim id names, when the claim id has the server's form (`<job id>-a<attempt>`,
/// [`ClaimId::for_attempt`]) and its job id [`is_job_id_form`]; else `422 CLAIM_ID_MALFORMED`,
/// before any job's object is woken for it.
fn job_of_claim(claim_id: &str) -> ApiResult<&str> {
    ClaimId::job_and_attempt(claim_id)
        .map(|(job, _)| job)
        .filter(|job| is_job_id_form(job))
        .ok_or_else(|| {
            ApiError::unprocessable(
                "CLAIM_ID_MALFORMED",
                "claimId is not a claim id this server issues (<jobId>-a<attempt>)",
            )
        })
}

/// Whether `text` can name a job: `job_` and 1 to 64 ASCII letters, digits or underscores.
/// The server mints `job_` and 24 hex digits (`random_id`); the benchmark's seeded queue uses
/// `job_bench…` ids, which this form admits too. A job's id names its Durable Object, so
/// anything else is refused at the edge rather than waking an object for a name no job has.
pub(crate) fn is_job_id_form(text: &str) -> bool {
    text.strip_prefix("job_").is_some_and(|rest| {
        (1..=64).contains(&rest.len())
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// The holder a runner's credential names, as a job object checks it: against the job's
/// claims, and (in the write itself) against the runner's live credential generation. The edge
/// reads nothing from D1 for a runner's heartbeat, chunk, completion or hand-back.
fn holder(credential: &VerifiedCredential) -> ApiResult<Holder> {
    let claims = credential.claims();
    Ok(Holder {
        runner_id: claims.runner_id.clone(),
        organization_id: claims.organization_id.clone(),
        generation: i64::try_from(claims.generation).map_err(ApiError::internal)?,
    })
}

pub(crate) async fn heartbeat(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let credential = auth::runner_credential(&req, ctx)?;
    let body = json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    let claim_id = required_str(&body, "claimId", 300)?;
    let job_id = job_of_claim(claim_id)?;
    let extend_seconds = match body.get("extendSeconds") {
        None | Some(Value::Null) => 60,
        Some(v) => v.as_i64().ok_or_else(crate::objects::job::invalid_lease)?,
    };
    let op = JobOp::Heartbeat {
        job_id: job_id.to_owned(),
        holder: holder(&credential)?,
        claim_id: claim_id.to_owned(),
        extend_seconds,
    };
    objects::job::call(&ctx.env, ctx.db.trips(), &op)
        .await?
        .into_response()
}

/// The holder hands its claim back: the job is free at once and the runner is not marked lost
/// (see `edgerunner_protocol::recovery::ReleaseDecision`).
pub(crate) async fn release(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let credential = auth::runner_credential(&req, ctx)?;
    let body = json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    refuse_unknown(&body, &["claimId", "reason"])?;
    let claim_id = required_str(&body, "claimId", 300)?;
    let reason = required_str(&body, "reason", 500)?;
    let job_id = job_of_claim(claim_id)?;
    let op = JobOp::HandBack {
        job_id: job_id.to_owned(),
        holder: holder(&credential)?,
        claim_id: claim_id.to_owned(),
        reason: reason.to_owned(),
    };
    objects::job::call(&ctx.env, ctx.db.trips(), &op)
        .await?
        .into_response()
}

pub(crate) async fn stream(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    forward_named_job(
        req,
        ctx,
        "chunk",
        "STREAM_CHUNK_MALFORMED",
        |job_id, holder, chunk| JobOp::Stream {
            job_id,
            holder,
            chunk,
        },
    )
    .await
}

pub(crate) async fn complete(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    forward_named_job(
        req,
        ctx,
        "completion",
        "COMPLETION_MALFORMED",
        |job_id, holder, completion| JobOp::Complete {
            job_id,
            holder,
            completion,
        },
    )
    .await
}

/// A runner's chunk or completion: authenticated here, then handed whole (number lexemes
/// intact) to the object of the job it names, whose answer is the runner's.
async fn forward_named_job(
    mut req: Request,
    ctx: &Ctx,
    field: &str,
    malformed: &'static str,
    op: impl FnOnce(String, Holder, Value) -> JobOp,
) -> ApiResult<Response> {
    let credential = auth::runner_credential(&req, ctx)?;
    let body = json_body(&mut req).await?;
    let job_id = body
        .get("jobId")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::unprocessable(malformed, format!("a {field} names its jobId")))?
        .to_owned();
    if !is_job_id_form(&job_id) {
        return Err(ApiError::unprocessable(
            "JOB_ID_MALFORMED",
            "jobId is not a job id this server issues (job_ and 1-64 letters, digits or _)",
        ));
    }
    let op = op(job_id, holder(&credential)?, body);
    objects::job::call(&ctx.env, ctx.db.trips(), &op)
        .await?
        .into_response()
}

/// The input snapshot, exactly as enqueued; only for the holder of the job's active claim.
pub(crate) async fn input(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::runner(&req, ctx).await?;
    let held = jobs::held_job_data(&ctx.db, caller.organization_id(), id, caller.runner_id())
        .await?
        .ok_or_else(|| ApiError::not_found("no such job held by this runner"))?;
    let mut res = Response::ok(held.input)?;
    res.headers_mut().set("content-type", "application/json")?;
    Ok(res)
}

/// The bound artifact version's content; only for the holder of the job's active claim.
pub(crate) async fn artifact(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::runner(&req, ctx).await?;
    let held = jobs::held_job_data(&ctx.db, caller.organization_id(), id, caller.runner_id())
        .await?
        .ok_or_else(|| ApiError::not_found("no such job held by this runner"))?;
    let content: Value = serde_json::from_str(&held.content).map_err(ApiError::internal)?;
    json_response(
        200,
        &json!({ "versionId": held.subject_version_id, "contentHash": held.subject_content_hash, "content": content }),
    )
    .map_err(ApiError::from)
}

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
    json_response(200, &report).map_err(ApiError::from)
}

/// `GET /api/remote-runners/jobs/{jobId}/bundle`: the job's whole custody chain in one
/// document — each signed envelope, every stream chunk as sent, every completion as received
/// with its decision — so that `edgerunner verify` can re-check every hash and link offline.
/// JSON text stored by the server is re-parsed with number lexemes intact, so the hashes the
/// runner computed still hold.
///
/// A job may hold 8 attempts × 64 MiB of stream, so the document is never built whole: the
/// small parts (job, claims, each attempt's extent, the completion ids) are read first, then
/// the body is streamed — chunk pages by keyset (`stream_page.sql`, ≤ 1 MiB of payload each),
/// then completions one at a time — and the Worker holds one page at a time. The extents read
/// first bound the pages, so the bundle is the job as it was at that read even while its
/// stream grows (chunks and completions are immutable, and a completion closes its stream).
/// A read that fails mid-body cuts the body short: the document does not parse, and `verify`
/// says so.
pub(crate) async fn bundle(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = caller.organization_id.as_str();
    let job = jobs::get(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let parse = |text: &str| serde_json::from_str::<Value>(text).map_err(ApiError::internal);
    let claims = jobs::bundle_claims(&ctx.db, org, id)
        .await?
        .into_iter()
        .map(|c| {
            Ok(json!({
                "id": c.id,
                "runnerId": c.runner_id,
                "dispatchAttempt": c.dispatch_attempt,
                "state": c.state,
                "signedJob": c.signed_job.as_deref().map(parse).transpose()?,
            }))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    let results = store::read_batch(
        &ctx.db,
        vec![
            jobs::select_stream_totals(&ctx.db, org, id)?,
            jobs::select_completion_ids(&ctx.db, org, id)?,
        ],
    )
    .await?;
    let extents = store::rows_of::<jobs::StreamTotal>(&results, 0)?
        .into_iter()
        .map(|t| (t.dispatch_attempt, t.chunks - 1))
        .collect();
    let completions = store::rows_of::<jobs::CompletionId>(&results, 1)?
        .into_iter()
        .map(|c| c.id)
        .collect();
    // The keys in the order the document always had; `unstoredDecisions` is new and last.
    let head = format!(
        "{{\"bundleVersion\":1,\"job\":{},\"claims\":{},\"stream\":[",
        job.to_json(),
        Value::Array(claims),
    );
    let writer = BundleWriter {
        env: ctx.env.clone(),
        org: org.to_owned(),
        job: id.to_owned(),
        unstored: job.unstored_json(),
        extents,
        completions,
        after: (0, -1),
        first: true,
        part: Part::Head(head),
    };
    let body = futures_util::stream::try_unfold(writer, |mut writer| async move {
        let piece = writer.next_piece().await.map_err(|err| {
            worker::Error::RustError(format!("bundle body cut short: {}", err.code()))
        })?;
        Ok::<_, worker::Error>(piece.map(|bytes| (bytes, writer)))
    });
    let mut res = Response::from_stream(body)?;
    res.headers_mut().set("content-type", "application/json")?;
    Ok(res)
}

/// Chunks per page of the streamed bundle (and the stream page's payload budget bounds it).
const BUNDLE_PAGE_CHUNKS: i64 = 500;

/// The streamed bundle's state between pieces.
struct BundleWriter {
    env: worker::Env,
    org: String,
    job: String,
    unstored: Value,
    /// The last sequence of each attempt when the bundle began: nothing past it is written.
    extents: std::collections::BTreeMap<i64, i64>,
    /// Completion ids, oldest first, still to write.
    completions: std::collections::VecDeque<String>,
    /// The keyset cursor `(attempt, sequence)` of the last chunk written.
    after: (i64, i64),
    /// No element written yet in the current list.
    first: bool,
    part: Part,
}

enum Part {
    Head(String),
    Stream,
    Completions,
    Done,
}

impl BundleWriter {
    /// The next bytes of the document, or `None` once it is whole.
    async fn next_piece(&mut self) -> ApiResult<Option<Vec<u8>>> {
        match std::mem::replace(&mut self.part, Part::Done) {
            Part::Head(head) => {
                self.part = Part::Stream;
                Ok(Some(head.into_bytes()))
            }
            Part::Stream => {
                let page = self.stream_page().await?;
                if page.is_empty() {
                    self.part = Part::Completions;
                    self.first = true;
                    return Ok(Some(b"],\"completions\":[".to_vec()));
                }
                self.part = Part::Stream;
                Ok(Some(page))
            }
            Part::Completions => match self.completions.pop_front() {
                Some(id) => {
                    self.part = Part::Completions;
                    self.completion(&id).await.map(Some)
                }
                None => Ok(Some(
                    format!("],\"unstoredDecisions\":{}}}", self.unstored).into_bytes(),
                )),
            },
            Part::Done => Ok(None),
        }
    }

    /// The next page of chunks as list elements; empty once the stream (as of the start) is out.
    async fn stream_page(&mut self) -> ApiResult<Vec<u8>> {
        let db = Db::of(&self.env, RoundTrips::default())?;
        let page = jobs::StreamPage {
            after: self.after,
            attempts: (1, LAST_ATTEMPT),
            limit: BUNDLE_PAGE_CHUNKS,
            byte_budget: STREAM_PAGE_BYTES,
            job: &self.job,
        };
        let results =
            store::read_batch(&db, vec![jobs::select_stream_page(&db, &self.org, &page)?]).await?;
        let rows: Vec<jobs::ChunkWithPayload> = store::rows_of(&results, 0)?;
        let mut out = Vec::new();
        for row in &rows {
            let known = self
                .extents
                .get(&row.dispatch_attempt)
                .is_some_and(|last| row.sequence <= *last);
            if !known {
                // Appended after the bundle began (rows come in key order): the end.
                self.extents.clear();
                break;
            }
            if !std::mem::take(&mut self.first) {
                out.push(b',');
            }
            serde_json::to_writer(&mut out, &row.sent_json(&self.job)?)
                .map_err(ApiError::internal)?;
            self.after = (row.dispatch_attempt, row.sequence);
        }
        Ok(out)
    }

    /// One completion as a list element.
    async fn completion(&mut self, id: &str) -> ApiResult<Vec<u8>> {
        let db = Db::of(&self.env, RoundTrips::default())?;
        let c = jobs::bundle_completion(&db, &self.org, &self.job, id)
            .await?
            .ok_or_else(|| ApiError::internal("a completion of the bundle vanished"))?;
        let received = c
            .received
            .as_deref()
            .map(serde_json::from_str::<Value>)
            .transpose()
            .map_err(ApiError::internal)?;
        let mut out = Vec::new();
        if !std::mem::take(&mut self.first) {
            out.push(b',');
        }
        serde_json::to_writer(
            &mut out,
            &json!({
                "id": c.id,
                "decision": c.decision,
                "rationale": c.rationale,
                "completion": received,
            }),
        )
        .map_err(ApiError::internal)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{is_job_id_form, job_of_claim, parse_stream_cursor};

    #[test]
    fn only_ids_of_a_jobs_form_reach_a_job_object() {
        for good in [
            "job_0123456789abcdef01234567",
            "job_benchBB_0000001",
            "job_1",
        ] {
            assert!(is_job_id_form(good), "{good:?}");
        }
        let long = format!("job_{}", "a".repeat(65));
        for bad in [
            "", "job_", "job", "jobs_1", "job_a-b", "job_é", "job_a b", "job_a/b", &long,
        ] {
            assert!(!is_job_id_form(bad), "{bad:?}");
        }
        assert_eq!(
            job_of_claim("job_0123456789abcdef01234567-a2").ok(),
            Some("job_0123456789abcdef01234567")
        );
        for bad in [
            "garbage",
            "clm_x",
            "job_x-a0",
            "job_x-a",
            "x/y-a1",
            "job_x y-a1",
        ] {
            let err = job_of_claim(bad).expect_err(bad);
            assert_eq!(err.code(), "CLAIM_ID_MALFORMED", "{bad:?}");
        }
    }

    #[test]
    fn a_stream_cursor_is_exactly_what_a_page_writes() {
        assert_eq!(parse_stream_cursor("0.-1"), Some((0, -1)));
        assert_eq!(parse_stream_cursor("8.9999"), Some((8, 9999)));
        for text in [
            "9.0", "+1.0", "-0.-1", "1.+3", "1.-2", "01.1", "1. 1", "1", "1.", ".1",
        ] {
            assert_eq!(parse_stream_cursor(text), None, "{text:?}");
        }
    }
}
