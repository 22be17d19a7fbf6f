//! `Dispatcher`: one Durable Object per organization (`id_from_name(organization id)`), which
//! keeps the organization's **queue stamp** and lets claims wait for it to move.
//!
//! The stamp says "the claimable work may have changed": it moves whenever a job of the
//! organization becomes queued (enqueue, a requeue by recovery or a hand-back) and whenever a
//! runner's own row changes what its claims may get (a status or tag change, a rotation, a loss).
//! A runner's object that read D1 and found nothing for the runner remembers the stamp it saw
//! *before* that read; while the stamp has not moved, a claim with the same credential and the
//! same served targets would find nothing again, so it answers `204` without a D1 query (see
//! `runner_do.rs`). A long-polling claim waits here for the stamp to move (the edge waits, see
//! `routes::jobs::claim`).
//!
//! The stamp lives in memory only: a write per enqueue would cost more than it saves, and an
//! object that was evicted starts a new **epoch** (a random id), so every stamp it handed out
//! before no longer matches and each runner's next claim reads D1 again. A touch that is lost
//! (the caller crashed after its commit) is bounded by the runner object's quiet time
//! (`QUIET_MILLIS`): a remembered "nothing" is used for at most that long.
//!
//! A touch wakes at most [`WAKE_PER_TOUCH`] waiters, the longest-waiting first: one job needs one
//! runner, and waking every idle runner of a large fleet would make each enqueue cost a D1 read
//! per runner. A waiter that was not woken sees the moved stamp when its wait ends and reads D1
//! then; waiting claims are bounded by [`MAX_WAITERS`], past which a claim is answered at once.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::future::{select, Either};
use serde::{Deserialize, Serialize};
use serde_json::json;
use worker::{durable_object, Delay, DurableObject, Env, Request, Response, Result, State};

use crate::error::{ApiError, ApiResult};
use crate::objects::{self, read_op, respond, Reply, DISPATCHERS};
use crate::ops::DispatchOp;
use crate::store::RoundTrips;

/// Waiters woken by one touch.
pub(crate) const WAKE_PER_TOUCH: usize = 4;
/// Claims that may wait in one organization's dispatcher at once.
pub(crate) const MAX_WAITERS: usize = 10_000;
/// The longest wait a dispatcher holds (the claim's `waitSeconds` bound).
pub(crate) const MAX_WAIT_MILLIS: u32 = 25_000;

/// Where an organization's queue stands: the dispatcher's epoch and its count of touches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Stamp {
    pub(crate) epoch: String,
    pub(crate) version: u64,
}

struct Queue {
    stamp: Stamp,
    /// Claims waiting for the stamp to move, by arrival (the oldest wakes first).
    waiters: BTreeMap<u64, Waker>,
    next_waiter: u64,
}

#[durable_object]
pub struct Dispatcher {
    queue: Rc<RefCell<Queue>>,
}

impl DurableObject for Dispatcher {
    fn new(_state: State, _env: Env) -> Self {
        let epoch = crate::platform::random_bytes::<8>()
            .map(|b| b.iter().map(|b| format!("{b:02x}")).collect())
            .unwrap_or_else(|_| format!("t{}", crate::platform::now_ms()));
        Self {
            queue: Rc::new(RefCell::new(Queue {
                stamp: Stamp { epoch, version: 0 },
                waiters: BTreeMap::new(),
                next_waiter: 0,
            })),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let outcome = match read_op::<DispatchOp>(req).await {
            Ok(DispatchOp::Touch { .. }) => Ok(self.touch()),
            Ok(DispatchOp::Look { known, wait_ms, .. }) => self.look(known, wait_ms).await,
            Err(err) => Err(err),
        };
        respond(outcome, &RoundTrips::default())
    }
}

impl Dispatcher {
    fn touch(&self) -> Reply {
        let woken: Vec<Waker> = {
            let mut queue = self.queue.borrow_mut();
            queue.stamp.version += 1;
            let first: Vec<u64> = queue.waiters.keys().take(WAKE_PER_TOUCH).copied().collect();
            first
                .iter()
                .filter_map(|id| queue.waiters.remove(id))
                .collect()
        };
        for waker in woken {
            waker.wake();
        }
        stamp_reply(&self.queue.borrow().stamp)
    }

