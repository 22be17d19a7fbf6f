//! `AddressGate`: one Durable Object per client network (an IPv4 address or an IPv6 /64, from
//! `CF-Connecting-IP`),
//! which rate-limits what a caller without a credential can do: enroll, ask for a challenge,
//! fail a session exchange, and present an API key that is unknown or revoked.
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
use crate::memo::Expiring;
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
    /// An API key of the issued form that is unknown or revoked (`401` on an admin route).
    FailedKey,
}

impl Bucket {
    fn name(self) -> &'static str {
        match self {
            Self::Enroll => "enroll",
            Self::Challenge => "challenge",
            Self::FailedSession => "failed-session",
            Self::FailedKey => "failed-key",
        }
    }

    fn variable(self) -> &'static str {
        match self {
            Self::Enroll => "ENROLL_PER_MINUTE",
            Self::Challenge => "CHALLENGES_PER_MINUTE",
            Self::FailedSession => "FAILED_SESSIONS_PER_MINUTE",
            Self::FailedKey => "FAILED_KEYS_PER_MINUTE",
        }
    }

    fn default_limit(self) -> i64 {
        match self {
            Self::Enroll => 10,
            Self::Challenge => 60,
            Self::FailedSession => 20,
            Self::FailedKey => 30,
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
    Err(rate_limited(bucket, retry_after))
}

fn rate_limited(bucket: Bucket, retry_after: u64) -> ApiError {
    ApiError::new(
        429,
        "RATE_LIMITED",
        format!(
            "too many {} requests from this network; retry in {retry_after} s",
            bucket.name()
        ),
    )
    .with_retry_after(retry_after)
}

/// Counts a refused API key for the request's network: `Ok` while the network is within
/// `FAILED_KEYS_PER_MINUTE`, else the `429` to answer instead of the `401`, after which this
/// isolate turns the network away ([`refused_network`]) until the window ends.
///
/// Why only failures are counted, and why the isolate remembers: a gate round trip on every
/// admin request would tax the benchmarked hot path (enqueue is one D1 read) to stop something
/// only failures do, so a valid key never meets the gate. Counting failures alone would still
/// let a blocked network cost one D1 read per guess, so the refusal is remembered here, in a
/// small bounded map, and answered before any read; another isolate learns it the same way, at
/// the cost of one read and one gate call per window.
pub(crate) async fn count_failed_key(ctx: &Ctx, req: &Request) -> ApiResult<()> {
    let Err(refusal) = take(ctx, req, Bucket::FailedKey).await else {
        return Ok(());
    };
    if let Some(seconds) = refusal.retry_after() {
        let until = ctx.now + i64::try_from(seconds).unwrap_or(60) * 1000;
        remember_refused(&address(req), until, ctx.now);
    }
    Err(refusal)
}

/// `429` with the seconds left when this isolate saw the request's network refused for failed
/// keys and the window has not ended. No I/O: it runs before the key is looked up.
pub(crate) fn refused_network(req: &Request, now: i64) -> ApiResult<()> {
    match refused_for(&address(req), now) {
        Some(retry_after) => Err(rate_limited(Bucket::FailedKey, retry_after)),
        None => Ok(()),
    }
}

/// The seconds left of `network`'s remembered refusal, if one is running at `now`.
fn refused_for(network: &str, now: i64) -> Option<u64> {
    let until = REFUSED.with(|memo| memo.borrow().until(network, now))?;
    Some(u64::try_from((until - now + 999) / 1000).unwrap_or(60))
}

/// The most networks one isolate remembers as refused. Past it, expired entries are dropped;
/// if none has expired the new one is not remembered, and the gate (which has no such bound)
/// still refuses it, at the cost of a read per request.
const MAX_REMEMBERED_NETWORKS: usize = 1024;

thread_local! {
    /// Network → the time (ms) its failed-key window ends. A Worker isolate runs one thread.
    static REFUSED: RefCell<Expiring> = RefCell::new(Expiring::new(MAX_REMEMBERED_NETWORKS));
}

fn remember_refused(network: &str, until: i64, now: i64) {
    REFUSED.with(|memo| memo.borrow_mut().remember(network, until, now));
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

#[cfg(test)]
mod tests {
    use super::{refused_for, remember_refused};

    #[test]
    fn a_refused_network_is_remembered_until_its_window_ends() {
        remember_refused("192.0.2.1", 61_000, 1_000);
        assert_eq!(refused_for("192.0.2.1", 1_000), Some(60));
        assert_eq!(refused_for("192.0.2.1", 60_500), Some(1));
        assert_eq!(refused_for("192.0.2.1", 61_000), None);
        assert_eq!(refused_for("192.0.2.2", 1_000), None, "only that network");
    }
}
