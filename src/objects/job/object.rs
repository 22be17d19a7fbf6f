//! `JobObject`: one Durable Object per job (`id_from_name(job id)`), the single writer of that
//! job's rows after its grant (which the claiming runner's object writes:
//! `crate::objects::runner::grant`).
//!
//! It serializes everything that changes its job after that — heartbeat, stream append,
//! completion, hand-back, cancellation, recovery — by running each operation under
//! `block_concurrency_while`:
//! a Durable Object is only single-threaded *until it awaits*, and an operation here may read
//! D1, decides, and writes D1. It decides with the protocol crate's pure rules from the job as
//! the object's own last write left it (a warm object), from what a claim's first heartbeat
//! implies (`super::heartbeat::presumed_first`), or from the job read fresh (one batched read), and
//! applies the decision as one D1 batch whose statements carry their guards (state + attempt)
//! and assert what the decision relied on; the schema's triggers and constraints make a guard
//! that does not hold abort the whole batch rather than match nothing ([`decide_and_write`]).

use std::cell::Cell;
use std::rc::Rc;

use worker::{durable_object, DurableObject, Env, Request, Response, Result, State, Storage};

use super::commit::{Answer, OpCtx, OpOutcome, OpResult};
use super::snapshot::{Known, Snapshot};
use crate::archive;
use crate::objects::job::{JobOp, JobRefusal, JobReply};
use crate::objects::{answer, read_op};
use crate::platform::{alarm_delay, now_ms};
use crate::store::{guards, Db, RoundTrips};

#[durable_object]
pub struct JobObject {
    state: State,
    env: Env,
    /// What this object knows of its job after its last committed write (see
    /// [`decide_and_write`]): a runner's next heartbeat, chunk or completion decides from it
    /// without reading D1.
    known: Known,
    /// Whether the job's id is stored beside the alarm (see [`JobObject::run`]).
    named: Cell<bool>,
    /// The alarm as this object last set it (`Some(None)`: deleted), or not known (`None`: a
    /// fresh object, or a move that failed).
    alarm: Cell<Option<Option<i64>>>,
}

/// A lease's alarm is left where this object last set it while that is at or before the lease
/// and at least this far ahead: so a runner heartbeating well inside its lease moves it only
/// every few heartbeats, and one that stops is still recovered at its lease (the earlier alarm
/// finds the lease alive and re-arms there).
const ALARM_KEPT_AHEAD_MILLIS: i64 = 30_000;

impl DurableObject for JobObject {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            known: Known::default(),
            named: Cell::new(false),
            alarm: Cell::new(None),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let trips = RoundTrips::default();
        let op: JobOp = match read_op(req).await {
            Ok(op) => op,
            Err(err) => return answer(&Err::<JobReply, JobRefusal>(err.into()), &trips),
        };
        let decided = self.run(op, &trips).await;
        answer(&decided, &trips)
    }

    /// The lease's own alarm: the exact-expiry half of recovery (cron is the safety net).
    async fn alarm(&self) -> Result<Response> {
        let job_id: Option<String> = self.state.storage().get(JOB_ID_KEY).await.ok().flatten();
        let Some(job_id) = job_id else {
            // Its id is stored with the first alarm; should that write have failed, the cron
            // pass covers the lease.
            worker::console_error!("job object: an alarm with no job id stored");
            return Response::ok("no job");
        };
        let op = JobOp::Recover {
            job_id: job_id.clone(),
            actor: "system:alarm".to_owned(),
        };
        let finished = match self.run(op, &RoundTrips::default()).await {
            Ok(JobReply::Recovered(recovered)) => recovered.state.is_terminal(),
            Ok(reply) => {
                return Response::ok(serde_json::to_string(&reply).unwrap_or_default());
            }
            Err(err) => {
                worker::console_error!("alarm recovery of {job_id} failed: {err:?}");
                // A failed alarm is retried by the runtime; cron catches anything it still misses.
                return Err(worker::Error::RustError("alarm recovery failed".into()));
            }
        };
        if !finished {
            return Response::ok("recovered");
        }
        // A finished job's alarm is its archive's.
        match self
            .archive(&job_id, archive::Mode::Due, &RoundTrips::default())
            .await
        {
            Ok(reply) => Response::ok(serde_json::to_string(&reply).unwrap_or_default()),
            Err(err) => {
                worker::console_error!("alarm archive of {job_id} failed: {err:?}");
                // Retried by the runtime; the cron pass finds the job due all the same.
                Err(worker::Error::RustError("alarm archive failed".into()))
            }
        }
    }
}

/// Storage key under which the object remembers which job it is.
const JOB_ID_KEY: &str = "jobId";

