//! How the edge and the Durable Objects talk: one JSON request per operation, one JSON reply.
//!
//! A job's and a runner's objects answer in types ([`crate::replies`]): the edge decodes their
//! answers here, in [`call_job`] and [`call_runner`], and a refusal becomes the client's answer
//! through the one mapping beside its type. The gate's and the dispatcher's replies carry an
//! HTTP status and a body ([`Reply`]). Objects are addressed by name
//! (`id_from_name`): the job id for `JobObject`, the runner id for `RunnerObject`, so every
//! request about one job (or one runner) meets the same single writer; the client address for
//! `AddressGate`; the organization id for `Dispatcher`.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use worker::{Env, Method, Request, RequestInit, Response};

use crate::error::{json_response, ApiError, ApiResult};
use crate::ops::{JobOp, RunnerOp};
use crate::replies::{JobRefusal, JobReply, RunnerRefusal, RunnerReply};
use crate::store::RoundTrips;

pub(crate) const JOBS: &str = "JOBS";
pub(crate) const RUNNERS: &str = "RUNNERS";
pub(crate) const GATES: &str = "GATES";
pub(crate) const DISPATCHERS: &str = "DISPATCHERS";

/// The header in which an object tells its caller how many D1 round trips its operation made
/// (and the bench build tells the client the request's total).
pub(crate) const ROUND_TRIPS_HEADER: &str = "x-edgerunner-d1-round-trips";

/// The header in which a runner's object tells the edge the queue stamp of a confirmed
/// "nothing" (`runner_do::Quiet`), for a long poll to wait on. Never sent to a client.
pub(crate) const QUIET_STAMP_HEADER: &str = "x-edgerunner-quiet-stamp";

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: Value,
}

impl Reply {
    pub(crate) fn ok(body: Value) -> Self {
        Self { status: 200, body }
    }

    pub(crate) fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub(crate) fn into_response(self) -> ApiResult<Response> {
        if self.status == 204 {
            return Ok(Response::empty()?.with_status(204));
        }
        json_response(self.status, &self.body).map_err(ApiError::from)
    }
}

/// Calls `op` on the object named `name` in namespace `binding`; the D1 round trips the object
/// made for it are added to `trips`.
pub(crate) async fn call(
    env: &Env,
    trips: &RoundTrips,
    binding: &str,
    name: &str,
    op: &str,
    body: &impl Serialize,
) -> ApiResult<Reply> {
    let (status, _, text) = send(env, trips, binding, name, op, body).await?;
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).map_err(|e| {
            ApiError::internal(format!("object {binding}/{op} replied non-JSON: {e}"))
        })?
    };
    Ok(Reply { status, body })
}

/// Sends `op` with `body` to the object named `name` in namespace `binding`: the status,
/// headers and text of its answer. The D1 round trips the object made are added to `trips`.
async fn send(
    env: &Env,
    trips: &RoundTrips,
    binding: &str,
    name: &str,
    op: &str,
    body: &impl Serialize,
) -> ApiResult<(u16, worker::Headers, String)> {
    let namespace = env.durable_object(binding)?;
    let stub = namespace.id_from_name(name)?.get_stub()?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(
        serde_json::to_string(body)
            .map_err(ApiError::internal)?
            .into(),
    ));
    let req = Request::new_with_init(&format!("https://object/{op}"), &init)?;
    let mut res = stub.fetch_with_request(req).await?;
    if let Some(n) = res
        .headers()
        .get(ROUND_TRIPS_HEADER)?
        .and_then(|n| n.parse::<u32>().ok())
    {
        trips.add(n);
    }
    let status = res.status_code();
    let headers = res.headers().clone();
    let text = res.text().await?;
    Ok((status, headers, text))
}

/// Calls a job's object: `op` on the object of the job it names. Its answer, with a refusal
/// as the client's answer to it (`From<JobRefusal> for ApiError`).
pub(crate) async fn call_job(env: &Env, trips: &RoundTrips, op: &JobOp) -> ApiResult<JobReply> {
    ask_job(env, trips, op).await?.map_err(ApiError::from)
}

