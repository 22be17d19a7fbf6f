//! What a runner does with jobs (runner credential): claim one (its runner's Durable Object
//! grants it, the edge waits on the dispatcher for a long poll), read the job it holds (input,
//! artifact), heartbeat, stream, complete, and hand a claim back. Every state change goes to
//! the job's Durable Object; the edge authenticates, parses and forwards.

use edgerunner_protocol::capability::parse_served_targets;
use edgerunner_protocol::credential::VerifiedCredential;
use edgerunner_protocol::envelope::ClaimId;
use edgerunner_protocol::error_code::ErrorCode;
use serde_json::{Map, Value};
use worker::{Request, Response};

use super::views::jobs::HeldArtifactView;
use super::views::respond;
use super::{refuse_unknown, required_str};
use crate::auth;
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::{json_body, json_object_capped, CLAIM_BODY_BYTES, SMALL_BODY_BYTES};
use crate::objects;
use crate::objects::job::{Holder, JobOp};
use crate::objects::runner::{RunnerOp, RunnerReply};
use crate::platform::now_ms;
use crate::store::jobs;
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
                    ErrorCode::InvalidWait,
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
            ErrorCode::InvalidRequestId,
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
                ErrorCode::ClaimIdMalformed,
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
pub(crate) async fn hand_back(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
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
        ErrorCode::StreamChunkMalformed,
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
        ErrorCode::CompletionMalformed,
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
    malformed: ErrorCode,
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
            ErrorCode::JobIdMalformed,
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
    respond(200, &HeldArtifactView::new(&held)?)
}

#[cfg(test)]
mod tests {
    use super::{is_job_id_form, job_of_claim};
    use edgerunner_protocol::error_code::ErrorCode;

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
            assert_eq!(err.code(), ErrorCode::ClaimIdMalformed, "{bad:?}");
        }
    }
}