impl JobObject {
    /// Runs one operation under `block_concurrency_while` (so no other event of this job
    /// interleaves with its read-decide-write), then points the alarm at the lease it left.
    ///
    /// The alarm and the D1 batch cannot commit together, so their order carries the promise
    /// that every lease has an alarm at or before its expiry. The grant, the one write that
    /// *starts* a lease, is the runner's object's, which arms its own alarm for the lease
    /// before the grant commits ([`crate::objects::runner::grant`]) and asks this object at
    /// that lease whether it watches it now. An operation here extends or ends a lease and
    /// moves the alarm afterwards, where a failure (or a crash) leaves the earlier alarm, which
    /// finds the lease alive and re-arms at it (see `recover`). So nothing after the commit can
    /// fail the operation.
    async fn run(&self, op: JobOp, trips: &RoundTrips) -> Answer {
        if let JobOp::Archive { job_id, mode } = &op {
            return self.archive(job_id, *mode, trips).await;
        }
        let op = match op {
            JobOp::Watch { job_id, attempt } => {
                let watch = super::watch::decide(self.known.borrow().as_ref(), &job_id, attempt);
                let watching = match watch {
                    super::watch::Watch::Watching => true,
                    super::watch::Watch::IfAlarmSet => {
                        matches!(self.state.storage().get_alarm().await, Ok(Some(_)))
                    }
                    super::watch::Watch::Recover => false,
                };
                if watching {
                    return Ok(JobReply::Watching);
                }
                JobOp::Recover {
                    job_id,
                    actor: "system:alarm".to_owned(),
                }
            }
            op => op,
        };
        let presume = self.never_ran(&op).await;
        let env = self.env.clone();
        let trips = trips.clone();
        let known = Rc::clone(&self.known);
        let recovering = matches!(op, JobOp::Recover { .. });
        let job_id = op.job_id().to_owned();
        let outcome = self
            .state
            .block_concurrency_while(async move {
                Ok(decide_and_write(env, trips, known, op, presume).await)
            })
            .await
            .map_err(JobRefusal::internal)??;
        // A finished job's alarm is its archive's (see `archive_alarm`).
        let finished = finished_by(&outcome.answer);
        // Read only for a finished job: a heartbeat or a chunk never needs it.
        let grace = || archive::grace_ms(&self.env);
        if finished && outcome.alarm_at.is_none() && !outcome.clear_alarm {
            self.recall_alarm().await;
        }
        let move_to = match (outcome.alarm_at, outcome.clear_alarm, finished) {
            (Some(at), _, _) if keeps(self.alarm.get(), at, now_ms()) => None,
            (Some(at), _, _) => Some(Some(at)),
            // The operation ended the claim and the job: the lease's alarm becomes the archive's.
            (None, true, true) => Some(archive_alarm(None, now_ms(), grace())),
            // A finished job touched again: an alarm no later than its archive's stays.
            (None, false, true) => archive_alarm(self.alarm.get(), now_ms(), grace()).map(Some),
            (None, true, false) if self.alarm.get() == Some(None) => None,
            (None, true, false) => Some(None),
            (None, false, false) => None,
        };
        let moved = match move_to {
            None => Ok(()),
            Some(at) => {
                let storage = self.state.storage();
                // The alarm has no request to name its job: the object's first alarm stores
                // the job's id beside it, asked for in the same turn (one storage write).
                let unnamed = at.is_some() && !self.named.get();
                let name = async {
                    match unnamed {
                        true => storage.put(JOB_ID_KEY, job_id.as_str()).await,
                        false => Ok(()),
                    }
                };
                let arm = async {
                    match recovering {
                        // Recovery (its alarm, a runner object's watch, a reap pass) has no
                        // runner waiting on it: its move is confirmed before the object
                        // answers, so an alarm that re-armed is on disk when the runtime counts
                        // the alarm as handled.
                        true => confirmed_alarm_move(&storage, at).await,
                        false => move_alarm_unconfirmed(&self.state, at).await,
                    }
                };
                let moved = futures_util::future::try_join(name, arm).await.map(|_| ());
                if moved.is_ok() && unnamed {
                    self.named.set(true);
                }
                self.alarm.set(moved.is_ok().then_some(at));
                moved
            }
        };
        if let Err(err) = moved {
            // Committed already: the earlier alarm (or the cron pass) still covers the lease.
            worker::console_error!("job object: moving the alarm after a commit failed: {err:?}");
        }
        if let Some(org) = &outcome.touched {
            // Never fails: a lost touch costs at most the runners' quiet time.
            crate::objects::dispatch::touch(&self.env, org).await;
        }
        outcome.answer
    }

