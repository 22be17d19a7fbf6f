//! A claim's heartbeats, on a task of their own.
//!
//! The job runs elsewhere (a child process, or the caller's own async code); heartbeats must
//! not wait for it, or a busy job would let its lease lapse and be requeued under it. So
//! [`Heartbeat::spawn`] starts a task that extends the lease every `interval` and publishes
//! what it learns on a watch channel: a cancellation request the moment a heartbeat reports
//! it, a lost claim (`409 CLAIM_NOT_ACTIVE`, `409 LEASE_EXPIRED`, `404`) as soon as the server
//! says so. Transient failures are counted and retried on the next tick; the lease (60 s by
//! default) outlasts several of them. Dropping the [`Heartbeat`] stops the task.

use std::sync::Arc;
use std::time::Duration;

use edgerunner_protocol::envelope::ClaimId;
use edgerunner_protocol::error_code::ErrorCode;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{interval_at, Instant, MissedTickBehavior};

use crate::client::{HeartbeatAnswer, RunnerClient};
use crate::http::ClientError;

/// How often to beat and how far each beat extends the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatConfig {
    pub interval: Duration,
    /// 15–120 s, as the server accepts; longer than `interval` by several beats.
    pub extend_seconds: u32,
}

impl HeartbeatConfig {
    pub const DEFAULT: Self = Self {
        interval: Duration::from_secs(5),
        extend_seconds: 60,
    };
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What the heartbeats have learned about the claim so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimStatus {
    /// `Some(reason)` once a heartbeat reported `cancelRequested` (the reason may be absent).
    pub cancel_requested: Option<Option<String>>,
    /// Why the claim is no longer this runner's, once the server said so.
    pub lost: Option<String>,
    /// Successful heartbeats.
    pub beats: u64,
    /// Failures since the last success, and the last one's text.
    pub failures: u32,
    pub last_error: Option<String>,
    pub lease_expires_at: Option<String>,
}

impl ClaimStatus {
    /// Folds one heartbeat answer in.
    pub fn record(&mut self, answer: &HeartbeatAnswer) {
        self.beats += 1;
        self.failures = 0;
        self.last_error = None;
        if answer.lease_expires_at.is_some() {
            self.lease_expires_at.clone_from(&answer.lease_expires_at);
        }
        if answer.cancel_requested && self.cancel_requested.is_none() {
            self.cancel_requested = Some(answer.cancel_reason.clone());
        }
    }

    /// Folds one failure in; `true` when it means the claim is gone.
    pub fn record_error(&mut self, error: &ClientError) -> bool {
        if is_claim_lost(error) {
            self.lost = Some(error.to_string());
            return true;
        }
        self.failures += 1;
        self.last_error = Some(error.to_string());
        false
    }
}

/// Whether a runner-endpoint error means the claim is no longer held: the lease lapsed and the
/// job was recovered, the claim was released, or the job is not this runner's.
pub fn is_claim_lost(error: &ClientError) -> bool {
    matches!(
        error.code(),
        Some(
            ErrorCode::ClaimNotActive
                | ErrorCode::LeaseExpired
                | ErrorCode::StreamLeaseExpired
                | ErrorCode::StreamIdentityChanged
        )
    ) || error.status() == Some(404)
}

/// A running heartbeat task; dropping it stops the beats.
pub struct Heartbeat {
    status: watch::Receiver<ClaimStatus>,
    task: JoinHandle<()>,
}

impl Heartbeat {
    /// Starts beating for `claim_id`, the first beat one `interval` from now (the caller is
    /// expected to have sent the first one itself, to learn about cancellation before it
    /// starts work). `initial` is what is already known.
    pub fn spawn(
        client: Arc<RunnerClient>,
        claim_id: ClaimId,
        config: HeartbeatConfig,
        initial: ClaimStatus,
    ) -> Self {
        let (sender, status) = watch::channel(initial);
        let task = tokio::spawn(async move {
            let mut ticker = interval_at(Instant::now() + config.interval, config.interval);
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let outcome = client.heartbeat(&claim_id, config.extend_seconds).await;
                let mut lost = false;
                sender.send_modify(|status| match &outcome {
                    Ok(answer) => status.record(answer),
                    Err(error) => lost = status.record_error(error),
                });
                if lost || sender.is_closed() {
                    return;
                }
            }
        });
        Self { status, task }
    }

    /// A receiver of the claim's status (clone it freely).
    pub fn status(&self) -> watch::Receiver<ClaimStatus> {
        self.status.clone()
    }

    /// The status now.
    pub fn current(&self) -> ClaimStatus {
        self.status.borrow().clone()
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn answer(cancel: bool, reason: Option<&str>) -> HeartbeatAnswer {
        HeartbeatAnswer {
            cancel_requested: cancel,
            cancel_reason: reason.map(str::to_owned),
            state: Some("running".into()),
            lease_expires_at: Some("2026-11-30T01:12:00.000Z".into()),
        }
    }

    fn api(status: u16, code: &str) -> ClientError {
        ClientError::Api {
            what: "POST /api/remote-runners/heartbeat".into(),
            status,
            code: Some(code.into()),
            message: "m".into(),
            body: Value::Null,
        }
    }

    #[test]
    fn cancellation_is_kept_from_the_first_beat_that_reports_it() {
        let mut status = ClaimStatus::default();
        status.record(&answer(false, None));
        assert_eq!(status.cancel_requested, None);
        status.record(&answer(true, Some("operator asked")));
        status.record(&answer(true, None));
        assert_eq!(status.cancel_requested, Some(Some("operator asked".into())));
        assert_eq!(status.beats, 3);
    }

    #[test]
    fn lost_claims_stop_the_beats_and_transient_failures_do_not() {
        let mut status = ClaimStatus::default();
        let transient = ClientError::Transport {
            what: "POST /api/remote-runners/heartbeat".into(),
            detail: "connection reset".into(),
            connect: false,
        };
        assert!(!status.record_error(&transient));
        assert_eq!(status.failures, 1);
        status.record(&answer(false, None));
        assert_eq!(status.failures, 0);
        assert!(status.record_error(&api(409, "CLAIM_NOT_ACTIVE")));
        assert!(status.lost.is_some());
        assert!(is_claim_lost(&api(409, "LEASE_EXPIRED")));
        assert!(is_claim_lost(&api(404, "NOT_FOUND")));
        assert!(!is_claim_lost(&api(422, "INVALID_LEASE")));
        // A code this version does not know (a newer server's) is not taken for a lost claim.
        assert!(!is_claim_lost(&api(409, "CLAIM_NOT_ACTIVE_ANY_MORE")));
    }
}
