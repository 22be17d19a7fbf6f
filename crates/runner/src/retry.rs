//! Bounded exponential backoff with jitter, used only where repeating a request cannot change
//! its meaning: exchanging a session, heartbeating, re-sending the *same* chunk or the *same*
//! completion, reading a job's input. A claim is never retried once it may have reached the
//! server (a lost answer would leave a second job held).

use std::future::Future;
use std::time::Duration;

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

    /// The wait before try `attempt + 1`: "full jitter", uniformly in `[ceiling/2, ceiling]`, so
    /// that runners that failed together do not retry together.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        let half = ceiling / 2;
        let spread = u64::try_from((ceiling - half).as_millis()).unwrap_or(u64::MAX);
        let jitter = if spread == 0 {
            0
        } else {
            random_u64() % (spread + 1)
        };
        half + Duration::from_millis(jitter)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // Jitter only spreads retries out; without randomness every wait is the midpoint.
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => 0,
    }
}

/// Runs `op` until it succeeds, fails with an error `transient` calls permanent, or the
/// policy's tries are spent; returns the last answer.
pub async fn retry<T, E, F, Fut>(
    policy: RetryPolicy,
    transient: impl Fn(&E) -> bool,
    mut op: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempt = 1;
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(error) if attempt < policy.attempts && transient(&error) => {
                tokio::time::sleep(policy.delay(attempt)).await;
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
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
        for attempt in 1..8 {
            let delay = policy.delay(attempt);
            let ceiling = policy.ceiling(attempt);
            assert!(delay >= ceiling / 2 && delay <= ceiling, "{delay:?}");
        }
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