    /// The next step of the job's archive, under the object's lock (so no completion of the
    /// job interleaves with it), then the alarm where the archive needs it next: at the end of
    /// the grace period, at once while rows remain to prune, and none once archived.
    async fn archive(&self, job_id: &str, mode: archive::Mode, trips: &RoundTrips) -> Answer {
        let env = self.env.clone();
        let trips = trips.clone();
        let id = job_id.to_owned();
        let progress = self
            .state
            .block_concurrency_while(async move {
                let stepped = match Db::of(&env, trips) {
                    Ok(db) => archive::advance(&env, &db, &id, now_ms(), mode).await,
                    Err(err) => Err(err),
                };
                Ok(stepped)
            })
            .await
            .map_err(JobRefusal::internal)?
            .map_err(JobRefusal::from)?;
        // The rows are gone or going: what the object knew of them is stale.
        if !matches!(progress, archive::Progress::Live) {
            self.known.borrow_mut().take();
        }
        let at = match progress {
            archive::Progress::Live => return Ok(JobReply::Archived(progress)),
            archive::Progress::WaitUntil(at) => Some(at.saturating_add(ARCHIVE_ALARM_SLACK_MILLIS)),
            archive::Progress::More => Some(now_ms()),
            archive::Progress::Done => None,
        };
        if self.alarm.get() != Some(at) {
            let storage = self.state.storage();
            let name = async {
                match at.is_some() && !self.named.get() {
                    true => storage.put(JOB_ID_KEY, job_id).await,
                    false => Ok(()),
                }
            };
            let moved = futures_util::future::try_join(name, confirmed_alarm_move(&storage, at))
                .await
                .map(|_| ());
            match moved {
                Ok(()) => {
                    self.named.set(self.named.get() || at.is_some());
                    self.alarm.set(Some(at));
                }
                // The cron pass finds the job due all the same.
                Err(err) => {
                    self.alarm.set(None);
                    worker::console_error!("job object: the archive's alarm did not move: {err:?}");
                }
            }
        }
        Ok(JobReply::Archived(progress))
    }

    /// Reads the alarm from storage when this object does not know it (it was evicted or
    /// restarted since it set it), so that a finished job touched again (a runner object's
    /// watch at the old lease, a late completion) keeps the archive alarm set at its finish
    /// rather than one a grace period from now. A failed read leaves it unknown.
    async fn recall_alarm(&self) {
        if self.alarm.get().is_some() {
            return;
        }
        if let Ok(set) = self.state.storage().get_alarm().await {
            self.alarm.set(Some(set));
        }
    }

    /// Whether `op` is a heartbeat to an object that never wrote for its job, which may then
    /// be decided as the claim's first heartbeat (`heartbeat::presumed_first`). An object that
    /// armed an alarm once stored its job's id beside it, and that key is never deleted: one
    /// that finds it in storage was evicted or restarted mid-job, where the presumption would
    /// only cost an aborted batch before the fresh read. A failed look presumes nothing.
    async fn never_ran(&self, op: &JobOp) -> bool {
        if !matches!(op, JobOp::Heartbeat { .. })
            || self.named.get()
            || self.known.borrow().is_some()
        {
            return false;
        }
        match self.state.storage().get::<String>(JOB_ID_KEY).await {
            Ok(None) => true,
            Ok(Some(_)) => {
                self.named.set(true);
                false
            }
            Err(_) => false,
        }
    }
}

/// Whether `answer` says the job is finished (it ended now, or had ended before the operation).
fn finished_by(answer: &Answer) -> bool {
    let state = match answer {
        Ok(JobReply::Completed(decision)) => decision.job_state,
        Ok(JobReply::HandedBack(handed_back)) => handed_back.state,
        Ok(JobReply::Cancelled(cancelled)) => cancelled.state,
        Ok(JobReply::Recovered(recovered)) => recovered.state,
        Err(JobRefusal::CompletionConflict(decision) | JobRefusal::CompletionStale(decision)) => {
            decision.job_state
        }
        _ => return false,
    };
    state.is_terminal()
}

/// How long after its archive is due (by the job row's finish time) its alarm is set: the row's
/// finish time is its operation's start, a few milliseconds before the alarm is armed, so an
/// alarm that fired a moment early would find the archive not yet due.
const ARCHIVE_ALARM_SLACK_MILLIS: i64 = 1_000;

