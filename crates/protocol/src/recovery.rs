//! The lease-loss decision: what recovery does with one job at one instant.
//!
//! [`decide`] is a pure function of a job's lease snapshot and `now`. The job object's alarm,
//! the cron sweep and the admin `POST /api/remote-runners/jobs/reap` all end in the same call
//! and apply its answer with writes guarded by state and attempt, so whichever runs first wins
//! and the others find nothing to do: applying a decision and deciding again gives
//! [`RecoveryDecision::Nothing`].
//!
//! # What recovery can and cannot duplicate
//!
//! Recovery judges a worker by its heartbeats alone, and a lease that lapses is not proof that
//! the worker stopped. So it **can** cause:
//!
//! - **The same work to run twice.** A runner that is slow, partitioned or paused (but alive)
//!   may still be executing attempt *n* when attempt *n + 1* starts elsewhere. Both may spend
//!   provider and sandbox money, and any side effect outside EvalGate (a tool calling an
//!   external system, say) may happen twice. Work dispatched to remote runners is at least once,
//!   at most [`MAX_DISPATCH_ATTEMPTS`] times.
//! - **Work to outlive its job.** A runner that loses its lease after cancellation was requested
//!   may keep running after the job is `cancelled`; its costs are recorded if it reports them.
//!
//! It **cannot** cause:
//!
//! - **A result to be accepted twice.** Only the active claim's attempt may complete; the
//!   displaced worker's stream appends are refused and its completion is stored as `stale`
//!   (with its reported costs) but never applied. The job's terminal state is decided once.
//! - **Evidence or a charge to be attached twice.** Each evidence row may belong to one accepted
//!   completion; the schema enforces it.
//! - **More than [`MAX_DISPATCH_ATTEMPTS`] counted dispatches** (a hand-back among a job's first
//!   [`MAX_FREE_HAND_BACKS`] does not count, so [`MAX_DISPATCHES`] in all), a requeue of a job
//!   someone asked to cancel, or a requeue of a job whose lease has not expired: a worker that
//!   keeps heartbeating keeps its job, however slow it is.
//! - **A double requeue.** Two recoveries racing on the same job both decide `Requeue`, but the
//!   guarded write (`WHERE state = … AND dispatch_attempt = …`) lets only the first apply.

use crate::state::{JobInput, JobState, StateError};
use crate::wire_name::wire_names;

/// Counted dispatches a job gets, the first included: after the third lost lease the job ends.
/// A hand-back among the job's first [`MAX_FREE_HAND_BACKS`] does not count.
pub const MAX_DISPATCH_ATTEMPTS: u32 = 3;

/// How far one heartbeat may extend its lease, in seconds (the seed's bounds): long enough that
/// a beat every few seconds survives a slow network, short enough that a dead runner's job is
/// recovered within two minutes.
pub const LEASE_EXTENSION_SECONDS: std::ops::RangeInclusive<u32> = 15..=120;

/// Hand-backs (`POST …/release`) per job that do not count against [`MAX_DISPATCH_ATTEMPTS`]:
/// a runner that stops or restarts should not spend the job's retries, but one that keeps
/// handing a job back must not keep it in the queue for ever, so later ones count.
pub const MAX_FREE_HAND_BACKS: u32 = 5;

/// Dispatches a job can get in all, hand-backs included; the schema's bound on attempt numbers
/// (migrations/0006_free_hand_backs.sql).
pub const MAX_DISPATCHES: u32 = MAX_DISPATCH_ATTEMPTS + MAX_FREE_HAND_BACKS;

/// What recovery needs to know about a job.
///
/// There is no separate "cancel requested" flag: cancellation is the `cancel_requested` state,
/// and one source of truth cannot disagree with itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLease {
    pub state: JobState,
    /// Attempts dispatched so far (0 while a job has never been claimed). A claim dispatches
    /// attempt `dispatch_attempt + 1` and records it here.
    pub dispatch_attempt: u32,
    /// Of those, the free hand-backs: attempts that do not count against the limit.
    pub released_attempts: u32,
    /// When the active claim's lease lapses, in Unix milliseconds; `None` without a claim.
    pub lease_expires_at_ms: Option<i64>,
}

