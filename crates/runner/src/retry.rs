//! When and how often a request is repeated: bounded exponential backoff with jitter, used only
//! where repeating a request cannot change its meaning: exchanging a session, heartbeating,
//! re-sending the *same* chunk or the *same* completion, reading a job's input. A claim is never
//! retried once it may have reached the server (a lost answer would leave a second job held).
//!
//! The schedule itself is [`backon`]'s; [`RetryPolicy`] is our vocabulary for it (tries in all,
//! first wait, longest wait), so that callers and tests name a policy without naming the crate.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder, Retryable};

/// How often and how patiently to repeat a safe request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (1 means no retry).
    pub attempts: u32,
    pub initial: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    pub const DEFAULT: Self = Self {
        attempts: 6,
        initial: Duration::from_millis(250),
        max: Duration::from_secs(8),
    };

    pub const NONE: Self = Self {
        attempts: 1,
        initial: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// The longest wait before try `attempt + 1` (after `attempt` failures, 1-based): doubling
    /// from `initial`, capped at `max`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The waits between tries, in order: the wait after failure `n` is uniformly in
    /// `[ceiling(n)/2, ceiling(n))`, so that runners that failed together do not retry
    /// together. (backon adds a jitter of up to one delay to each delay; halving both bounds
    /// puts the result in the ceiling's upper half.)
    pub fn backoff(&self) -> ExponentialBackoff {
        self.schedule()
            .with_max_times(usize::try_from(self.attempts.saturating_sub(1)).unwrap_or(usize::MAX))
            .build()
    }

    /// [`RetryPolicy::backoff`] without an end, for a loop that waits forever between failures.
    pub fn endless(&self) -> ExponentialBackoff {
        self.schedule().without_max_times().build()
    }

    fn schedule(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_factor(2.0)
            .with_min_delay(self.initial / 2)
            .with_max_delay(self.max / 2)
            .with_jitter()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Runs `op` until it succeeds, fails with an error `transient` calls permanent, or the
/// policy's tries are spent; returns the last answer.
pub async fn retry<T, E, F, Fut>(
    policy: RetryPolicy,
    transient: impl Fn(&E) -> bool,
    op: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let schedule = policy
        .schedule()
        .with_max_times(usize::try_from(policy.attempts.saturating_sub(1)).unwrap_or(usize::MAX));
    op.retry(schedule).when(transient).await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_with_jitter_in_the_upper_half() {
        let policy = RetryPolicy {
            attempts: 10,
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        assert_eq!(policy.ceiling(1), Duration::from_millis(100));
        assert_eq!(policy.ceiling(2), Duration::from_millis(200));
        assert_eq!(policy.ceiling(4), Duration::from_millis(800));
        assert_eq!(policy.ceiling(5), Duration::from_secs(1));
        assert_eq!(policy.ceiling(60), Duration::from_secs(1));
        for _ in 0..20 {
            let delays: Vec<Duration> = policy.backoff().collect();
            assert_eq!(delays.len(), 9, "a wait between each two of the ten tries");
            for (failure, delay) in (1..).zip(&delays) {
                let ceiling = policy.ceiling(failure);
                assert!(
                    *delay >= ceiling / 2 && *delay <= ceiling,
                    "after failure {failure}: {delay:?} outside [{:?}, {ceiling:?}]",
                    ceiling / 2
                );
            }
        }
        assert_eq!(RetryPolicy::NONE.backoff().count(), 0);
        assert!(policy.endless().nth(1_000).is_some_and(|d| d <= policy.max));
    }

    #[tokio::test]
    async fn retries_transient_errors_only_and_stops_after_the_budget() {
        let policy = RetryPolicy {
            attempts: 3,
            initial: Duration::from_millis(1),
            max: Duration::from_millis(2),
        };
        let calls = AtomicU32::new(0);
        let result: Result<(), &str> = retry(
            policy,
            |e| *e == "transient",
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err("transient")
            },
        )
        .await;
        assert_eq!(result, Err("transient"));
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        calls.store(0, Ordering::SeqCst);
        let result: Result<(), &str> = retry(
            policy,
            |e| *e == "transient",
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err("permanent")
            },
        )
        .await;
        assert_eq!(result, Err("permanent"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        calls.store(0, Ordering::SeqCst);
        let result = retry(
            policy,
            |e: &&str| *e == "transient",
            || async {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err("transient")
                } else {
                    Ok(7)
                }
            },
        )
        .await;
        assert_eq!(result, Ok(7));
    }
}