/// Where a finished job's alarm goes (`None`: it stays), given the alarm as this object last
/// set it (`set`). A job that finishes now is due `grace` from now ([`archive::grace_ms`]); the alarm
/// runs the archive's step, which decides from the job's row (its finish time, its stage) and
/// sets the alarm again where the archive needs it. An alarm already set no later than that
/// stays: an operation on a finished job (a late completion) never postpones its archive.
fn archive_alarm(set: Option<Option<i64>>, now: i64, grace: i64) -> Option<i64> {
    let due = now
        .saturating_add(grace)
        .saturating_add(ARCHIVE_ALARM_SLACK_MILLIS);
    match set {
        Some(Some(at)) if at <= due => None,
        _ => Some(due),
    }
}

/// Whether the alarm as this object last set it (`set`) may stay for a lease ending at `lease`:
/// it fires at or before the lease, and not within [`ALARM_KEPT_AHEAD_MILLIS`] of `now`.
fn keeps(set: Option<Option<i64>>, lease: i64, now: i64) -> bool {
    matches!(set, Some(Some(at)) if at <= lease && at >= now + ALARM_KEPT_AHEAD_MILLIS)
}

/// Moves the alarm to `at` (or deletes it) after a commit, without holding the object's answer
/// (or its next D1 write) until the move is on disk (`allowUnconfirmed`). Safe because the move
/// only follows what D1 already holds: should it be lost, the earlier alarm still fires at or
/// before the lease's end, finds the lease alive (or gone) and re-arms (or does nothing). The
/// alarm a grant *needs* is written before its commit, and confirmed, by the lease book of the
/// runner object that grants it (`objects::runner::object`'s `LeaseBook::arm`).
///
/// Through the raw binding: worker 0.8's `SetAlarmOptions` serializes its fields in snake case,
/// which the runtime does not read.
async fn move_alarm_unconfirmed(state: &State, at: Option<i64>) -> Result<()> {
    use worker::js_sys::{Date, Object, Reflect};
    use worker::wasm_bindgen::JsValue;
    let storage = state.as_raw().storage()?;
    let options = Object::new();
    Reflect::set(
        &options,
        &JsValue::from_str("allowUnconfirmed"),
        &JsValue::TRUE,
    )?;
    let promise = match at {
        // Epoch milliseconds are whole numbers well inside f64's exact range.
        Some(at) => storage.set_alarm(Date::new(&JsValue::from_f64(at as f64)), options)?,
        None => storage.delete_alarm(options)?,
    };
    worker::wasm_bindgen_futures::JsFuture::from(promise).await?;
    Ok(())
}

async fn confirmed_alarm_move(storage: &Storage, at: Option<i64>) -> Result<()> {
    match at {
        Some(at) => storage.set_alarm(alarm_delay(at)).await,
        None => storage.delete_alarm().await,
    }
}

/// Runs `op` on the job, from what the object already knows when it can.
///
/// A runner's heartbeat, chunk, completion or hand-back to a *warm* object decides from the
/// job as the object's last write left it, and its one D1 batch asserts what that decision
/// relied on ([`OpCtx::commit`]): the holder's credential generation, and the job's state,
/// attempt, active claim and live lease. So a warm answer costs one D1 round trip, and is
/// final only when that batch committed. Anything else decides on the job read fresh: a warm
/// try that wrote nothing (a refusal, a replay) is decided again from D1, and so is one whose
/// assertion found the job moved. Every other operation (cancel, recovery) reads fresh.
///
/// With `presume`, a heartbeat to an object that never ran for its job is first tried as the
/// claim's first heartbeat (`super::heartbeat::presumed_first`).
async fn decide_and_write(
    env: Env,
    trips: RoundTrips,
    known: Known,
    op: JobOp,
    presume: bool,
) -> OpResult<OpOutcome> {
    let db = Db::of(&env, trips)?;
    let job_id = op.job_id();
    let holder = op.holder();
    let cached = known
        .borrow_mut()
        .take()
        .filter(|known| known.job.id == job_id && holder.is_some());
    let mut warm = cached.is_some();
    if let (
        true,
        None,
        JobOp::Heartbeat {
            claim_id,
            extend_seconds,
            ..
        },
    ) = (presume, &cached, &op)
    {
        let op_ctx = OpCtx::new(&db, &env, holder);
        if let Some(reply) =
            super::heartbeat::presumed_first(&op_ctx, job_id, claim_id, *extend_seconds).await?
        {
            return Ok(op_ctx.outcome(Ok(reply), &known, None));
        }
    }
    let mut snapshot = match cached {
        Some(known) => known,
        None => Snapshot::load(&db, job_id, holder).await?,
    };
    // A warm try, then at most two fresh ones (a second move is someone else's D1 write).
    for _ in 0..3 {
        let op_ctx = OpCtx::new(&db, &env, holder);
        // A fresh read that the operation then does not write over stays what the object knows.
        let fresh = (!warm && holder.is_some()).then(|| snapshot.clone());
        let answer = run_op(&op_ctx, &op, snapshot).await;
        // A warm answer stands only on its committed write, or on the holder's credential
        // found revoked by it; any other warm outcome (a refusal, a replay that wrote nothing,
        // a guard that fired) is decided again from D1, as is a write that found the job moved.
        let guard = match &answer {
            Err(JobRefusal::Guard(guard)) => Some(guard.name),
            _ => None,
        };
        let moved = guard == Some(guards::JOB_MOVED);
        let unproven = warm
            && match &answer {
                Err(JobRefusal::Guard(_)) => guard != Some(guards::CREDENTIAL_REVOKED),
                Err(JobRefusal::Internal) => true,
                Ok(_) | Err(_) => !op_ctx.wrote.get(),
            };
        if moved || unproven {
            warm = false;
            snapshot = Snapshot::load(&db, job_id, holder).await?;
            continue;
        }
        // An operation that did not decide (D1 disagreed with it, or it failed) teaches the
        // object nothing, and moves no alarm: the object forgets its job.
        if let Err(failure @ (JobRefusal::Guard(_) | JobRefusal::Internal)) = answer {
            return Err(failure);
        }
        return Ok(op_ctx.outcome(answer, &known, fresh));
    }
    Err(JobRefusal::internal(format!(
        "job {job_id} kept changing in D1 under its own object"
    )))
}