wire_names! {
    /// A [`RecoveryDecision`] by its stable name ([`RecoveryDecision::code`]): in the durable
    /// event, the job's rationale and the answer of a recovery.
    pub enum RecoveryCode: "a recovery decision" {
        /// [`RecoveryDecision::Nothing`].
        Nothing = "NOTHING",
        /// [`RecoveryDecision::Requeue`].
        LeaseLostRequeued = "LEASE_LOST_REQUEUED",
        /// [`RecoveryDecision::Exhausted`].
        DispatchAttemptsExhausted = "DISPATCH_ATTEMPTS_EXHAUSTED",
        /// [`RecoveryDecision::Cancel`].
        LeaseLostAfterCancelRequest = "LEASE_LOST_AFTER_CANCEL_REQUEST",
    }
}

wire_names! {
    /// A [`ReleaseDecision`] by its stable name ([`ReleaseDecision::code`]): in the durable
    /// event and the answer of a hand-back.
    pub enum ReleaseCode: "a hand-back decision" {
        /// [`ReleaseDecision::Requeue`].
        ReleasedRequeued = "RELEASED_REQUEUED",
        /// [`ReleaseDecision::Exhausted`].
        ReleasedAtLastAttempt = "RELEASED_AT_LAST_ATTEMPT",
        /// [`ReleaseDecision::Cancel`].
        ReleasedAfterCancelRequest = "RELEASED_AFTER_CANCEL_REQUEST",
    }
}

/// What recovery should do with a job now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryDecision {
    /// The lease is alive, or the job holds no lease.
    Nothing,
    /// Mark the claim and runner lost and return the job to the queue; the next compatible
    /// runner gets attempt `next_attempt` with a new nonce. `counted` attempts (this one
    /// included) count against [`MAX_DISPATCH_ATTEMPTS`].
    Requeue { next_attempt: u32, counted: u32 },
    /// The lease of the last allowed attempt lapsed: the job ends `cancelled`, the diagram's only
    /// exit from `lost` besides the queue. `attempts` counted dispatches were made.
    Exhausted { attempts: u32 },
    /// The lease lapsed while cancellation was pending: the job ends `cancelled`, never requeued.
    Cancel,
}

/// Whether a lease expiring at `lease_expires_at_ms` has lapsed at `now_ms`. Heartbeats, stream
/// appends and completions must use this same comparison, or a request arriving at the exact
/// expiry could be accepted by one and recovered by the other.
pub fn lease_expired(lease_expires_at_ms: i64, now_ms: i64) -> bool {
    now_ms >= lease_expires_at_ms
}

/// The recovery decision for `job` at `now_ms`. Pure and total.
///
/// - An active job (claimed, running) whose lease has lapsed is requeued while fewer than
///   [`MAX_DISPATCH_ATTEMPTS`] attempts were dispatched, otherwise exhausted.
/// - A `cancel_requested` job whose lease has lapsed is cancelled.
/// - A `lost` job (marked lost by a recovery that did not get to requeue it) is requeued or
///   exhausted by the same rule.
/// - An active job with no recorded lease can never be renewed by a heartbeat, so it is treated
///   as expired rather than held forever.
/// - Everything else (queued, terminal, live leases) is left alone.
pub fn decide(job: &JobLease, now_ms: i64) -> RecoveryDecision {
    let lapsed = job
        .lease_expires_at_ms
        .is_none_or(|expiry| lease_expired(expiry, now_ms));
    match job.state {
        JobState::Claimed | JobState::Running if lapsed => retry_or_exhaust(job),
        JobState::CancelRequested if lapsed => RecoveryDecision::Cancel,
        JobState::Lost => retry_or_exhaust(job),
        _ => RecoveryDecision::Nothing,
    }
}

/// Attempts of `job` that count against [`MAX_DISPATCH_ATTEMPTS`].
pub fn counted_attempts(job: &JobLease) -> u32 {
    job.dispatch_attempt.saturating_sub(job.released_attempts)
}

