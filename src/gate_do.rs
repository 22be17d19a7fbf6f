//! `AddressGate`: one Durable Object per client network (an IPv4 address or an IPv6 /64, from
//! `CF-Connecting-IP`),
//! which rate-limits what a caller without a credential can do: enroll, ask for a challenge,
//! and fail a session exchange.
//!
//! Each bucket is a fixed one-minute window counted in the object's memory. Memory is the right
//! home: the counts matter only while an address keeps calling, an object that is evicted has
//! been idle, and a write per request would cost more than the abuse it stops. A refusal says
//! when the window ends (`Retry-After`).

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::{json, Value};
use worker::{durable_object, DurableObject, Env, Request, Response, Result, State};

use crate::error::{ApiError, ApiResult};
use crate::objects::{self, read_request, respond, Reply, GATES};
use crate::platform::now_ms;
use crate::Ctx;

/// The window every bucket counts in.
const WINDOW_MILLIS: i64 = 60_000;

/// What a caller without a credential may do per address and minute. Each limit is read from
/// the Worker's environment (the variable named here), with this default.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bucket {
    /// `POST /api/remote-runners/enroll`.
    Enroll,
    /// `POST /api/remote-runners/challenge`.
    Challenge,
    /// `POST /api/remote-runners/session` answered `401`.
    FailedSession,
}

impl Bucket {
    fn name(self) -> &'static str {
        match self {
            Self::Enroll => "enroll",
            Self::Challenge => "challenge",
            Self::FailedSession => "failed-session",
        }
    }

    fn variable(self) -> &'static str {
        match self {
            Self::Enroll => "ENROLL_PER_MINUTE",
            Self::Challenge => "CHALLENGES_PER_MINUTE",
            Self::FailedSession => "FAILED_SESSIONS_PER_MINUTE",
        }
    }

    fn default_limit(self) -> i64 {
        match self {
            Self::Enroll => 10,
            Self::Challenge => 60,
            Self::FailedSession => 20,
        }
    }

    fn limit(self, env: &worker::Env) -> i64 {
        crate::platform::setting(env, self.variable(), self.default_limit(), 0)
    }
}

/// The network a limit is kept for ([`crate::http::client_network`]): an IPv4 address, or the
/// /64 of an IPv6 one, since one host is normally given a whole /64 and could otherwise rotate
/// through its addresses to get a fresh allowance for each. A request without an address (a
/// local client) shares one bucket.
fn address(req: &Request) -> String {
    crate::http::client_network(req)
}

/// Counts one use of `bucket` for the request's address; `429` with `Retry-After` when the
/// address has used up this minute's allowance.
pub(crate) async fn take(ctx: &Ctx, req: &Request, bucket: Bucket) -> ApiResult<()> {
    ask(ctx, req, bucket, "take").await
}

/// `429` when the address has used up `bucket` this minute, without counting this request.
pub(crate) async fn check(ctx: &Ctx, req: &Request, bucket: Bucket) -> ApiResult<()> {
    ask(ctx, req, bucket, "check").await
}

async fn ask(ctx: &Ctx, req: &Request, bucket: Bucket, op: &str) -> ApiResult<()> {
    let body = json!({ "bucket": bucket.name(), "limit": bucket.limit(&ctx.env) });
    let reply = objects::call(&ctx.env, ctx.db.trips(), GATES, &address(req), op, &body).await?;
    if reply.is_success() {
        return Ok(());
    }
    let retry_after = reply.body["retryAfter"].as_u64().unwrap_or(60);
    Err(ApiError::new(
        429,
        "RATE_LIMITED",
        format!(
            "too many {} requests from this network; retry in {retry_after} s",
            bucket.name()
        ),
    )
    .with_retry_after(retry_after))
}

#[derive(Clone, Copy)]
struct Window {
    started_at: i64,
    used: u64,
}

#[durable_object]
pub struct AddressGate {
    windows: RefCell<HashMap<String, Window>>,
}

impl DurableObject for AddressGate {
    fn new(_state: State, _env: Env) -> Self {
        Self {
            windows: RefCell::new(HashMap::new()),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let outcome = match read_request(req).await {
            Ok((op, body)) => self.decide(&op, &body, now_ms()),
            Err(err) => Err(err),
        };
        respond(outcome, &crate::store::RoundTrips::default())
    }
}

impl AddressGate {
    /// No await between the read and the write: requests to this object cannot interleave.
    fn decide(&self, op: &str, body: &Value, now: i64) -> ApiResult<Reply> {
        let bucket = body["bucket"]
            .as_str()
            .ok_or_else(|| ApiError::internal("gate request without a bucket"))?;
        let limit = body["limit"].as_u64().unwrap_or(0);
        let mut windows = self.windows.borrow_mut();
        // Forget finished windows, so the map holds only this minute's buckets.
        windows.retain(|_, w| now - w.started_at < WINDOW_MILLIS);
        let window = windows.entry(bucket.to_owned()).or_insert(Window {
            started_at: now,
            used: 0,
        });
        if window.used >= limit {
            let left_ms = (window.started_at + WINDOW_MILLIS - now).max(1);
            let retry_after = u64::try_from((left_ms + 999) / 1000).unwrap_or(60);
            return Ok(Reply {
                status: 429,
                body: json!({
                    "error": { "code": "RATE_LIMITED", "message": "rate limited" },
                    "retryAfter": retry_after,
                }),
            });
        }
        match op {
            "take" => window.used += 1,
            "check" => {}
            _ => return Err(ApiError::internal(format!("unknown gate operation {op}"))),
        }
        Ok(Reply::ok(json!({ "used": window.used, "limit": limit })))
    }
}
