//! The claim loop: claim up to capacity, start a task per job, back off on refusals, hand
//! back what a previous process left, and drain or give back on shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use edgerunner_protocol::error_code::ErrorCode;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{error, info, warn, Instrument};

use super::job::JobRun;
use super::{JobOutcome, JobReport, Progress, ShutdownState, WorkerConfig, WorkerSummary};
use crate::client::RunnerClient;
use crate::http::ClientError;
use crate::retry::RetryPolicy;

/// The reason a starting process gives for the claims a previous process left.
const RESTART_REASON: &str =
    "the runner restarted; its new process runs none of the previous process's claims";

/// The claim loop.
pub struct Worker {
    client: Arc<RunnerClient>,
    config: Arc<WorkerConfig>,
    progress: watch::Sender<Progress>,
    /// Set when this process hands a claim back: the capacity that frees is ours, so the next
    /// `RUNNER_AT_CAPACITY` is worth retrying after one poll interval, not a long backoff.
    handed_back: Arc<AtomicBool>,
}

impl Worker {
    pub fn new(client: Arc<RunnerClient>, config: WorkerConfig) -> Self {
        Self {
            client,
            config: Arc::new(config),
            progress: watch::Sender::new(Progress::new(Instant::now())),
            handed_back: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The runner's progress, updated as jobs start and end.
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Claims and runs jobs until `shutdown` leaves [`ShutdownState::Running`], the job budget
    /// is spent, the runner is idle (when asked to stop then), or a fatal error; then waits for
    /// the jobs still running.
    pub async fn run(&self, mut shutdown: watch::Receiver<ShutdownState>) -> WorkerSummary {
        // Until the server has answered once: a server that is unreachable at start is reported by
        // the claim below, and the hand-back is tried again before the next claim.
        let mut previous_claims_settled = false;
        let permits = Arc::new(Semaphore::new(self.config.capacity.max(1)));
        let mut jobs: JoinSet<JobReport> = JoinSet::new();
        let mut summary = WorkerSummary::default();
        let mut backoff: Option<backon::ExponentialBackoff> = None;
        let mut last_problem: Option<String> = None;
        loop {
            while let Some(done) = jobs.try_join_next() {
                self.record(&mut summary, done);
            }
            let state = *shutdown.borrow();
            self.progress.send_if_modified(|progress| {
                let changed = progress.shutdown != state;
                progress.shutdown = state;
                changed
            });
            if state != ShutdownState::Running {
                break;
            }
            if self
                .config
                .max_jobs
                .is_some_and(|max| summary.claimed >= max)
            {
                info!(
                    event = "runner.budget_spent",
                    claimed = summary.claimed,
                    "claimed {} job(s), the --max-jobs budget",
                    summary.claimed
                );
                break;
            }
            let idle_left = self.config.idle_exit.and_then(|limit| {
                let since = self.progress.borrow().idle_since;
                idle_left(limit, since.filter(|_| jobs.is_empty()), Instant::now())
            });
            if idle_left == Some(Duration::ZERO) {
                info!(
                    event = "runner.idle_exit",
                    claimed = summary.claimed,
                    "no job for {:?} (--idle-exit); exiting",
                    self.config.idle_exit.unwrap_or_default()
                );
                break;
            }
            if !previous_claims_settled {
                previous_claims_settled = self.hand_back_previous_claims().await;
            }
            let permit = tokio::select! {
                permit = Arc::clone(&permits).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                () = changed(&mut shutdown) => continue,
            };
            // A long poll, unless the runner is to stop at the first "nothing queued".
            let wait = if self.config.exit_when_idle && jobs.is_empty() {
                0
            } else {
                self.config.claim_wait
            };
            // An idle runner that is to exit waits no longer than its idle time has left.
            let wait = idle_left.map_or(wait, |left| {
                wait.min(u32::try_from(left.as_secs()).unwrap_or(u32::MAX))
            });
            let asked = tokio::time::Instant::now();
            match self.client.claim_waiting(wait).await {
                Ok(Some(assignment)) => {
                    summary.claimed += 1;
                    backoff = None;
                    last_problem = None;
                    let job = JobRun {
                        client: Arc::clone(&self.client),
                        config: Arc::clone(&self.config),
                        shutdown: shutdown.clone(),
                        handed_back: Arc::clone(&self.handed_back),
                    };
                    let span = tracing::info_span!(
                        "job",
                        job_id = assignment.job_id().as_str(),
                        claim_id = assignment.claim_id().as_str(),
                        attempt = assignment.attempt().get(),
                    );
                    self.progress.send_modify(|progress| {
                        progress.running += 1;
                        progress.idle_since = None;
                    });
                    jobs.spawn(job.run(assignment, permit).instrument(span));
                }
                Ok(None) => {
                    drop(permit);
                    backoff = None;
                    last_problem = None;
                    if self.config.exit_when_idle && jobs.is_empty() {
                        info!(
                            event = "runner.idle",
                            "no job is queued for this runner and none is running; exiting"
                        );
                        break;
                    }
                    // A long poll that waited has already spent the pause; one that came back
                    // early (the server was not waiting) must not make this loop spin.
                    let waited = asked.elapsed() >= Duration::from_secs(u64::from(wait)) / 2;
                    if wait == 0 || !waited {
                        let interval = self.config.poll_interval;
                        let left = idle_left.map_or(interval, |left| {
                            left.saturating_sub(asked.elapsed())
                                .max(Duration::from_millis(50))
                        });
                        pause(interval.min(left), &mut shutdown).await;
                    }
                }
                Err(ClientError::Refused(error)) => {
                    drop(permit);
                    summary.claimed += 1;
                    summary.refused += 1;
                    self.progress
                        .send_modify(|progress| progress.not_completed += 1);
                    error!(
                        event = "claim.refused",
                        code = error.code(),
                        reason = %error,
                        "refused an assignment before execution ({}): {error}; it was not run",
                        error.code()
                    );
                }
                Err(error) if is_fatal(&error) => {
                    drop(permit);
                    error!(
                        event = "runner.fatal",
                        code = error.code_text(),
                        reason = %error,
                        "cannot go on: {error}"
                    );
                    summary.fatal = Some(error);
                    break;
                }
                Err(error) => {
                    drop(permit);
                    let (event, message) = describe_claim_problem(&error);
                    if last_problem.as_deref() != Some(message.as_str()) {
                        warn!(
                            event,
                            code = error.code_text(),
                            reason = %error,
                            "{message}"
                        );
                        last_problem = Some(message);
                    }
                    let own_capacity = error.code() == Some(ErrorCode::RunnerAtCapacity)
                        && self.handed_back.swap(false, Ordering::SeqCst);
                    if own_capacity {
                        // Our own hand-back freed it: look again after one poll interval.
                        backoff = None;
                        pause(self.config.poll_interval, &mut shutdown).await;
                        continue;
                    }
                    let wait = backoff
                        .get_or_insert_with(|| {
                            RetryPolicy {
                                attempts: u32::MAX,
                                initial: self.config.poll_interval.max(Duration::from_millis(200)),
                                max: Duration::from_secs(30),
                            }
                            .endless()
                        })
                        .next()
                        .unwrap_or(Duration::from_secs(30));
                    pause(wait, &mut shutdown).await;
                }
            }
        }
        if !jobs.is_empty() {
            info!(
                event = "runner.draining",
                running = jobs.len(),
                "waiting for {} running job(s)",
                jobs.len()
            );
        }
        while let Some(done) = jobs.join_next().await {
            self.record(&mut summary, done);
        }
        summary
    }

    /// Hands back the claims this runner's identity holds: this process has just started and
    /// runs none of them. `false` when the list could not be read for a reason that may pass
    /// (the server unreachable, the runner not approved yet): the caller tries again later. A
    /// claim that cannot be handed back is reported, and its lease lapses as before.
    async fn hand_back_previous_claims(&self) -> bool {
        let held = match self.client.held_claims().await {
            Ok(held) => held,
            Err(error) if error.is_transient() || error.status() == Some(503) => return false,
            // Not approved yet: it has never held a claim. (A refused credential is the claim
            // loop's to report.)
            Err(error)
                if error.code() == Some(ErrorCode::RunnerPendingApproval)
                    || error.status() == Some(401) =>
            {
                return true
            }
            Err(error) => {
                warn!(
                    event = "runner.held_claims_unknown",
                    code = error.code_text(),
                    "could not list the claims a previous process left ({error}); their leases will lapse"
                );
                return true;
            }
        };
        for claim_id in held {
            match self.client.release(&claim_id, RESTART_REASON).await {
                Ok(state) => {
                    self.handed_back.store(true, Ordering::SeqCst);
                    info!(
                        event = "claim.handed_back",
                        claim_id = claim_id.as_str(),
                        job_state = state.as_str(),
                        "handed back claim {claim_id}, left by a previous process of this runner (the job is {state} now)"
                    );
                }
                Err(error) => warn!(
                    event = "claim.hand_back_failed",
                    claim_id = claim_id.as_str(),
                    code = error.code_text(),
                    "could not hand back claim {claim_id} ({error}); its lease will lapse"
                ),
            }
        }
        true
    }

    fn record(&self, summary: &mut WorkerSummary, done: Result<JobReport, tokio::task::JoinError>) {
        let outcome = match done {
            Ok(report) => {
                let outcome = report.outcome.clone();
                summary.jobs.push(report);
                outcome
            }
            Err(error) => {
                error!(
                    event = "job.crashed",
                    "a job task ended abnormally: {error}"
                );
                JobOutcome::NotCompleted {
                    reason: error.to_string(),
                }
            }
        };
        self.progress
            .send_modify(|progress| progress.record(&outcome, Instant::now()));
    }
}

/// Errors no amount of waiting fixes: the credential is refused (rotated, revoked, wrong),
/// the local configuration is unusable, or the server's sessions are for another identity.
fn is_fatal(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Config(_) | ClientError::IdentityMismatch(_)
    ) || error.status() == Some(401)
        || error.code() == Some(ErrorCode::RunnerRevoked)
}

fn describe_claim_problem(error: &ClientError) -> (&'static str, String) {
    match error.code() {
        Some(ErrorCode::RunnerPendingApproval) => (
            "runner.pending_approval",
            "waiting for an admin to approve this runner's fingerprint".into(),
        ),
        Some(ErrorCode::RunnerNotActive) => (
            "runner.not_active",
            format!("the server gives this runner no work now: {error}"),
        ),
        Some(ErrorCode::RunnerAtCapacity) => (
            "runner.at_capacity",
            "the server counts this runner at capacity; waiting".into(),
        ),
        _ => ("claim.failed", format!("claim failed: {error}")),
    }
}

/// How much of `limit` a runner idle since `idle_since` has left at `now` before it exits
/// (`--idle-exit`): `None` while a job runs (`idle_since` is `None`), zero once it is spent.
fn idle_left(limit: Duration, idle_since: Option<Instant>, now: Instant) -> Option<Duration> {
    let since = idle_since?;
    Some(limit.saturating_sub(now.saturating_duration_since(since)))
}

/// Waits for the next change of `shutdown`; never, once its sender is gone.
async fn changed(shutdown: &mut watch::Receiver<ShutdownState>) {
    if shutdown.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn pause(duration: Duration, shutdown: &mut watch::Receiver<ShutdownState>) {
    tokio::select! {
        () = tokio::time::sleep(duration) => {}
        () = changed(shutdown) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_runner_has_its_limit_less_the_time_since_its_last_job() {
        let start = Instant::now();
        let limit = Duration::from_secs(30);
        assert_eq!(idle_left(limit, Some(start), start), Some(limit));
        assert_eq!(
            idle_left(limit, Some(start), start + Duration::from_secs(12)),
            Some(Duration::from_secs(18))
        );
        assert_eq!(
            idle_left(limit, Some(start), start + limit),
            Some(Duration::ZERO)
        );
        assert_eq!(
            idle_left(limit, Some(start), start + Duration::from_secs(90)),
            Some(Duration::ZERO),
            "long past: spent, never negative"
        );
    }

    #[test]
    fn a_runner_with_a_job_running_is_never_idle() {
        let start = Instant::now();
        assert_eq!(
            idle_left(Duration::ZERO, None, start + Duration::from_secs(999)),
            None
        );
    }

    #[test]
    fn the_idle_time_counts_from_the_end_of_the_last_job() {
        let start = Instant::now();
        let ended = start + Duration::from_secs(100);
        let limit = Duration::from_secs(30);
        assert_eq!(
            idle_left(limit, Some(ended), ended + Duration::from_secs(29)),
            Some(Duration::from_secs(1))
        );
        // A clock that reads earlier than the last end (never, but not a panic either).
        assert_eq!(idle_left(limit, Some(ended), start), Some(limit));
    }
}
