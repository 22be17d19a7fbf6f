//! `Dispatcher`: one Durable Object per organization (`id_from_name(organization id)`), which
//! keeps the organization's **queue stamp** and lets claims wait for it to move.
//!
//! The stamp says "the claimable work may have changed": it moves whenever a job of the
//! organization becomes queued (enqueue, a requeue by recovery or a hand-back) and whenever a
//! runner's own row changes what its claims may get (a status or tag change, a rotation, a loss).
//! A runner's object that read D1 and found nothing for the runner remembers the stamp it saw
//! *before* that read; while the stamp has not moved, a claim with the same credential and the
//! same served targets would find nothing again, so it answers `204` without a D1 query (see
//! the runner's object). A long-polling claim waits here for the stamp to move (the edge waits,
//! see `routes::jobs::claim`). What it is asked and answers is in [`crate::objects::dispatch`].
//!
//! The stamp lives in memory only: a write per enqueue would cost more than it saves, and an
//! object that was evicted starts a new **epoch** (a random id), so every stamp it handed out
//! before no longer matches and each runner's next claim reads D1 again. A touch that is lost
//! (the caller crashed after its commit) is bounded by the runner object's quiet time
//! (`QUIET_MILLIS`): a remembered "nothing" is used for at most that long.
//!
//! A touch wakes one waiter, the longest-waiting: one job needs one runner, and waking every idle
//! runner of a large fleet would make each enqueue cost a D1 read per runner (and, locally, make
//! the one that gets the job wait behind the others' reads). A woken claim whose runner finds
//! nothing (the job needs what it lacks, or another claim took it) **passes the wake on** when it
//! comes back to wait (`pass_on`): the dispatcher wakes the longest-waiting claim that has not
//! seen the new stamp. A touch's wake is passed on at most [`PASSES_PER_TOUCH`] times, so a job
//! no waiting runner can take costs at most that many more reads, not one per idle runner. Only
//! a claim that was woken passes on: a claim that merely looked at the moved stamp holds no wake.
//! A waiter no wake reached sees the moved stamp when its wait ends and reads D1 then; waiting
//! claims are bounded by [`MAX_WAITERS`], past which a claim is answered at once.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::future::{select, Either};
use worker::{durable_object, Delay, DurableObject, Env, Request, Response, Result, State};

use crate::objects::dispatch::{DispatchOp, DispatchRefusal, Looked, Stamp, MAX_WAIT_MILLIS};
use crate::objects::{answer, read_op};
use crate::store::RoundTrips;

/// How often one touch's wake may be passed on by woken claims that found nothing.
pub(crate) const PASSES_PER_TOUCH: u32 = 4;
/// Claims that may wait in one organization's dispatcher at once.
pub(crate) const MAX_WAITERS: usize = 10_000;
struct Queue {
    stamp: Stamp,
    /// Passes left to the current version's wake ([`PASSES_PER_TOUCH`] after each touch).
    passes: u32,
    /// Claims waiting for the stamp to move, by arrival (the oldest wakes first), each with the
    /// version it waits to see move.
    waiters: BTreeMap<u64, Waiting>,
    next_waiter: u64,
}

struct Waiting {
    seen: u64,
    waker: Waker,
}

impl Queue {
    fn new(epoch: String) -> Self {
        Self {
            stamp: Stamp { epoch, version: 0 },
            passes: 0,
            waiters: BTreeMap::new(),
            next_waiter: 0,
        }
    }

    /// The claimable work may have changed: the stamp moves, and one waiting claim wakes.
    fn touch(&mut self) {
        self.stamp.version += 1;
        self.passes = PASSES_PER_TOUCH;
        self.wake_one();
    }

    /// A claim woken at `known` found nothing for its runner: while `known` is still the stamp
    /// and the touch's passes last, another waiting claim wakes in its place. (A wake of an
    /// older stamp is spent: the touch since woke a claim of its own.)
    fn pass_on(&mut self, known: Option<&Stamp>) {
        if known == Some(&self.stamp) && self.passes > 0 {
            self.passes -= 1;
            self.wake_one();
        }
    }

