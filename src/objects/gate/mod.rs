//! A network's gate (`AddressGate`, one per client network, `id_from_name` of the IPv4 address
//! or the IPv6 /64): what it is asked ([`GateOp`]: count one use of a [`Bucket`], or look
//! without counting), what it answers ([`Counted`], or [`GateRefusal::RateLimited`] with its one
//! mapping to a `429`), and the edge's side of it: [`take`], [`check`], and the isolate's
//! memory of networks refused for failed keys ([`count_failed_key`], [`refused_network`]).
//!
//! The object itself lives beside its messages: [`object`] (the Durable Object). The messages
//! import nothing of it.

pub(crate) mod object;

use edgerunner_protocol::error_code::ErrorCode;
use std::cell::RefCell;

use serde::{Deserialize, Serialize};
use worker::{Env, Request};

use super::GATES;
use crate::error::{ApiError, ApiResult};
use crate::memo::Expiring;
use crate::store::RoundTrips;

/// What a caller without a credential may do per network and minute. Each limit is read from
/// the Worker's environment (the variable named here), with this default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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

    fn limit(self, env: &Env) -> u64 {
        let limit = crate::platform::setting(env, self.variable(), self.default_limit(), 0);
        u64::try_from(limit).unwrap_or(0)
    }
}

/// An operation of a network's gate. The limit travels with the use, so the environment is read
/// by the edge that has it; a missing limit is an error at the gate's door, never a zero.
#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum GateOp {
    /// Counts one use of `bucket`, unless the network used up `limit` this minute.
    Take { bucket: Bucket, limit: u64 },
    /// Whether the network used up `limit` of `bucket` this minute, without counting.
    Check { bucket: Bucket, limit: u64 },
}

impl GateOp {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            GateOp::Take { .. } => "take",
            GateOp::Check { .. } => "check",
        }
    }
}

/// The gate let a use through: how much of the minute's allowance is used now.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Counted {
    pub(crate) used: u64,
    pub(crate) limit: u64,
}

/// Why a gate said no.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum GateRefusal {
    /// The network used up `bucket`'s allowance; its window ends in `retry_after` seconds.
    RateLimited { bucket: Bucket, retry_after: u64 },
    /// The object failed; its log has the detail.
    Internal,
}

impl From<GateRefusal> for ApiError {
    fn from(refusal: GateRefusal) -> Self {
        match refusal {
            GateRefusal::RateLimited {
                bucket,
                retry_after,
            } => ApiError::new(
                429,
                ErrorCode::RateLimited,
                format!(
                    "too many {} requests from this network; retry in {retry_after} s",
                    bucket.name()
                ),
            )
            .with_retry_after(retry_after),
            GateRefusal::Internal => ApiError::failed_elsewhere(),
        }
    }
}

/// Counts one use of `bucket` for the request's network; `429` with `Retry-After` when the
/// network has used up this minute's allowance.
pub(crate) async fn take(
    env: &Env,
    trips: &RoundTrips,
    req: &Request,
    bucket: Bucket,
) -> ApiResult<()> {
    let op = GateOp::Take {
        bucket,
        limit: bucket.limit(env),
    };
    Ok(call(env, trips, req, &op).await?.map(|_| ())?)
}

/// `429` when the network has used up `bucket` this minute, without counting this request.
pub(crate) async fn check(
    env: &Env,
    trips: &RoundTrips,
    req: &Request,
    bucket: Bucket,
) -> ApiResult<()> {
    let op = GateOp::Check {
        bucket,
        limit: bucket.limit(env),
    };
    Ok(call(env, trips, req, &op).await?.map(|_| ())?)
}

async fn call(
    env: &Env,
    trips: &RoundTrips,
    req: &Request,
    op: &GateOp,
) -> ApiResult<Result<Counted, GateRefusal>> {
    let network = crate::http::client_network(req);
    let (answer, _) = super::ask(env, trips, GATES, &network, op.name(), op).await?;
    Ok(answer)
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
pub(crate) async fn count_failed_key(
    env: &Env,
    trips: &RoundTrips,
    req: &Request,
    now: i64,
) -> ApiResult<()> {
    let op = GateOp::Take {
        bucket: Bucket::FailedKey,
        limit: Bucket::FailedKey.limit(env),
    };
    let refusal = match call(env, trips, req, &op).await? {
        Ok(_) => return Ok(()),
        Err(refusal) => refusal,
    };
    if let GateRefusal::RateLimited { retry_after, .. } = refusal {
        let until = now + i64::try_from(retry_after).unwrap_or(60) * 1000;
        remember_refused(&crate::http::client_network(req), until, now);
    }
    Err(refusal.into())
}

/// `429` when this isolate saw the request's network refused for failed keys and the window has
/// not ended. No I/O: it runs before the key is looked up.
pub(crate) fn refused_network(req: &Request, now: i64) -> ApiResult<()> {
    match refused_for(&crate::http::client_network(req), now) {
        Some(retry_after) => Err(GateRefusal::RateLimited {
            bucket: Bucket::FailedKey,
            retry_after,
        }
        .into()),
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_refused_network_is_remembered_until_its_window_ends() {
        remember_refused("192.0.2.1", 61_000, 1_000);
        assert_eq!(refused_for("192.0.2.1", 1_000), Some(60));
        assert_eq!(refused_for("192.0.2.1", 60_500), Some(1));
        assert_eq!(refused_for("192.0.2.1", 61_000), None);
        assert_eq!(refused_for("192.0.2.2", 1_000), None, "only that network");
    }

    #[test]
    fn a_use_without_its_limit_is_an_error_not_a_zero() {
        let refused = serde_json::from_value::<GateOp>(json!({ "take": { "bucket": "enroll" } }));
        assert!(refused.is_err());
        let op: GateOp =
            serde_json::from_value(json!({ "take": { "bucket": "failed-key", "limit": 30 } }))
                .unwrap();
        assert!(matches!(
            op,
            GateOp::Take {
                bucket: Bucket::FailedKey,
                limit: 30
            }
        ));
    }

    #[test]
    fn a_rate_limit_answers_429_with_when_to_retry() {
        let refusal = GateRefusal::RateLimited {
            bucket: Bucket::Enroll,
            retry_after: 42,
        };
        let wire = serde_json::to_string(&Err::<Counted, _>(refusal)).unwrap();
        let back: Result<Counted, GateRefusal> = serde_json::from_str(&wire).unwrap();
        let err = ApiError::from(back.unwrap_err());
        assert_eq!(err.status(), 429);
        assert_eq!(err.retry_after(), Some(42));
        assert_eq!(
            err.body(),
            json!({ "error": {
                "code": "RATE_LIMITED",
                "message": "too many enroll requests from this network; retry in 42 s",
            } })
        );
    }
}
