//! The Durable Objects, one folder per object: what it is asked (its operations), what it
//! answers (a typed reply, or a typed refusal with its one mapping to HTTP) and the typed stub
//! the edge calls it through, in the folder's `mod.rs`; the object itself in its `object.rs`.
//!
//! - [`job`]: `JobObject`, one per job (`id_from_name(job id)`).
//! - [`runner`]: `RunnerObject`, one per runner (`id_from_name(runner id)`).
//! - [`dispatch`]: `Dispatcher`, one per organization (`id_from_name(organization id)`).
//! - [`gate`]: `AddressGate`, one per client network (`id_from_name(network)`).
//!
//! Every object speaks the same wire: one JSON request per operation (a serde enum, externally
//! tagged, so a missing field is an error at the object's door, never a default), answered
//! `200` with `Result<Reply, Refusal>` as JSON and the D1 round trips its operation made in a
//! header. Anything but `200` is the runtime's (an exception, a limit), never the object's.
//! Nobody reads a key, a status or an error code out of an object's answer: callers match on
//! variants. The messages import nothing of their object: the objects depend on their
//! messages.

use serde::de::DeserializeOwned;
use serde::Serialize;
use worker::{Env, Headers, Method, Request, RequestInit, Response};

use crate::error::{ApiError, ApiResult};
use crate::store::RoundTrips;

pub(crate) mod dispatch;
pub(crate) mod gate;
pub(crate) mod job;
pub(crate) mod runner;

/// The namespaces' bindings (`wrangler.toml`).
const JOBS: &str = "JOBS";
const RUNNERS: &str = "RUNNERS";
const GATES: &str = "GATES";
const DISPATCHERS: &str = "DISPATCHERS";

/// The header in which an object tells its caller how many D1 round trips its operation made
/// (and the bench build tells the client the request's total).
pub(crate) const ROUND_TRIPS_HEADER: &str = "x-edgerunner-d1-round-trips";

/// Sends operation `op` (named `op_name`, for the path and logs) to the object named `name` in
/// namespace `binding`: its typed answer, with the headers it came with. The D1 round trips the
/// object made are added to `trips`.
async fn ask<A: DeserializeOwned>(
    env: &Env,
    trips: &RoundTrips,
    binding: &str,
    name: &str,
    op_name: &str,
    op: &impl Serialize,
) -> ApiResult<(A, Headers)> {
    let namespace = env.durable_object(binding)?;
    let stub = namespace.id_from_name(name)?.get_stub()?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(
        serde_json::to_string(op)
            .map_err(ApiError::internal)?
            .into(),
    ));
    let req = Request::new_with_init(&format!("https://object/{op_name}"), &init)?;
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
    // A typed object answers every operation `200` with its decision; anything else is the
    // runtime's (an exception, a limit), not the object's.
    if status != 200 {
        return Err(ApiError::internal(format!(
            "object {binding}/{op_name} answered {status}: {text}"
        )));
    }
    let answer = serde_json::from_str(&text).map_err(|e| {
        ApiError::internal(format!(
            "object {binding}/{op_name} answered what does not decode: {e}"
        ))
    })?;
    Ok((answer, headers))
}

/// Reads an object request whose body is a typed operation.
pub(crate) async fn read_op<T: DeserializeOwned>(mut req: Request) -> ApiResult<T> {
    let text = req.text().await?;
    serde_json::from_str(&text).map_err(|e| {
        ApiError::internal(format!(
            "bad object request {}: {e}",
            req.path().trim_start_matches('/')
        ))
    })
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