    /// Wakes the longest-waiting claim that has not seen the current version: it leaves the
    /// queue, and its [`Moved`] resolves.
    fn wake_one(&mut self) {
        let version = self.stamp.version;
        let first = self
            .waiters
            .iter()
            .find(|(_, w)| w.seen != version)
            .map(|(id, _)| *id);
        if let Some(waiting) = first.and_then(|id| self.waiters.remove(&id)) {
            waiting.waker.wake();
        }
    }
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
            queue: Rc::new(RefCell::new(Queue::new(epoch))),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let looked = match read_op::<DispatchOp>(req).await {
            Ok(DispatchOp::Touch { .. }) => Ok(self.touch()),
            Ok(DispatchOp::Look {
                known,
                wait_ms,
                pass_on,
                ..
            }) => Ok(self.look(known, wait_ms, pass_on).await),
            Err(err) => {
                worker::console_error!("dispatcher: {err:?}");
                Err(DispatchRefusal::Internal)
            }
        };
        answer(&looked, &RoundTrips::default())
    }
}

impl Dispatcher {
    fn touch(&self) -> Looked {
        let mut queue = self.queue.borrow_mut();
        queue.touch();
        Looked {
            stamp: queue.stamp.clone(),
            woken: false,
        }
    }

    /// The stamp now, or (when it is still `known` and the caller will wait) once it moves or
    /// the wait ends. `pass_on`: the caller was woken at `known` and found nothing.
    async fn look(&self, known: Option<Stamp>, wait_ms: u32, pass_on: bool) -> Looked {
        let wait_ms = wait_ms.min(MAX_WAIT_MILLIS);
        let waiting = {
            let mut queue = self.queue.borrow_mut();
            if pass_on {
                queue.pass_on(known.as_ref());
            }
            let unmoved = known.as_ref() == Some(&queue.stamp);
            if unmoved && wait_ms > 0 && queue.waiters.len() < MAX_WAITERS {
                Some(Moved::new(&self.queue, &mut queue))
            } else {
                None
            }
        };
        let mut woken = false;
        if let Some(moved) = waiting {
            let timeout = Delay::from(Duration::from_millis(u64::from(wait_ms)));
            // Either a wake reached it, or the wait ended (the waiter leaves the queue on drop).
            if let Either::Left((picked, _)) = select(moved, timeout).await {
                woken = picked;
            }
        }
        Looked {
            stamp: self.queue.borrow().stamp.clone(),
            woken,
        }
    }
}

/// Resolves once a wake picked this waiter (`true`), or at once when the stamp had already
/// moved past `seen` before it began to wait (`false`: it holds no wake to pass on).
struct Moved {
    queue: Rc<RefCell<Queue>>,
    seen: u64,
    id: u64,
    /// Polled before: it is (or was, until a wake took it out) in the queue.
    waited: bool,
}

impl Moved {
    /// A new waiter at `queue`'s current version (`shared` is the same queue, borrowed as
    /// `queue` by the caller).
    fn new(shared: &Rc<RefCell<Queue>>, queue: &mut Queue) -> Self {
        let id = queue.next_waiter;
        queue.next_waiter += 1;
        Self {
            queue: Rc::clone(shared),
            seen: queue.stamp.version,
            id,
            waited: false,
        }
    }
}

impl Future for Moved {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let waited = self.waited;
        self.waited = true;
        let mut queue = self.queue.borrow_mut();
        if !queue.waiters.contains_key(&self.id) && queue.stamp.version != self.seen {
            // Only a wake takes a waiter out of the queue once it is in it.
            return Poll::Ready(waited);
        }
        // Not picked yet: wait (again) in the waiter's place. A waiter a touch passed over keeps
        // waiting for a wake (a touch, or one passed on) or the end of its wait.
        let waiting = Waiting {
            seen: self.seen,
            waker: cx.waker().clone(),
        };
        queue.waiters.insert(self.id, waiting);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A claim waiting in `queue`, polled once (it is then in the queue).
    struct Waiter {
        moved: Pin<Box<Moved>>,
        woken: Arc<Count>,
    }