async fn run_op(ctx: &OpCtx<'_>, op: &JobOp, snapshot: Snapshot) -> Answer {
    match op {
        JobOp::Heartbeat {
            claim_id,
            extend_seconds,
            ..
        } => super::heartbeat::run(ctx, snapshot, claim_id, *extend_seconds).await,
        JobOp::Stream { chunk, .. } => super::stream::run(ctx, snapshot, chunk).await,
        JobOp::Complete { completion, .. } => super::complete::run(ctx, snapshot, completion).await,
        JobOp::Cancel {
            organization_id,
            actor,
            reason,
            ..
        } => super::cancel::run(ctx, snapshot, organization_id, actor, reason).await,
        JobOp::Recover { actor, .. } => super::recover::run(ctx, snapshot, actor).await,
        // Answered by `JobObject::run` before an operation reaches the job's snapshot.
        JobOp::Watch { .. } | JobOp::Archive { .. } => Err(JobRefusal::internal(format!(
            "{} reached the snapshot's operations",
            op.name()
        ))),
        JobOp::HandBack {
            claim_id, reason, ..
        } => super::hand_back::run(ctx, snapshot, claim_id, reason).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgerunner_protocol::archive::ARCHIVE_GRACE_MILLIS;

    #[test]
    fn a_finished_jobs_alarm_is_set_for_its_archive_and_never_postponed() {
        let now = 1_000_000;
        let due = now + ARCHIVE_GRACE_MILLIS + ARCHIVE_ALARM_SLACK_MILLIS;
        // Not known (a fresh object, a failed move), deleted, or later than due: set at due.
        assert_eq!(archive_alarm(None, now, ARCHIVE_GRACE_MILLIS), Some(due));
        assert_eq!(
            archive_alarm(Some(None), now, ARCHIVE_GRACE_MILLIS),
            Some(due)
        );
        assert_eq!(
            archive_alarm(Some(Some(due + 1)), now, ARCHIVE_GRACE_MILLIS),
            Some(due)
        );
        // Set already at or before due (a late completion after the finish): it stays.
        assert_eq!(
            archive_alarm(Some(Some(due)), now, ARCHIVE_GRACE_MILLIS),
            None
        );
        assert_eq!(
            archive_alarm(Some(Some(now - 5)), now, ARCHIVE_GRACE_MILLIS),
            None
        );
    }

    #[test]
    fn a_lease_alarm_stays_while_it_fires_at_or_before_the_lease_and_not_soon() {
        let now = 1_000_000;
        let ahead = now + ALARM_KEPT_AHEAD_MILLIS;
        let lease = ahead + 60_000;
        assert!(keeps(Some(Some(ahead)), lease, now));
        assert!(keeps(Some(Some(lease)), lease, now));
        // A lease that ends sooner than the alarm: moved.
        assert!(!keeps(Some(Some(lease + 1)), lease, now));
        // An alarm about to fire: moved to the lease rather than fire early.
        assert!(!keeps(Some(Some(ahead - 1)), lease, now));
        // Not known (a fresh object, a failed move), or deleted: set.
        assert!(!keeps(None, lease, now));
        assert!(!keeps(Some(None), lease, now));
    }
}