fn retry_or_exhaust(job: &JobLease) -> RecoveryDecision {
    let counted = counted_attempts(job);
    if counted < MAX_DISPATCH_ATTEMPTS && job.dispatch_attempt < MAX_DISPATCHES {
        RecoveryDecision::Requeue {
            next_attempt: job.dispatch_attempt + 1,
            counted,
        }
    } else {
        RecoveryDecision::Exhausted { attempts: counted }
    }
}

/// When recovery next needs to look at `job`: its lease expiry while it holds a claim (the job
/// object's alarm time), `Some(i64::MIN)` ("now") for a lost job or a claim without a lease,
/// and `None` when recovery has nothing to watch.
pub fn next_check_at_ms(job: &JobLease) -> Option<i64> {
    match job.state {
        JobState::Lost => Some(i64::MIN),
        s if s.is_active() => Some(job.lease_expires_at_ms.unwrap_or(i64::MIN)),
        _ => None,
    }
}

impl RecoveryDecision {
    /// The job inputs that carry the decision out from `from`, in order. It starts with
    /// [`JobInput::LeaseExpired`] exactly when the job still held a claim: that claim is then
    /// marked lost, the runner takes [`crate::state::RunnerInput::LeaseLost`] and its capacity
    /// is released.
    pub fn inputs(&self, from: JobState) -> Vec<JobInput> {
        let tail = match self {
            RecoveryDecision::Nothing => return Vec::new(),
            RecoveryDecision::Requeue { .. } => Some(JobInput::Requeue),
            RecoveryDecision::Exhausted { .. } => Some(JobInput::Exhaust),
            // cancel_requested + lease_expired is already terminal.
            RecoveryDecision::Cancel => None,
        };
        let mut inputs = Vec::with_capacity(2);
        if from.is_active() {
            inputs.push(JobInput::LeaseExpired);
        }
        inputs.extend(tail);
        inputs
    }

    /// The snapshot after the decision is applied. The attempt count is unchanged: a requeue
    /// only makes attempt `next_attempt` possible, the claim that follows dispatches it.
    pub fn apply(&self, job: &JobLease) -> Result<JobLease, StateError> {
        let state = self
            .inputs(job.state)
            .into_iter()
            .try_fold(job.state, JobState::transition)?;
        let lease_expires_at_ms = match self {
            RecoveryDecision::Nothing => job.lease_expires_at_ms,
            _ => None,
        };
        Ok(JobLease {
            state,
            lease_expires_at_ms,
            ..*job
        })
    }

    /// A stable name for the durable event and the job's rationale.
    pub fn code(&self) -> RecoveryCode {
        match self {
            RecoveryDecision::Nothing => RecoveryCode::Nothing,
            RecoveryDecision::Requeue { .. } => RecoveryCode::LeaseLostRequeued,
            RecoveryDecision::Exhausted { .. } => RecoveryCode::DispatchAttemptsExhausted,
            RecoveryDecision::Cancel => RecoveryCode::LeaseLostAfterCancelRequest,
        }
    }

    /// The human rationale recorded with the decision.
    pub fn reason(&self) -> String {
        match self {
            RecoveryDecision::Nothing => "lease alive or no lease held".to_owned(),
            RecoveryDecision::Requeue {
                next_attempt,
                counted,
            } => format!(
                "heartbeat lease expired; requeued for attempt {next_attempt} ({counted} of {MAX_DISPATCH_ATTEMPTS} counted attempts used)"
            ),
            RecoveryDecision::Exhausted { attempts } => format!(
                "heartbeat lease expired after {attempts} counted dispatch attempts (at most {MAX_DISPATCH_ATTEMPTS}); cancelled"
            ),
            RecoveryDecision::Cancel => {
                "heartbeat lease expired while cancellation was requested; cancelled".to_owned()
            }
        }
    }
}