    impl Waiter {
        fn wait(queue: &Rc<RefCell<Queue>>) -> Self {
            let moved = {
                let mut borrowed = queue.borrow_mut();
                Moved::new(queue, &mut borrowed)
            };
            let mut waiter = Self {
                moved: Box::pin(moved),
                woken: Arc::new(Count(AtomicUsize::new(0))),
            };
            assert_eq!(waiter.poll(), Poll::Pending, "a new waiter waits");
            waiter
        }

        fn poll(&mut self) -> Poll<bool> {
            let waker = Waker::from(Arc::clone(&self.woken));
            self.moved.as_mut().poll(&mut Context::from_waker(&waker))
        }

        fn woken(&self) -> bool {
            self.woken.0.load(Ordering::SeqCst) > 0
        }
    }

    fn queue() -> Rc<RefCell<Queue>> {
        Rc::new(RefCell::new(Queue::new("e".to_owned())))
    }

    #[test]
    fn a_touch_wakes_only_the_longest_waiting_claim() {
        let queue = queue();
        let mut waiters: Vec<Waiter> = (0..3).map(|_| Waiter::wait(&queue)).collect();
        queue.borrow_mut().touch();
        let woken: Vec<bool> = waiters.iter().map(Waiter::woken).collect();
        assert_eq!(woken, [true, false, false]);
        assert_eq!(waiters[0].poll(), Poll::Ready(true));
        // The others wait on, for a wake or the end of their wait.
        assert_eq!(waiters[1].poll(), Poll::Pending);
        assert_eq!(waiters[2].poll(), Poll::Pending);
        // The next touch wakes the next one.
        queue.borrow_mut().touch();
        assert!(waiters[1].woken() && !waiters[2].woken());
    }

    #[test]
    fn a_woken_claim_that_found_nothing_passes_the_wake_on_a_bounded_number_of_times() {
        let queue = queue();
        let total = PASSES_PER_TOUCH as usize + 3;
        let mut waiters: Vec<Waiter> = (0..total).map(|_| Waiter::wait(&queue)).collect();
        queue.borrow_mut().touch();
        let at = queue.borrow().stamp.clone();
        for passer in 0..total - 1 {
            assert_eq!(waiters[passer].poll(), Poll::Ready(true), "waiter {passer}");
            // It found nothing, and comes back to wait at the stamp it was woken at.
            queue.borrow_mut().pass_on(Some(&at));
            let next = passer + 1;
            let passed = next <= PASSES_PER_TOUCH as usize;
            assert_eq!(waiters[next].woken(), passed, "waiter {next}");
            if !passed {
                break;
            }
        }
        // A claim that comes back at the stamp without being woken is also bounded: the passes
        // are spent, so nobody more wakes.
        queue.borrow_mut().pass_on(Some(&at));
        assert!(waiters.last().is_some_and(|w| !w.woken()));
    }

    #[test]
    fn a_wake_of_an_older_stamp_is_not_passed_on() {
        let queue = queue();
        let mut first = Waiter::wait(&queue);
        let second = Waiter::wait(&queue);
        let third = Waiter::wait(&queue);
        queue.borrow_mut().touch();
        let old = queue.borrow().stamp.clone();
        assert_eq!(first.poll(), Poll::Ready(true));
        // A second touch woke a claim of its own before the first woken one came back.
        queue.borrow_mut().touch();
        assert!(second.woken());
        queue.borrow_mut().pass_on(Some(&old));
        assert!(!third.woken(), "the stale wake woke nobody");
    }

    #[test]
    fn a_claim_that_saw_the_stamp_move_before_waiting_holds_no_wake() {
        let queue = queue();
        let moved = {
            let mut borrowed = queue.borrow_mut();
            Moved::new(&queue, &mut borrowed)
        };
        let mut late = Waiter {
            moved: Box::pin(moved),
            woken: Arc::new(Count(AtomicUsize::new(0))),
        };
        queue.borrow_mut().touch();
        assert_eq!(late.poll(), Poll::Ready(false));
    }
}