/// [`call_job`] for a caller that acts on a refusal itself (a runner's claim moves on to its
/// next candidate when one is taken): the object's answer as it decided it.
pub(crate) async fn ask_job(
    env: &Env,
    trips: &RoundTrips,
    op: &JobOp,
) -> ApiResult<Result<JobReply, JobRefusal>> {
    let (status, _, text) = send(env, trips, JOBS, op.job_id(), op.name(), op).await?;
    decode("job", op.name(), status, &text)
}

/// Calls runner `runner_id`'s object: its answer, with a refusal as the client's answer to it
/// (`From<RunnerRefusal> for ApiError`), and (for a claim that found nothing) the queue stamp
/// of its confirmed "nothing".
pub(crate) async fn call_runner(
    env: &Env,
    trips: &RoundTrips,
    runner_id: &str,
    op: &RunnerOp,
) -> ApiResult<(RunnerReply, Option<crate::dispatch_do::Stamp>)> {
    let (status, headers, text) = send(env, trips, RUNNERS, runner_id, op.name(), op).await?;
    let answer: Result<RunnerReply, RunnerRefusal> = decode("runner", op.name(), status, &text)?;
    let stamp = headers
        .get(QUIET_STAMP_HEADER)?
        .and_then(|stamp| serde_json::from_str(&stamp).ok());
    Ok((answer?, stamp))
}

/// A typed object's answer to operation `op`, as [`answer`] sent it.
fn decode<T: DeserializeOwned>(object: &str, op: &str, status: u16, text: &str) -> ApiResult<T> {
    // A typed object answers every operation `200` with its decision; anything else is the
    // runtime's (an exception, a limit), not the object's.
    if status != 200 {
        return Err(ApiError::internal(format!(
            "{object} object {op} answered {status}: {text}"
        )));
    }
    serde_json::from_str(text).map_err(|e| {
        ApiError::internal(format!(
            "{object} object {op} answered what does not decode: {e}"
        ))
    })
}

/// Reads an object request whose body is a typed operation ([`crate::ops`]).
pub(crate) async fn read_op<T: serde::de::DeserializeOwned>(mut req: Request) -> ApiResult<T> {
    let text = req.text().await?;
    serde_json::from_str(&text).map_err(|e| {
        ApiError::internal(format!(
            "bad object request {}: {e}",
            req.path().trim_start_matches('/')
        ))
    })
}

/// Reads an object request: the operation (the path) and its JSON body.
pub(crate) async fn read_request(mut req: Request) -> ApiResult<(String, Value)> {
    let op = req.path().trim_start_matches('/').to_owned();
    let text = req.text().await?;
    let body = serde_json::from_str(&text)
        .map_err(|e| ApiError::internal(format!("bad object request: {e}")))?;
    Ok((op, body))
}

/// A typed object's answer on its wire: `200` with its decision, with the D1 round trips the
/// operation made.
pub(crate) fn answer<T: Serialize, E: Serialize>(
    answer: &Result<T, E>,
    trips: &RoundTrips,
) -> worker::Result<Response> {
    let text = serde_json::to_string(answer)
        .map_err(|e| worker::Error::RustError(format!("an answer did not serialize: {e}")))?;
    let mut res = Response::ok(text)?;
    res.headers_mut().set("content-type", "application/json")?;
    res.headers_mut()
        .set(ROUND_TRIPS_HEADER, &trips.count().to_string())?;
    Ok(res)
}

/// Turns an operation's outcome into the object's HTTP reply, with the D1 round trips the
/// operation made.
pub(crate) fn respond(outcome: ApiResult<Reply>, trips: &RoundTrips) -> worker::Result<Response> {
    let mut res = match outcome.and_then(Reply::into_response) {
        Ok(res) => res,
        Err(err) => err.into_response()?,
    };
    res.headers_mut()
        .set(ROUND_TRIPS_HEADER, &trips.count().to_string())?;
    Ok(res)
}