/// What a runner's hand-back of the claim it holds does to the job (`POST …/release`).
///
/// A hand-back is the runner saying "I will not finish this": it is stopping (a second signal,
/// a drain timeout) or it restarted and no longer runs the work. Unlike a lapsed lease it does
/// not mark the runner lost, and the job is free at once instead of after the lease.
///
/// The released attempt still gets a number: it fences the old claim's late writes (the next
/// grant is attempt *n + 1* with a new nonce). But a job's first [`MAX_FREE_HAND_BACKS`]
/// hand-backs do not count against [`MAX_DISPATCH_ATTEMPTS`]: a runner stopping or restarting
/// does not spend the job's retries. Later hand-backs count like a lapsed lease, so a job handed
/// back at its last counted attempt ends `cancelled`, and no job is dispatched more than
/// [`MAX_DISPATCHES`] times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseDecision {
    /// Back to the queue for attempt `next_attempt`. `free` is `Some(k)` when this is the job's
    /// free hand-back *k* (of [`MAX_FREE_HAND_BACKS`]), `None` when it counts; `counted` is the
    /// job's counted attempts after it.
    Requeue {
        next_attempt: u32,
        free: Option<u32>,
        counted: u32,
    },
    /// Handed back, counted, at the last allowed attempt: the job ends `cancelled`.
    Exhausted { attempts: u32 },
    /// Handed back while cancellation was pending: the job ends `cancelled`, never requeued.
    Cancel,
}

/// The hand-back decision for `job` (its state, attempts dispatched and free hand-backs so far);
/// `None` when the job holds no claim (queued or finished), so there is nothing to hand back.
pub fn decide_release(job: &JobLease) -> Option<ReleaseDecision> {
    let next_attempt = job.dispatch_attempt + 1;
    match job.state {
        JobState::Claimed | JobState::Running if job.released_attempts < MAX_FREE_HAND_BACKS => {
            Some(ReleaseDecision::Requeue {
                next_attempt,
                free: Some(job.released_attempts + 1),
                counted: counted_attempts(job).saturating_sub(1),
            })
        }
        JobState::Claimed | JobState::Running => match retry_or_exhaust(job) {
            RecoveryDecision::Requeue { counted, .. } => Some(ReleaseDecision::Requeue {
                next_attempt,
                free: None,
                counted,
            }),
            _ => Some(ReleaseDecision::Exhausted {
                attempts: counted_attempts(job),
            }),
        },
        JobState::CancelRequested => Some(ReleaseDecision::Cancel),
        _ => None,
    }
}

impl ReleaseDecision {
    /// Where the job goes.
    pub fn next_state(&self) -> JobState {
        match self {
            ReleaseDecision::Requeue { .. } => JobState::Queued,
            ReleaseDecision::Exhausted { .. } | ReleaseDecision::Cancel => JobState::Cancelled,
        }
    }

    /// A stable name for the durable event.
    pub fn code(&self) -> ReleaseCode {
        match self {
            ReleaseDecision::Requeue { .. } => ReleaseCode::ReleasedRequeued,
            ReleaseDecision::Exhausted { .. } => ReleaseCode::ReleasedAtLastAttempt,
            ReleaseDecision::Cancel => ReleaseCode::ReleasedAfterCancelRequest,
        }
    }