    /// The stamp now, or (when it is still `known` and the caller will wait) once it moves or
    /// the wait ends.
    async fn look(&self, known: Option<Stamp>, wait_ms: u32) -> ApiResult<Reply> {
        let wait_ms = wait_ms.min(MAX_WAIT_MILLIS);
        let waiting = {
            let mut queue = self.queue.borrow_mut();
            let unmoved = known.as_ref() == Some(&queue.stamp);
            if unmoved && wait_ms > 0 && queue.waiters.len() < MAX_WAITERS {
                let id = queue.next_waiter;
                queue.next_waiter += 1;
                Some(Moved {
                    queue: Rc::clone(&self.queue),
                    seen: queue.stamp.version,
                    id,
                })
            } else {
                None
            }
        };
        if let Some(moved) = waiting {
            let timeout = Delay::from(Duration::from_millis(u64::from(wait_ms)));
            // Either the stamp moved, or the wait ended (the waiter leaves the queue on drop).
            match select(moved, timeout).await {
                Either::Left(((), _)) | Either::Right(((), _)) => {}
            }
        }
        Ok(stamp_reply(&self.queue.borrow().stamp))
    }
}

fn stamp_reply(stamp: &Stamp) -> Reply {
    Reply::ok(json!(stamp))
}

/// Resolves once the stamp's version is no longer `seen`, or once a touch picked this waiter.
struct Moved {
    queue: Rc<RefCell<Queue>>,
    seen: u64,
    id: u64,
}

impl Future for Moved {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut queue = self.queue.borrow_mut();
        let picked = !queue.waiters.contains_key(&self.id) && queue.stamp.version != self.seen;
        if picked {
            return Poll::Ready(());
        }
        // Not picked yet: wait (again) in the waiter's place. A waiter a touch passed over keeps
        // waiting for the next touch or the end of its wait.
        queue.waiters.insert(self.id, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Moved {
    fn drop(&mut self) {
        if let Ok(mut queue) = self.queue.try_borrow_mut() {
            queue.waiters.remove(&self.id);
        }
    }
}

/// Tells organization `org`'s dispatcher that its claimable work may have changed. Called after
/// the change committed, so it never fails the caller: a lost touch is logged, and the runners'
/// quiet time bounds what it costs.
pub(crate) async fn touch(env: &Env, org: &str) {
    let op = DispatchOp::Touch {
        organization_id: org.to_owned(),
    };
    if let Err(err) = call(env, &op).await {
        worker::console_error!("dispatcher: touching {org} failed: {err:?}");
    }
}

/// Organization `org`'s stamp: at once, or (when it is still `known`) after it moves or
/// `wait_ms` pass.
pub(crate) async fn look(
    env: &Env,
    org: &str,
    known: Option<&Stamp>,
    wait_ms: u32,
) -> ApiResult<Stamp> {
    let op = DispatchOp::Look {
        organization_id: org.to_owned(),
        known: known.cloned(),
        wait_ms,
    };
    let reply = call(env, &op).await?;
    serde_json::from_value(reply.body).map_err(ApiError::internal)
}

async fn call(env: &Env, op: &DispatchOp) -> ApiResult<Reply> {
    let reply = objects::call(
        env,
        &RoundTrips::default(),
        DISPATCHERS,
        op.organization_id(),
        op.name(),
        op,
    )
    .await?;
    if !reply.is_success() {
        return Err(ApiError::internal(format!(
            "dispatcher answered {}: {}",
            reply.status, reply.body
        )));
    }
    Ok(reply)
}
