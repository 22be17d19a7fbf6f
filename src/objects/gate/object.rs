//! `AddressGate`: one Durable Object per client network (an IPv4 address or an IPv6 /64, from
//! `CF-Connecting-IP`), which rate-limits what a caller without a credential can do: enroll, ask
//! for a challenge, fail a session exchange, and present an API key that is unknown or revoked.
//! What it is asked and answers is in [`crate::objects::gate`].
//!
//! Each bucket is a fixed one-minute window counted in the object's memory. Memory is the right
//! home: the counts matter only while an address keeps calling, an object that is evicted has
//! been idle, and a write per request would cost more than the abuse it stops. A refusal says
//! when the window ends (`Retry-After`).

use std::cell::RefCell;
use std::collections::HashMap;

use worker::{durable_object, DurableObject, Env, Request, Response, Result, State};

use crate::objects::gate::{Bucket, Counted, GateOp, GateRefusal};
use crate::objects::{answer, read_op};
use crate::platform::now_ms;
use crate::store::RoundTrips;

/// The window every bucket counts in.
const WINDOW_MILLIS: i64 = 60_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    started_at: i64,
    used: u64,
}

#[durable_object]
pub struct AddressGate {
    windows: RefCell<HashMap<Bucket, Window>>,
}

impl DurableObject for AddressGate {
    fn new(_state: State, _env: Env) -> Self {
        Self {
            windows: RefCell::new(HashMap::new()),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let decided = match read_op::<GateOp>(req).await {
            // No await between the read and the write: requests to this object cannot
            // interleave.
            Ok(op) => decide(&mut self.windows.borrow_mut(), op, now_ms()),
            Err(err) => {
                worker::console_error!("gate: {err:?}");
                Err(GateRefusal::Internal)
            }
        };
        answer(&decided, &RoundTrips::default())
    }
}

/// One use (or look) of a bucket at `now`, against the windows counted so far.
fn decide(
    windows: &mut HashMap<Bucket, Window>,
    op: GateOp,
    now: i64,
) -> std::result::Result<Counted, GateRefusal> {
    let (bucket, limit, counts) = match op {
        GateOp::Take { bucket, limit } => (bucket, limit, true),
        GateOp::Check { bucket, limit } => (bucket, limit, false),
    };
    // Forget finished windows, so the map holds only this minute's buckets.
    windows.retain(|_, w| now - w.started_at < WINDOW_MILLIS);
    let window = windows.entry(bucket).or_insert(Window {
        started_at: now,
        used: 0,
    });
    if window.used >= limit {
        let left_ms = (window.started_at + WINDOW_MILLIS - now).max(1);
        let retry_after = u64::try_from((left_ms + 999) / 1000).unwrap_or(60);
        return Err(GateRefusal::RateLimited {
            bucket,
            retry_after,
        });
    }
    if counts {
        window.used += 1;
    }
    Ok(Counted {
        used: window.used,
        limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_its_limit_through_per_window_and_says_when_to_retry() {
        let mut windows = HashMap::new();
        let take = GateOp::Take {
            bucket: Bucket::Enroll,
            limit: 2,
        };
        assert_eq!(
            decide(&mut windows, take, 1_000),
            Ok(Counted { used: 1, limit: 2 })
        );
        assert_eq!(
            decide(&mut windows, take, 2_000),
            Ok(Counted { used: 2, limit: 2 })
        );
        assert_eq!(
            decide(&mut windows, take, 30_500),
            Err(GateRefusal::RateLimited {
                bucket: Bucket::Enroll,
                retry_after: 31
            })
        );
        // Another bucket of the same network counts on its own.
        let other = GateOp::Take {
            bucket: Bucket::Challenge,
            limit: 2,
        };
        assert_eq!(
            decide(&mut windows, other, 30_500),
            Ok(Counted { used: 1, limit: 2 })
        );
        // The window ends a minute after its first use.
        assert_eq!(
            decide(&mut windows, take, 61_000),
            Ok(Counted { used: 1, limit: 2 })
        );
    }

    #[test]
    fn a_check_counts_nothing_and_a_zero_limit_refuses_at_once() {
        let mut windows = HashMap::new();
        let check = GateOp::Check {
            bucket: Bucket::FailedSession,
            limit: 1,
        };
        for _ in 0..3 {
            assert_eq!(
                decide(&mut windows, check, 0),
                Ok(Counted { used: 0, limit: 1 })
            );
        }
        let closed = GateOp::Take {
            bucket: Bucket::FailedKey,
            limit: 0,
        };
        assert!(matches!(
            decide(&mut windows, closed, 0),
            Err(GateRefusal::RateLimited {
                retry_after: 60,
                ..
            })
        ));
    }
}