    /// The human rationale recorded with the decision.
    pub fn reason(&self) -> String {
        match self {
            ReleaseDecision::Requeue {
                next_attempt,
                free: Some(k),
                ..
            } => format!(
                "handed back by its runner; requeued for attempt {next_attempt}; free hand-back {k} of {MAX_FREE_HAND_BACKS}, not counted against the {MAX_DISPATCH_ATTEMPTS} attempts"
            ),
            ReleaseDecision::Requeue {
                next_attempt,
                free: None,
                counted,
            } => format!(
                "handed back by its runner after {MAX_FREE_HAND_BACKS} free hand-backs, so it counts; requeued for attempt {next_attempt} ({counted} of {MAX_DISPATCH_ATTEMPTS} counted attempts used)"
            ),
            ReleaseDecision::Exhausted { attempts } => format!(
                "handed back by its runner after {MAX_FREE_HAND_BACKS} free hand-backs, at counted attempt {attempts} of {MAX_DISPATCH_ATTEMPTS}; no attempt left, cancelled"
            ),
            ReleaseDecision::Cancel => {
                "handed back by its runner while cancellation was requested; cancelled".to_owned()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::state::CompletionStatus;
    use crate::testkit::{check, Rng};

    const NOW: i64 = 1_780_000_000_000;

    #[test]
    fn decision_codes_round_trip_by_name() {
        crate::wire_name::assert_round_trips(
            RecoveryCode::ALL,
            RecoveryCode::as_str,
            RecoveryCode::parse,
        );
        crate::wire_name::assert_round_trips(
            ReleaseCode::ALL,
            ReleaseCode::as_str,
            ReleaseCode::parse,
        );
    }

    fn lease(state: JobState, attempt: u32, expiry: Option<i64>) -> JobLease {
        JobLease {
            state,
            dispatch_attempt: attempt,
            released_attempts: 0,
            lease_expires_at_ms: expiry,
        }
    }

    fn handed_back(job: JobLease, released: u32) -> JobLease {
        JobLease {
            released_attempts: released,
            ..job
        }
    }

    fn random_lease(rng: &mut Rng) -> JobLease {
        let state = *rng.pick(&JobState::ALL);
        let attempt = rng.below(9) as u32;
        let released = rng.below(u64::from(attempt.min(MAX_FREE_HAND_BACKS)) + 1) as u32;
        let expiry = if rng.chance(1, 8) {
            None
        } else {
            Some(NOW + rng.below(2_000) as i64 - 1_000)
        };
        handed_back(lease(state, attempt, expiry), released)
    }

    #[test]
    fn live_lease_is_left_alone() {
        for state in [
            JobState::Claimed,
            JobState::Running,
            JobState::CancelRequested,
        ] {
            assert_eq!(
                decide(&lease(state, 1, Some(NOW + 1)), NOW),
                RecoveryDecision::Nothing
            );
        }
    }

    #[test]
    fn lease_expires_at_its_exact_instant() {
        let job = lease(JobState::Running, 1, Some(NOW));
        assert_eq!(decide(&job, NOW - 1), RecoveryDecision::Nothing);
        assert_eq!(
            decide(&job, NOW),
            RecoveryDecision::Requeue {
                next_attempt: 2,
                counted: 1
            }
        );
        assert!(lease_expired(NOW, NOW));
        assert!(!lease_expired(NOW, NOW - 1));
    }

    #[test]
    fn expired_lease_requeues_until_the_third_attempt_then_exhausts() {
        for state in [JobState::Claimed, JobState::Running, JobState::Lost] {
            let at = |attempt| decide(&lease(state, attempt, Some(NOW - 1)), NOW);
            assert_eq!(
                at(1),
                RecoveryDecision::Requeue {
                    next_attempt: 2,
                    counted: 1
                }
            );
            assert_eq!(
                at(2),
                RecoveryDecision::Requeue {
                    next_attempt: 3,
                    counted: 2
                }
            );
            assert_eq!(at(3), RecoveryDecision::Exhausted { attempts: 3 });
        }
    }

    #[test]
    fn lease_lost_after_cancel_request_is_cancelled_not_requeued() {
        for attempt in 0..5 {
            let job = lease(JobState::CancelRequested, attempt, Some(NOW - 1));
            assert_eq!(decide(&job, NOW), RecoveryDecision::Cancel);
            let after = RecoveryDecision::Cancel.apply(&job).unwrap();
            assert_eq!(after.state, JobState::Cancelled);
        }
    }

    #[test]
    fn exhausted_job_ends_cancelled_with_its_reason() {
        let job = lease(JobState::Running, 3, Some(NOW - 1));
        let decision = decide(&job, NOW);
        assert_eq!(
            decision.inputs(job.state),
            [JobInput::LeaseExpired, JobInput::Exhaust]
        );
        assert_eq!(decision.apply(&job).unwrap().state, JobState::Cancelled);
        assert_eq!(decision.code().as_str(), "DISPATCH_ATTEMPTS_EXHAUSTED");
        assert!(decision.reason().contains("3 counted dispatch attempts"));
    }

    #[test]
    fn queued_and_terminal_jobs_are_never_recovered() {
        for state in [
            JobState::Queued,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Cancelled,
        ] {
            for expiry in [None, Some(NOW - 1), Some(NOW + 1)] {
                assert_eq!(
                    decide(&lease(state, 2, expiry), NOW),
                    RecoveryDecision::Nothing
                );
            }
            assert_eq!(next_check_at_ms(&lease(state, 2, Some(NOW))), None);
        }
    }

    #[test]
    fn claim_without_a_lease_counts_as_expired() {
        let job = lease(JobState::Claimed, 1, None);
        assert_eq!(
            decide(&job, NOW),
            RecoveryDecision::Requeue {
                next_attempt: 2,
                counted: 1
            }
        );
        assert_eq!(next_check_at_ms(&job), Some(i64::MIN));
    }

    #[test]
    fn alarm_time_is_the_lease_expiry() {
        let job = lease(JobState::Running, 1, Some(NOW + 30_000));
        assert_eq!(next_check_at_ms(&job), Some(NOW + 30_000));
        assert_eq!(decide(&job, NOW + 29_999), RecoveryDecision::Nothing);
        assert_ne!(decide(&job, NOW + 30_000), RecoveryDecision::Nothing);
    }

    #[test]
    fn only_jobs_that_held_a_claim_mark_a_runner_lost() {
        let running = lease(JobState::Running, 1, Some(NOW - 1));
        assert_eq!(
            decide(&running, NOW).inputs(running.state),
            [JobInput::LeaseExpired, JobInput::Requeue]
        );
        let lost = lease(JobState::Lost, 1, None);
        assert_eq!(decide(&lost, NOW).inputs(lost.state), [JobInput::Requeue]);
    }

    #[test]
    fn deciding_again_after_applying_does_nothing() {
        check(500, |rng| {
            let job = random_lease(rng);
            let decision = decide(&job, NOW);
            let after = decision
                .apply(&job)
                .expect("decide only returns decisions legal from the job's state");
            assert_eq!(decide(&after, NOW), RecoveryDecision::Nothing, "{job:?}");
            if decision == RecoveryDecision::Nothing {
                assert_eq!(after, job);
            } else {
                // A recovered job holds no lease, so no later sweep touches it again.
                assert_eq!(decide(&after, i64::MAX), RecoveryDecision::Nothing);
            }
        });
    }

    #[test]
    fn never_requeues_past_the_attempt_budget() {
        check(500, |rng| {
            let job = random_lease(rng);
            match decide(&job, NOW) {
                RecoveryDecision::Requeue {
                    next_attempt,
                    counted,
                } => {
                    assert!(counted < MAX_DISPATCH_ATTEMPTS);
                    assert_eq!(counted, counted_attempts(&job));
                    assert!(next_attempt <= MAX_DISPATCHES);
                    assert_eq!(next_attempt, job.dispatch_attempt + 1);
                    assert_ne!(job.state, JobState::CancelRequested);
                }
                RecoveryDecision::Exhausted { attempts } => {
                    assert!(attempts >= MAX_DISPATCH_ATTEMPTS)
                }
                RecoveryDecision::Cancel => assert_eq!(job.state, JobState::CancelRequested),
                RecoveryDecision::Nothing => {}
            }
        });
    }

    #[test]
    fn a_job_that_never_heartbeats_is_dispatched_at_most_three_times() {
        check(100, |rng| {
            let mut job = lease(JobState::Queued, 0, None);
            let mut now = NOW;
            let mut dispatches = 0;
            for _ in 0..20 {
                if job.state == JobState::Queued {
                    job.state = job.state.transition(JobInput::Claim).unwrap();
                    job.dispatch_attempt += 1;
                    job.lease_expires_at_ms = Some(now + 60_000);
                    dispatches += 1;
                }
                // Recovery runs at arbitrary times, sometimes twice in a row.
                now += rng.below(120_000) as i64;
                for _ in 0..=rng.below(2) {
                    job = decide(&job, now).apply(&job).unwrap();
                }
                if job.state.is_terminal() {
                    break;
                }
            }
            assert_eq!(job.state, JobState::Cancelled);
            assert_eq!(dispatches, MAX_DISPATCH_ATTEMPTS);
        });
    }

    #[test]
    fn a_completed_job_is_left_alone_whatever_its_old_lease_says() {
        let job = lease(JobState::Running, 1, Some(NOW - 1));
        let done = job
            .state
            .transition(JobInput::Complete(CompletionStatus::Succeeded))
            .unwrap();
        assert_eq!(
            decide(&lease(done, 1, Some(NOW - 1)), NOW),
            RecoveryDecision::Nothing
        );
    }

    #[test]
    fn a_hand_back_is_free_five_times_then_counts_like_a_lost_lease() {
        for state in [JobState::Claimed, JobState::Running] {
            let at = |attempt, released| {
                decide_release(&handed_back(lease(state, attempt, Some(NOW + 1)), released))
            };
            // Two lost leases, then a hand-back: free, the job still has its third attempt.
            assert_eq!(
                at(3, 0),
                Some(ReleaseDecision::Requeue {
                    next_attempt: 4,
                    free: Some(1),
                    counted: 2
                })
            );
            assert_eq!(
                at(5, 4),
                Some(ReleaseDecision::Requeue {
                    next_attempt: 6,
                    free: Some(5),
                    counted: 0
                })
            );
            // The sixth hand-back counts.
            assert_eq!(
                at(6, 5),
                Some(ReleaseDecision::Requeue {
                    next_attempt: 7,
                    free: None,
                    counted: 1
                })
            );
            let last = at(8, 5).expect("an active job can be handed back");
            assert_eq!(last, ReleaseDecision::Exhausted { attempts: 3 });
            assert_eq!(last.next_state(), JobState::Cancelled);
            assert!(
                last.reason().contains("counted attempt 3 of 3"),
                "{}",
                last.reason()
            );
        }
        let cancel =
            decide_release(&lease(JobState::CancelRequested, 1, Some(NOW + 1))).expect("active");
        assert_eq!(cancel, ReleaseDecision::Cancel);
        assert_eq!(cancel.next_state(), JobState::Cancelled);
        for state in JobState::ALL.into_iter().filter(|s| !s.is_active()) {
            assert_eq!(
                decide_release(&lease(state, 1, None)),
                None,
                "{state} holds no claim"
            );
        }
    }

    #[test]
    fn lost_leases_after_free_hand_backs_still_get_three_counted_attempts() {
        let job = handed_back(lease(JobState::Running, 4, Some(NOW - 1)), 2);
        assert_eq!(
            decide(&job, NOW),
            RecoveryDecision::Requeue {
                next_attempt: 5,
                counted: 2
            }
        );
        let job = handed_back(lease(JobState::Running, 5, Some(NOW - 1)), 2);
        assert_eq!(
            decide(&job, NOW),
            RecoveryDecision::Exhausted { attempts: 3 }
        );
    }

    #[test]
    fn no_job_is_dispatched_more_than_eight_times_whatever_its_runners_do() {
        check(300, |rng| {
            let mut job = lease(JobState::Queued, 0, None);
            let mut dispatches = 0;
            for _ in 0..40 {
                if job.state == JobState::Queued {
                    job.state = JobState::Claimed;
                    job.dispatch_attempt += 1;
                    job.lease_expires_at_ms = Some(NOW + 60_000);
                    dispatches += 1;
                }
                // The holder either hands the job back or lets its lease lapse.
                if rng.chance(2, 3) {
                    match decide_release(&job).expect("the job holds a claim") {
                        ReleaseDecision::Requeue { free, .. } => {
                            job.state = JobState::Queued;
                            job.released_attempts += u32::from(free.is_some());
                        }
                        ReleaseDecision::Exhausted { .. } | ReleaseDecision::Cancel => {
                            job.state = JobState::Cancelled;
                        }
                    }
                    job.lease_expires_at_ms = None;
                } else {
                    job = decide(&job, NOW + 60_000).apply(&job).unwrap();
                }
                assert!(job.released_attempts <= MAX_FREE_HAND_BACKS);
                assert!(counted_attempts(&job) <= MAX_DISPATCH_ATTEMPTS);
                if job.state.is_terminal() {
                    break;
                }
            }
            assert_eq!(job.state, JobState::Cancelled);
            assert!(dispatches <= MAX_DISPATCHES, "{dispatches}");
            assert_eq!(counted_attempts(&job), MAX_DISPATCH_ATTEMPTS);
        });
    }
}
