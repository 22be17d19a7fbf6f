//! `JobObject`: one Durable Object per job (`id_from_name(job id)`), the single writer of that
//! job's rows after its grant (which the claiming runner's object writes: `crate::grant`).
//!
//! It serializes everything that changes its job after that — heartbeat, stream append,
//! completion, hand-back, cancellation, recovery — by running each operation under
//! `block_concurrency_while`:
//! a Durable Object is only single-threaded *until it awaits*, and an operation here may read
//! D1, decides, and writes D1. It decides with the protocol crate's pure rules from the job as
//! the object's own last write left it (a warm object), from what a claim's first heartbeat
//! implies (`presumed_first_heartbeat`), or from the job read fresh (one batched read), and
//! applies the decision as one D1 batch whose statements carry their guards (state + attempt)
//! and assert what the decision relied on; the schema's triggers and constraints make a guard
//! that does not hold abort the whole batch rather than match nothing ([`dispatch`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use edgerunner_protocol::chunk::{
    validate_append, AppendLimits, ChainHead, ChunkIdentity, StreamChunk, MAX_CHUNKS_PER_ATTEMPT,
    MAX_STREAM_BYTES_PER_ATTEMPT,
};
use edgerunner_protocol::completion::{
    reconcile, AcceptedCompletion, ActiveClaim, Completion, JobCompletionView, Outcome,
};
use edgerunner_protocol::envelope::{ClaimId, DispatchAttempt, JobId, OrganizationId, RunnerId};
use edgerunner_protocol::recovery::{
    decide, decide_release, next_check_at_ms, JobLease, RecoveryDecision, ReleaseDecision,
    LEASE_EXTENSION_SECONDS,
};
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::state::{JobInput, JobState};
use edgerunner_protocol::time::UnixMillis;
use serde_json::{json, Value};
use worker::{durable_object, DurableObject, Env, Request, Response, Result, State, Storage};

use crate::error::{ApiError, ApiResult};
use crate::objects::job::{
    Cancelled, ChunkAccepted, CompletionDecision, EvidenceHolder, HandedBack, HeartbeatAnswer,
    Holder, JobOp, JobRefusal, JobReply, LeaseUse, LostClaim, Recovered,
};
use crate::objects::{answer, read_op};
use crate::platform::{alarm_delay, now_ms, rfc3339};
use crate::store::{self, events, guards, jobs, runners, Db, RoundTrips};

/// Largest stream payload, as stable JSON bytes (the schema's cap too).
pub(crate) const MAX_CHUNK_PAYLOAD_BYTES: usize = 256 * 1024;
/// How many recent checksums the duplicate-checksum rule remembers from storage.
const RECENT_CHECKSUMS: i64 = 32;

#[durable_object]
pub struct JobObject {
    state: State,
    env: Env,
    /// What this object knows of its job after its last committed write (see [`dispatch`]):
    /// a runner's next heartbeat, chunk or completion decides from it without reading D1.
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

/// The job as its object last left it, or nothing (the next operation loads it).
type Known = Rc<RefCell<Option<Snapshot>>>;

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
        match self.run(op, &RoundTrips::default()).await {
            Ok(reply) => Response::ok(serde_json::to_string(&reply).unwrap_or_default()),
            Err(err) => {
                worker::console_error!("alarm recovery of {job_id} failed: {err:?}");
                // A failed alarm is retried by the runtime; cron catches anything it still misses.
                Err(worker::Error::RustError("alarm recovery failed".into()))
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
    /// before the grant commits ([`crate::grant`]) and asks this object at that lease whether
    /// it watches it now. An operation here extends or ends a lease and moves the alarm
    /// afterwards, where a failure (or a crash) leaves the earlier alarm, which finds the lease
    /// alive and re-arms at it (see `recover`). So nothing after the commit can fail the
    /// operation.
    async fn run(&self, op: JobOp, trips: &RoundTrips) -> Answer {
        let op = match op {
            JobOp::Watch { job_id, attempt } => {
                if self.watching(&job_id, attempt).await {
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
            .block_concurrency_while(
                async move { Ok(dispatch(env, trips, known, op, presume).await) },
            )
            .await
            .map_err(JobRefusal::internal)??;
        let move_to = match (outcome.alarm_at, outcome.clear_alarm) {
            (Some(at), _) if keeps(self.alarm.get(), at, now_ms()) => None,
            (Some(at), _) => Some(Some(at)),
            (None, true) if self.alarm.get() == Some(None) => None,
            (None, true) => Some(None),
            (None, false) => None,
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

    /// Whether `op` is a heartbeat to an object that never wrote for its job, which may then
    /// be decided as the claim's first heartbeat (`presumed_first_heartbeat`). An object that
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

    /// Whether this object watches the lease of attempt `attempt` itself (`JobOp::Watch`): it
    /// knows that attempt or a later one from its own writes, and either that attempt's claim
    /// is over or its alarm is set (each write left it at the lease).
    async fn watching(&self, job_id: &str, attempt: i64) -> bool {
        let (knows, over) = match self.known.borrow().as_ref() {
            Some(known) if known.job.id == job_id && known.job.dispatch_attempt >= attempt => (
                true,
                known.job.dispatch_attempt > attempt || known.job.active_claim_id.is_none(),
            ),
            _ => (false, false),
        };
        knows && (over || matches!(self.state.storage().get_alarm().await, Ok(Some(_))))
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
/// alarm a grant *needs* is written before its commit, and confirmed ([`OpCtx::arm_before_commit`]).
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

/// What an operation answers: carried out, or refused (and why).
type Answer = OpResult<JobReply>;

/// The job object's own result: a refusal (or failure) is answered to the edge as itself.
type OpResult<T> = std::result::Result<T, JobRefusal>;

/// An operation's decision, and what it means for the job's alarm.
struct OpOutcome {
    answer: Answer,
    /// The lease the job now holds: the alarm goes there.
    alarm_at: Option<i64>,
    /// The job holds no lease any more.
    clear_alarm: bool,
    /// The organization whose dispatcher is to be told (see `OpCtx::touched`).
    touched: Option<String>,
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
/// claim's first heartbeat ([`presumed_first_heartbeat`]).
async fn dispatch(
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
        let op_ctx = OpCtx::new(&db, holder);
        if let Some(reply) =
            presumed_first_heartbeat(&op_ctx, job_id, claim_id, *extend_seconds).await?
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
        let op_ctx = OpCtx::new(&db, holder);
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
        } => heartbeat(ctx, snapshot, claim_id, *extend_seconds).await,
        JobOp::Stream { chunk, .. } => stream(ctx, snapshot, chunk).await,
        JobOp::Complete { completion, .. } => complete(ctx, snapshot, completion).await,
        JobOp::Cancel {
            organization_id,
            actor,
            reason,
            ..
        } => cancel(ctx, snapshot, organization_id, actor, reason).await,
        JobOp::Recover { actor, .. } => recover(ctx, snapshot, actor).await,
        // Answered by `JobObject::run` before an operation reaches the job's snapshot.
        JobOp::Watch { .. } => Err(JobRefusal::internal(format!(
            "{} reached the snapshot's operations",
            op.name()
        ))),
        JobOp::HandBack {
            claim_id, reason, ..
        } => release(ctx, snapshot, claim_id, reason).await,
    }
}

/// What a committed operation did to the job's lease, so the alarm follows it.
#[derive(Clone, Copy)]
enum AlarmChange {
    Keep,
    At(i64),
    Clear,
}

struct OpCtx<'a> {
    db: &'a Db,
    now: i64,
    /// The runner a runner's operation comes from.
    holder: Option<&'a Holder>,
    /// Set by an operation once its write committed.
    alarm: Cell<AlarmChange>,
    /// Whether the operation's batch committed ([`OpCtx::commit`]).
    wrote: Cell<bool>,
    /// The job as the committed write left it, for the object to remember; `None` forgets.
    learned: RefCell<Option<Snapshot>>,
    /// The organization whose claimable work the committed write changed (a job queued again,
    /// a runner marked lost): its dispatcher is told once the operation is done.
    touched: RefCell<Option<String>>,
}

/// The job's state, attempt and active claim an operation decided from, which its write
/// asserts ([`OpCtx::commit_as`]).
struct AsKnown<'a> {
    job_id: &'a str,
    state: &'a str,
    attempt: i64,
    active_claim: Option<&'a str>,
}

impl<'a> OpCtx<'a> {
    fn new(db: &'a Db, holder: Option<&'a Holder>) -> Self {
        Self {
            db,
            now: now_ms(),
            holder,
            alarm: Cell::new(AlarmChange::Keep),
            wrote: Cell::new(false),
            learned: RefCell::new(None),
            touched: RefCell::new(None),
        }
    }

    /// The decided operation's outcome; the object now knows the job as its write left it,
    /// or, when it wrote nothing, as `fresh` (a fresh read it decided from) has it.
    fn outcome(self, answer: Answer, known: &Known, fresh: Option<Snapshot>) -> OpOutcome {
        let learned = self.learned.take();
        *known.borrow_mut() = if self.wrote.get() { learned } else { fresh };
        let (alarm_at, clear_alarm) = match self.alarm.get() {
            AlarmChange::Keep => (None, false),
            AlarmChange::At(at) => (Some(at), false),
            AlarmChange::Clear => (None, true),
        };
        OpOutcome {
            answer,
            alarm_at,
            clear_alarm,
            touched: self.touched.take(),
        }
    }

    /// The holder's runner id; an internal error for an operation that has none.
    fn runner(&self) -> ApiResult<&str> {
        self.holder
            .map(|h| h.runner_id.as_str())
            .ok_or_else(|| ApiError::internal("a runner's operation without its holder"))
    }

    /// Sends `statements` as one batch after the assertions that make what the operation
    /// decided from hold at the commit: the holder's credential generation (a runner's
    /// operation), and the job's state, attempt and active claim as `snap` has them, with a
    /// lease live now when `live_lease`. Answers the row counts of `statements` alone.
    async fn commit(
        &self,
        snap: &Snapshot,
        live_lease: bool,
        statements: Vec<worker::D1PreparedStatement>,
    ) -> ApiResult<Vec<usize>> {
        let job = &snap.job;
        let decided_from = AsKnown {
            job_id: &job.id,
            state: &job.state,
            attempt: job.dispatch_attempt,
            active_claim: job.active_claim_id.as_deref(),
        };
        self.commit_as(&decided_from, live_lease, statements)
            .await?
            .iter()
            .map(store::changes)
            .collect()
    }

    /// [`OpCtx::commit`] for a decision made from `decided_from`, answering the results of
    /// `statements` (the rows of any read among them, which then sees the batch's writes).
    async fn commit_as(
        &self,
        decided_from: &AsKnown<'_>,
        live_lease: bool,
        statements: Vec<worker::D1PreparedStatement>,
    ) -> ApiResult<Vec<worker::D1Result>> {
        let mut batch = Vec::with_capacity(statements.len() + 2);
        if let Some(holder) = self.holder {
            batch.push(runners::credential_check(
                self.db,
                runners::ASSERT_CREDENTIAL_CURRENT,
                &holder.runner_id,
                &holder.organization_id,
                holder.generation,
            )?);
        }
        batch.push(store::stmt(
            self.db,
            include_str!("store/queries/assert_job_as_known.sql"),
            &[
                decided_from.job_id.into(),
                decided_from.state.into(),
                decided_from.attempt.into(),
                decided_from.active_claim.into(),
                live_lease.then_some(self.now).into(),
            ],
        )?);
        let assertions = batch.len();
        batch.extend(statements);
        let mut results = store::write_batch(self.db, batch).await?;
        self.wrote.set(true);
        Ok(results.split_off(assertions.min(results.len())))
    }

    /// What the object knows of its job after this operation's write.
    fn learn(&self, snap: Snapshot) {
        *self.learned.borrow_mut() = Some(snap);
    }
}

/// How many statements read a [`Snapshot`] ([`Snapshot::reads`]).
const SNAPSHOT_READS: usize = 5;

/// Everything an operation decides from, read in one round trip.
#[derive(Clone)]
struct Snapshot {
    job: jobs::JobRow,
    claims: Vec<jobs::ClaimRow>,
    /// The current attempt's newest chunks, newest first.
    head: Vec<jobs::ChunkHeadRow>,
    accepted: Option<jobs::AcceptedRow>,
    /// Duplicate, conflict and stale decisions stored in full so far.
    stored_refusals: i64,
}

impl Snapshot {
    /// The job read fresh, in one round trip; with a `holder`, that runner's credential
    /// generation is checked in the same read (`401` when it moved on, or the runner is
    /// revoked or not approved), as the edge once did before every runner request.
    async fn load(db: &Db, job_id: &str, holder: Option<&Holder>) -> OpResult<Self> {
        let mut statements = Self::reads(db, job_id)?;
        if let Some(holder) = holder {
            statements.push(runners::credential_check(
                db,
                runners::CREDENTIAL_CURRENT,
                &holder.runner_id,
                &holder.organization_id,
                holder.generation,
            )?);
        }
        let results = store::read_batch(db, statements).await?;
        if let Some(credential) = results.get(SNAPSHOT_READS) {
            if credential.results::<Value>()?.is_empty() {
                return Err(JobRefusal::CredentialRevoked);
            }
        }
        Self::from_reads(&results)
    }

    /// The statements a snapshot is read with, [`SNAPSHOT_READS`] of them: alone (a fresh
    /// read), or at the end of a write's batch, which then reads what it wrote.
    fn reads(db: &Db, job_id: &str) -> ApiResult<Vec<worker::D1PreparedStatement>> {
        Ok(vec![
            jobs::select_job(db, job_id)?,
            jobs::select_claims(db, job_id)?,
            jobs::select_stream_head(db, job_id, RECENT_CHECKSUMS)?,
            jobs::select_accepted(db, job_id)?,
            jobs::select_stored_refusals(db, job_id)?,
        ])
    }

    /// The snapshot from the first [`SNAPSHOT_READS`] results of `results`.
    fn from_reads(results: &[worker::D1Result]) -> OpResult<Self> {
        let [job, claims, head, accepted, refusals, ..] = results else {
            return Err(JobRefusal::internal(
                "job snapshot batch returned too few results",
            ));
        };
        let job = job
            .results::<jobs::JobRow>()?
            .into_iter()
            .next()
            .ok_or(JobRefusal::NoSuchJob)?;
        Ok(Self {
            job,
            claims: claims.results()?,
            head: head.results()?,
            accepted: accepted.results::<jobs::AcceptedRow>()?.into_iter().next(),
            stored_refusals: refusals
                .results::<jobs::StoredRefusals>()?
                .first()
                .map_or(0, |r| r.stored),
        })
    }

    fn state(&self) -> OpResult<JobState> {
        Ok(JobState::parse(&self.job.state)?)
    }

    /// What recovery and hand-back decide from.
    fn lease(&self) -> OpResult<JobLease> {
        let count = |n: i64, what: &str| {
            u32::try_from(n)
                .map_err(|_| ApiError::internal(format!("job {} has {what} {n}", self.job.id)))
        };
        Ok(JobLease {
            state: self.state()?,
            dispatch_attempt: count(self.job.dispatch_attempt, "dispatch attempt")?,
            released_attempts: count(self.job.released_attempts, "released attempts")?,
            lease_expires_at_ms: self.job.lease_expires_at,
        })
    }

    fn active_claim(&self) -> Option<&jobs::ClaimRow> {
        let id = self.job.active_claim_id.as_deref()?;
        self.claims
            .iter()
            .find(|c| c.id == id && c.state == "active")
    }

    fn chain_head(&self) -> ApiResult<ChainHead> {
        let next = self.head.first().map_or(0, |c| c.sequence + 1);
        let checksums = self
            .head
            .iter()
            .rev()
            .map(|c| Sha256Hex::parse(&c.checksum))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(ApiError::internal)?;
        ChainHead::restore(u64::try_from(next).unwrap_or(0), checksums)
            .ok_or_else(|| ApiError::internal("stored stream head is inconsistent"))
    }
}

fn event<'a>(job: &'a jobs::JobRow, actor: &'a str, kind: &'a str) -> events::NewEvent<'a> {
    events::NewEvent {
        organization_id: &job.organization_id,
        job_id: Some(&job.id),
        runner_id: None,
        claim_id: None,
        actor,
        kind,
        attempt: None,
        reason: None,
        detail_json: None,
        at: 0,
    }
}

// ------------------------------------------------------------------------------------------
// Heartbeat
// ------------------------------------------------------------------------------------------

/// The claim a runner names must be this job's active one and the runner's own. A claim that
/// exists but is over is a conflict the runner should hear about (it lost the job); anything
/// else is "not found", so a runner learns nothing about jobs it does not hold.
fn held_claim<'a>(
    snap: &'a Snapshot,
    runner: &str,
    claim_id: &str,
) -> OpResult<&'a jobs::ClaimRow> {
    let claim = snap
        .claims
        .iter()
        .find(|c| c.id == claim_id && c.runner_id == runner)
        .ok_or(JobRefusal::NoSuchClaim)?;
    if snap.active_claim().map(|c| c.id.as_str()) != Some(claim_id) {
        return Err(JobRefusal::ClaimNotActive {
            claim_id: claim_id.to_owned(),
            claim_state: claim.state.clone(),
            job_state: snap.job.state.clone(),
            attempt: snap.job.dispatch_attempt,
        });
    }
    Ok(claim)
}

async fn heartbeat(ctx: &OpCtx<'_>, snap: Snapshot, claim_id: &str, extend: i64) -> Answer {
    let runner = ctx.runner()?;
    if !u32::try_from(extend).is_ok_and(|s| LEASE_EXTENSION_SECONDS.contains(&s)) {
        return Err(JobRefusal::InvalidLease);
    }
    let claim = held_claim(&snap, runner, claim_id)?.clone();
    let job = &snap.job;
    let lease_now = job.lease_expires_at.unwrap_or(0);
    if edgerunner_protocol::recovery::lease_expired(lease_now, ctx.now) {
        return Err(JobRefusal::LeaseExpired(LeaseUse::Heartbeat));
    }
    let state = snap.state()?;
    let first = state == JobState::Claimed;
    let next_state = if first {
        state.transition(JobInput::Heartbeat)?
    } else {
        state
    };
    let lease = ctx.now + extend * 1000;
    let statements = beat_statements(
        ctx,
        &Beat {
            org: &job.organization_id,
            job_id: &job.id,
            claim_id,
            attempt: claim.dispatch_attempt,
            runner,
            lease,
            from: state,
            to: next_state,
        },
    )?;
    let changed = ctx.commit(&snap, true, statements).await?;
    store::expect_one(changed.first().copied().unwrap_or(0), || {
        ApiError::internal("heartbeat guard failed under the job's own lock")
    })?;
    ctx.alarm.set(AlarmChange::At(lease));
    let mut known = snap.clone();
    known.job.state = next_state.as_str().to_owned();
    known.job.lease_expires_at = Some(lease);
    known.job.updated_at = ctx.now;
    if let Some(held) = known.claims.iter_mut().find(|c| c.id == claim_id) {
        held.lease_expires_at = lease;
        held.started_at = held.started_at.or(Some(ctx.now));
        held.last_heartbeat_at = Some(ctx.now);
    }
    ctx.learn(known);
    Ok(JobReply::Heartbeat(HeartbeatAnswer {
        cancel_requested: next_state == JobState::CancelRequested,
        cancel_reason: job.cancel_reason.clone(),
        state: next_state,
        lease_expires_at: rfc3339(lease),
    }))
}

/// What a heartbeat writes: the lease it sets, on `runner`'s claim `claim_id` (attempt
/// `attempt`) of job `job_id`, moving the job `from` → `to`.
struct Beat<'a> {
    org: &'a str,
    job_id: &'a str,
    claim_id: &'a str,
    attempt: i64,
    runner: &'a str,
    lease: i64,
    from: JobState,
    to: JobState,
}

/// A heartbeat's statements: the job's lease and state, the claim's lease and beat, the
/// runner's contact time, and on the first heartbeat (from `claimed`) the `job.started` event.
fn beat_statements(
    ctx: &OpCtx<'_>,
    beat: &Beat<'_>,
) -> ApiResult<Vec<worker::D1PreparedStatement>> {
    let mut statements = vec![
        store::stmt(
            ctx.db,
            include_str!("store/queries/heartbeat_job.sql"),
            &[
                beat.job_id.into(),
                beat.claim_id.into(),
                beat.attempt.into(),
                beat.lease.into(),
                beat.to.as_str().into(),
                ctx.now.into(),
                beat.from.as_str().into(),
            ],
        )?,
        store::stmt(
            ctx.db,
            include_str!("store/queries/heartbeat_claim.sql"),
            &[beat.claim_id.into(), beat.lease.into(), ctx.now.into()],
        )?,
        store::stmt(
            ctx.db,
            include_str!("store/queries/heartbeat_runner.sql"),
            &[beat.runner.into(), ctx.now.into()],
        )?,
    ];
    if beat.from == JobState::Claimed {
        let actor = format!("runner:{}", beat.runner);
        statements.push(events::insert(
            ctx.db,
            &events::NewEvent {
                organization_id: beat.org,
                job_id: Some(beat.job_id),
                runner_id: Some(beat.runner),
                claim_id: Some(beat.claim_id),
                actor: &actor,
                kind: "job.started",
                attempt: Some(beat.attempt),
                reason: None,
                detail_json: None,
                at: ctx.now,
            },
        )?);
    }
    Ok(statements)
}

/// A heartbeat to an object that knows nothing of its job, decided as the first heartbeat of
/// the claim it names: the claim id names its job and attempt ([`ClaimId::job_and_attempt`]),
/// and right after a grant (whose write is the runner's object's, [`crate::grant`]) the job is
/// `claimed` at that attempt, with that claim active and its lease live. The batch asserts
/// exactly that, and that the claim is the holder's; so it commits only where the heartbeat
/// [`heartbeat`] would decide from a fresh read writes the same rows, and it reads the job
/// back at its end, so the object learns the job from its own write. One D1 round trip where
/// a fresh read and then the write would take two.
///
/// `Ok(None)`: not presumed (the claim names another job, the extension is out of bounds:
/// left to the fresh decision and its refusals), or refuted by D1 (the job moved on: a cancel,
/// a lapsed lease, a claim not the sender's). The caller then decides from a fresh read, as for
/// any cold operation. Only an object that never wrote for its job tries this
/// (`JobObject::never_ran`).
async fn presumed_first_heartbeat(
    ctx: &OpCtx<'_>,
    job_id: &str,
    claim_id: &str,
    extend: i64,
) -> OpResult<Option<JobReply>> {
    let Some(holder) = ctx.holder else {
        return Ok(None);
    };
    let attempt = match ClaimId::job_and_attempt(claim_id) {
        Some((job, attempt)) if job == job_id => i64::from(attempt.get()),
        _ => return Ok(None),
    };
    if !u32::try_from(extend).is_ok_and(|s| LEASE_EXTENSION_SECONDS.contains(&s)) {
        return Ok(None);
    }
    let claimed = JobState::Claimed;
    let running = claimed.transition(JobInput::Heartbeat)?;
    let lease = ctx.now + extend * 1000;
    let mut statements = vec![store::stmt(
        ctx.db,
        include_str!("store/queries/assert_claim_held.sql"),
        &[
            claim_id.into(),
            holder.runner_id.as_str().into(),
            holder.organization_id.as_str().into(),
        ],
    )?];
    statements.extend(beat_statements(
        ctx,
        &Beat {
            org: &holder.organization_id,
            job_id,
            claim_id,
            attempt,
            runner: &holder.runner_id,
            lease,
            from: claimed,
            to: running,
        },
    )?);
    let writes = statements.len();
    statements.extend(Snapshot::reads(ctx.db, job_id)?);
    let presumed = AsKnown {
        job_id,
        state: claimed.as_str(),
        attempt,
        active_claim: Some(claim_id),
    };
    let results = match ctx.commit_as(&presumed, true, statements).await {
        Ok(results) => results,
        Err(err) => match JobRefusal::from(err) {
            JobRefusal::Guard(guard) if guard.name == guards::JOB_MOVED => return Ok(None),
            refusal => return Err(refusal),
        },
    };
    // The job's row and the claim's: one each, as the assertions promised.
    for index in [1, 2] {
        let changed = results.get(index).map(store::changes).transpose()?;
        store::expect_one(changed.unwrap_or(0), || {
            ApiError::internal("a presumed first heartbeat's write missed under its assertions")
        })?;
    }
    let known = Snapshot::from_reads(results.get(writes..).unwrap_or_default())?;
    let answer = HeartbeatAnswer {
        cancel_requested: false,
        cancel_reason: known.job.cancel_reason.clone(),
        state: running,
        lease_expires_at: rfc3339(lease),
    };
    ctx.alarm.set(AlarmChange::At(lease));
    ctx.learn(known);
    Ok(Some(JobReply::Heartbeat(answer)))
}

// ------------------------------------------------------------------------------------------
// Stream
// ------------------------------------------------------------------------------------------

async fn stream(ctx: &OpCtx<'_>, snap: Snapshot, raw: &Value) -> Answer {
    let runner = ctx.runner()?;
    let chunk = StreamChunk::from_json(raw)?;
    let job = &snap.job;
    // Only the holder of the job's active claim may append; a runner holding no claim of this
    // job learns nothing about it.
    let held_one = snap.claims.iter().any(|c| c.runner_id == runner);
    let Some(active) = snap.active_claim().cloned() else {
        return Err(if held_one {
            JobRefusal::StreamClaimOver
        } else {
            JobRefusal::NoJobForRunner
        });
    };
    if active.runner_id != runner {
        return Err(if held_one {
            JobRefusal::StreamTakenOver
        } else {
            JobRefusal::NoJobForRunner
        });
    }
    let expected = ChunkIdentity {
        job_id: JobId::parse(&job.id).map_err(ApiError::internal)?,
        claim_id: ClaimId::parse(&active.id).map_err(ApiError::internal)?,
        dispatch_attempt: DispatchAttempt::new(u32::try_from(active.dispatch_attempt).unwrap_or(0))
            .ok_or_else(|| ApiError::internal("attempt out of range"))?,
    };
    // The head row carries the attempt's running byte total (a stream older than migration
    // 0004 counts from there).
    let stored_bytes = snap.head.first().and_then(|c| c.stream_bytes).unwrap_or(0);
    let limits = AppendLimits {
        max_payload_bytes: MAX_CHUNK_PAYLOAD_BYTES,
        max_chunks: MAX_CHUNKS_PER_ATTEMPT,
        max_stream_bytes: MAX_STREAM_BYTES_PER_ATTEMPT,
        stream_bytes: u64::try_from(stored_bytes).unwrap_or(0),
        lease_expires_at: UnixMillis::new(job.lease_expires_at.unwrap_or(0))
            .map_err(ApiError::internal)?,
        now: UnixMillis::new(ctx.now).map_err(ApiError::internal)?,
    };
    let head = snap.chain_head()?;
    let admitted = validate_append(&head, &expected, &chunk, &limits)?;
    let sequence = i64::try_from(chunk.sequence).map_err(ApiError::internal)?;
    // Stored as the stable JSON that was hashed and measured, so the schema's byte count (of
    // the stored text) and the limit just checked count the same bytes.
    let payload = admitted.payload;
    let stream_bytes = i64::try_from(admitted.stream_bytes).map_err(ApiError::internal)?;
    let new_chunk = jobs::NewChunk {
        job_id: &job.id,
        organization_id: &job.organization_id,
        claim_id: &active.id,
        dispatch_attempt: active.dispatch_attempt,
        sequence,
        kind: chunk.kind.as_str(),
        previous_checksum: chunk.previous_checksum.as_ref().map(Sha256Hex::as_str),
        payload: &payload,
        payload_hash: chunk.payload_hash.as_str(),
        checksum: chunk.checksum.as_str(),
        emitted_at: chunk.emitted_at.as_str(),
        received_at: ctx.now,
        stream_bytes,
    };
    let changed = ctx
        .commit(&snap, true, vec![jobs::insert_chunk(ctx.db, &new_chunk)?])
        .await?;
    store::expect_one(changed.first().copied().unwrap_or(0), || {
        ApiError::internal("chunk insert changed no row")
    })?;
    let mut known = snap.clone();
    known.head.insert(
        0,
        jobs::ChunkHeadRow {
            sequence,
            checksum: chunk.checksum.as_str().to_owned(),
            stream_bytes: Some(stream_bytes),
        },
    );
    known
        .head
        .truncate(usize::try_from(RECENT_CHECKSUMS).unwrap_or(0));
    ctx.learn(known);
    Ok(JobReply::Appended(ChunkAccepted {
        accepted: true,
        sequence: chunk.sequence,
        checksum: chunk.checksum,
    }))
}

// ------------------------------------------------------------------------------------------
// Complete
// ------------------------------------------------------------------------------------------

async fn complete(ctx: &OpCtx<'_>, snap: Snapshot, raw: &Value) -> Answer {
    let runner = ctx.runner()?;
    let completion = Completion::from_json(raw)?;
    let fields = completion.fields();
    let job = &snap.job;
    if fields.runner_id.as_str() != runner {
        return Err(JobRefusal::RunnerMismatch);
    }
    // Every stored decision names a real claim of this job, attempt and runner; a completion
    // naming anything else is refused outright and not stored.
    let attempt = i64::from(fields.dispatch_attempt.get());
    let Some(claim) = snap
        .claims
        .iter()
        .find(|c| {
            c.id == fields.claim_id.as_str()
                && c.dispatch_attempt == attempt
                && c.runner_id == runner
        })
        .cloned()
    else {
        if snap.claims.iter().any(|c| c.runner_id == runner) {
            return Err(JobRefusal::ClaimMismatch);
        }
        return Err(JobRefusal::NoJobForRunner);
    };

    let view = JobCompletionView {
        now: UnixMillis::new(ctx.now).map_err(ApiError::internal)?,
        organization_id: OrganizationId::parse(&job.organization_id).map_err(ApiError::internal)?,
        state: snap.state()?,
        dispatch_attempt: u32::try_from(job.dispatch_attempt).unwrap_or(0),
        input_hash: Sha256Hex::parse(&job.input_hash).map_err(ApiError::internal)?,
        active_claim: match snap.active_claim() {
            Some(active) => Some(ActiveClaim {
                claim_id: ClaimId::parse(&active.id).map_err(ApiError::internal)?,
                runner_id: RunnerId::parse(&active.runner_id).map_err(ApiError::internal)?,
                attempt: DispatchAttempt::new(u32::try_from(active.dispatch_attempt).unwrap_or(0))
                    .ok_or_else(|| ApiError::internal("attempt out of range"))?,
                stream_checksum: snap
                    .head
                    .first()
                    .map(|c| Sha256Hex::parse(&c.checksum))
                    .transpose()
                    .map_err(ApiError::internal)?,
                // The lease heartbeats and appends are checked against (NULL cannot be: the
                // schema holds a lease exactly while a claim is active).
                lease_expires_at: UnixMillis::new(job.lease_expires_at.unwrap_or(0))
                    .map_err(ApiError::internal)?,
            }),
            None => None,
        },
        accepted: match &snap.accepted {
            Some(a) => Some(AcceptedCompletion {
                attempt: DispatchAttempt::new(u32::try_from(a.dispatch_attempt).unwrap_or(0))
                    .ok_or_else(|| ApiError::internal("attempt out of range"))?,
                checksum: Sha256Hex::parse(&a.completion_checksum).map_err(ApiError::internal)?,
            }),
            None => None,
        },
    };
    let decision = reconcile(&view, &completion)?;

    let completion_id = crate::platform::random_id("cmp")?;
    let evidence = &fields.evidence;
    let evidence_json = evidence.to_json();
    let reported_costs = evidence_json
        .get("costs")
        .or_else(|| raw.get("costs"))
        .map(Value::to_string);
    let actor = format!("runner:{runner}");
    let outcome = decision.outcome;
    let insert_completion = store::stmt(
        ctx.db,
        include_str!("store/queries/completion_insert.sql"),
        &[
            completion_id.as_str().into(),
            job.id.as_str().into(),
            job.organization_id.as_str().into(),
            claim.id.as_str().into(),
            runner.into(),
            attempt.into(),
            outcome.as_str().into(),
            decision.rationale.as_str().into(),
            completion.checksum().as_str().into(),
            fields.status.as_str().into(),
            fields.input_hash.as_str().into(),
            fields.result_hash.as_ref().map(Sha256Hex::as_str).into(),
            fields
                .final_stream_checksum
                .as_ref()
                .map(Sha256Hex::as_str)
                .into(),
            Some(evidence.evaluation_run_id.key().as_str()).into(),
            evidence_json.to_string().as_str().into(),
            reported_costs.as_deref().into(),
            fields.completed_at.as_str().into(),
            ctx.now.into(),
            raw.to_string().as_str().into(),
        ],
    )?;
    let detail = json!({
        "completionId": completion_id,
        "decision": outcome.as_str(),
        "status": fields.status.as_str(),
        "completionChecksum": completion.checksum().as_str(),
    })
    .to_string();
    let mut recorded = event(job, &actor, "job.completion_recorded");
    recorded.runner_id = Some(runner);
    recorded.claim_id = Some(&claim.id);
    recorded.attempt = Some(attempt);
    recorded.reason = Some(&decision.rationale);
    recorded.detail_json = Some(&detail);
    recorded.at = ctx.now;

    let Outcome::Accepted { job_state } = outcome else {
        // Stored in full (row and event) up to MAX_STORED_REFUSALS; past that only counted on
        // the job row with the latest checksum, and one event marks where counting began. The
        // runner's answer is the same either way, but names no stored completion.
        let stored = snap.stored_refusals < jobs::MAX_STORED_REFUSALS;
        let statements = if stored {
            recorded.kind = match outcome {
                Outcome::Duplicate => "job.completion_duplicate",
                Outcome::Conflict => "job.completion_conflict",
                _ => "job.completion_stale",
            };
            vec![insert_completion, events::insert(ctx.db, &recorded)?]
        } else {
            let mut statements = vec![jobs::count_unstored_decision(
                ctx.db,
                &job.id,
                outcome.as_str(),
                completion.checksum().as_str(),
                ctx.now,
            )?];
            if job.unstored_decisions == 0 {
                let detail = json!({
                    "stored": snap.stored_refusals,
                    "decision": outcome.as_str(),
                    "completionChecksum": completion.checksum().as_str(),
                })
                .to_string();
                let mut capped = event(job, &actor, "job.completion_decisions_capped");
                capped.runner_id = Some(runner);
                capped.claim_id = Some(&claim.id);
                capped.attempt = Some(attempt);
                capped.reason = Some(
                    "the job holds as many refused completion decisions as it stores; later ones are counted on the job",
                );
                capped.detail_json = Some(&detail);
                capped.at = ctx.now;
                statements.push(events::insert(ctx.db, &capped)?);
            }
            statements
        };
        ctx.commit(&snap, false, statements).await?;
        let decided = CompletionDecision {
            decision: outcome.as_str().to_owned(),
            rationale: decision.rationale,
            completion_id: stored.then_some(completion_id),
            job_state: view.state,
        };
        // A conflict or a stale completion is recorded, and refused with its decision.
        return match outcome {
            Outcome::Duplicate => Ok(JobReply::Completed(decided)),
            Outcome::Conflict => Err(JobRefusal::CompletionConflict(decided)),
            _ => Err(JobRefusal::CompletionStale(decided)),
        };
    };

    // Accepted: decision, job finalization, claim release, capacity, terminal event and
    // evidence custody in one transaction. The completion row goes first, while the job still
    // holds the claim (its triggers check exactly that); evidence goes last (its key makes a
    // second attachment anywhere abort everything).
    recorded.kind = "job.completed";
    let mut statements = vec![
        insert_completion,
        store::stmt(
            ctx.db,
            include_str!("store/queries/complete_job.sql"),
            &[
                job.id.as_str().into(),
                claim.id.as_str().into(),
                attempt.into(),
                job_state.as_str().into(),
                ctx.now.into(),
            ],
        )?,
        store::stmt(
            ctx.db,
            include_str!("store/queries/complete_claim.sql"),
            &[claim.id.as_str().into(), ctx.now.into()],
        )?,
        store::stmt(
            ctx.db,
            include_str!("store/queries/complete_runner.sql"),
            &[runner.into(), ctx.now.into()],
        )?,
        events::insert(ctx.db, &recorded)?,
    ];
    let mut attachments: Vec<(&str, String)> =
        vec![("evaluation_run", evidence.evaluation_run_id.key())];
    attachments.extend(
        evidence
            .test_result_ids
            .iter()
            .map(|id| ("test_result", id.key())),
    );
    attachments.extend(
        evidence
            .cost_record_ids
            .iter()
            .map(|id| ("cost_record", id.key())),
    );
    attachments.extend(
        evidence
            .model_call_ids
            .iter()
            .map(|id| ("model_call", id.key())),
    );
    attachments.extend(evidence.trace_id.iter().map(|id| ("trace", id.key())));
    for (kind, id) in &attachments {
        statements.push(store::stmt(
            ctx.db,
            include_str!("store/queries/completion_evidence_insert.sql"),
            &[
                (*kind).into(),
                id.as_str().into(),
                completion_id.as_str().into(),
                job.id.as_str().into(),
                job.organization_id.as_str().into(),
                ctx.now.into(),
            ],
        )?);
    }
    let changed = match ctx.commit(&snap, true, statements).await {
        Ok(changed) => changed,
        // The guards that judge the evidence rather than the job: the completion is refused.
        Err(err) => {
            return Err(match err.guard() {
                Some(guards::UNIQUE_COMPLETION_EVIDENCE) => JobRefusal::EvidenceAttached(
                    attached_to(ctx, &job.organization_id, &attachments).await?,
                ),
                Some(guards::EVIDENCE_NOT_IN_COMPLETION_RUN) => JobRefusal::EvidenceNotInRun,
                Some(guards::COMPLETION_DOES_NOT_CLOSE_STREAM) => JobRefusal::StreamNotClosed,
                _ => err.into(),
            })
        }
    };
    if changed.get(1) != Some(&1) || changed.get(2) != Some(&1) || changed.get(3) != Some(&1) {
        return Err(JobRefusal::internal(format!(
            "completion batch changed {changed:?} rows"
        )));
    }
    ctx.alarm.set(AlarmChange::Clear);
    Ok(JobReply::Completed(CompletionDecision {
        decision: "accepted".to_owned(),
        rationale: decision.rationale,
        completion_id: Some(completion_id),
        job_state,
    }))
}

/// A completion's evidence met another accepted completion's: which row, and of which job, so
/// the refusal can say (the runner named an evaluation run and may not know the rows in it were
/// taken).
async fn attached_to(
    ctx: &OpCtx<'_>,
    org: &str,
    attachments: &[(&str, String)],
) -> ApiResult<Option<EvidenceHolder>> {
    let wanted = Value::Array(
        attachments
            .iter()
            .map(|(kind, id)| json!([kind, id]))
            .collect(),
    )
    .to_string();
    let holders: Vec<EvidenceHolder> = store::all(
        ctx.db,
        include_str!("store/queries/evidence_holder.sql"),
        &[org.into(), wanted.as_str().into()],
    )
    .await?;
    Ok(holders.into_iter().next())
}

// ------------------------------------------------------------------------------------------
// Cancel
// ------------------------------------------------------------------------------------------

async fn cancel(ctx: &OpCtx<'_>, snap: Snapshot, org: &str, actor: &str, reason: &str) -> Answer {
    let job = &snap.job;
    if job.organization_id != org {
        return Err(JobRefusal::NoSuchJob);
    }
    let state = snap.state()?;
    if state.is_terminal() {
        return Err(JobRefusal::JobFinished(state));
    }
    let next = state.transition(JobInput::Cancel)?;
    let cancelled = |state| {
        JobReply::Cancelled(Cancelled {
            job_id: job.id.clone(),
            state,
        })
    };
    if next == state {
        return Ok(cancelled(state));
    }
    let mut recorded = event(
        job,
        actor,
        if next == JobState::Cancelled {
            "job.cancelled"
        } else {
            "job.cancel_requested"
        },
    );
    recorded.reason = Some(reason);
    recorded.attempt = Some(job.dispatch_attempt);
    recorded.at = ctx.now;
    // A queued job ends at once; a held one is asked to stop (its holder completes it).
    let sql = if next == JobState::Cancelled {
        include_str!("store/queries/cancel_queued_job.sql")
    } else {
        include_str!("store/queries/cancel_request_job.sql")
    };
    let update = store::stmt(
        ctx.db,
        sql,
        &[
            job.id.as_str().into(),
            org.into(),
            state.as_str().into(),
            reason.into(),
            ctx.now.into(),
        ],
    )?;
    let changed = ctx
        .commit(
            &snap,
            false,
            vec![update, events::insert_if_changed(ctx.db, &recorded)?],
        )
        .await?;
    store::expect_one(changed.first().copied().unwrap_or(0), || {
        ApiError::internal("cancel guard failed under the job's own lock")
    })?;
    Ok(cancelled(next))
}

// ------------------------------------------------------------------------------------------
// Recover: the lease-loss decision applied (alarm, cron sweep and admin reap all end here).
// ------------------------------------------------------------------------------------------

async fn recover(ctx: &OpCtx<'_>, snap: Snapshot, actor: &str) -> Answer {
    let job = &snap.job;
    let state = snap.state()?;
    let decision = decide(&snap.lease()?, ctx.now);
    let nothing = || {
        JobReply::Recovered(Recovered {
            job_id: job.id.clone(),
            state,
            lost: None,
        })
    };
    let Some(claim) = snap.active_claim().cloned() else {
        // No claim to lose: a job that is already queued or finished needs nothing. (A job left
        // `lost` cannot exist: loss and requeue commit in one batch below.)
        return Ok(nothing());
    };
    let next = match decision {
        RecoveryDecision::Nothing => {
            // The lease is alive (a heartbeat moved it past this alarm, or the move after that
            // heartbeat's commit never happened): watch its current expiry instead.
            if let Some(at) = next_check_at_ms(&snap.lease()?) {
                ctx.alarm.set(AlarmChange::At(at));
            }
            return Ok(nothing());
        }
        RecoveryDecision::Requeue { .. } => JobState::Queued,
        RecoveryDecision::Exhausted { .. } | RecoveryDecision::Cancel => JobState::Cancelled,
    };
    let reason = decision.reason();
    let mut lost = event(job, actor, "job.lease_lost");
    lost.runner_id = Some(&claim.runner_id);
    lost.claim_id = Some(&claim.id);
    lost.attempt = Some(claim.dispatch_attempt);
    let lapse = lapse_reason(&claim, job.lease_expires_at);
    lost.reason = Some(&lapse);
    lost.at = ctx.now;
    let (next_attempt, counted) = match decision {
        RecoveryDecision::Requeue {
            next_attempt,
            counted,
        } => (Some(next_attempt), Some(counted)),
        RecoveryDecision::Exhausted { attempts } => (None, Some(attempts)),
        RecoveryDecision::Nothing | RecoveryDecision::Cancel => (None, None),
    };
    let detail = json!({
        "decision": decision.code(),
        "nextAttempt": next_attempt,
        "countedAttempts": counted,
    })
    .to_string();
    let mut then = event(
        job,
        actor,
        if next == JobState::Queued {
            "job.requeued"
        } else {
            "job.cancelled"
        },
    );
    then.attempt = Some(claim.dispatch_attempt);
    then.reason = Some(&reason);
    then.detail_json = Some(&detail);
    then.at = ctx.now;
    let [end_claim, free_job] = release_job(
        ctx,
        job,
        &claim,
        ("lost", "lease expired"),
        (state, next),
        &reason,
        false,
    )?;
    let statements = vec![
        end_claim,
        free_job,
        // The runner takes the protocol's lease_lost move from whatever state it is in now: an
        // active one is marked lost and its credential generation moves on (its next call gets
        // 401, the SDK re-exchanges at once, and that fresh session is what brings it back to
        // active); a draining, lost or revoked one keeps its state.
        runners::recover(
            ctx.db,
            &claim.runner_id,
            ctx.now,
            &format!("job {}: {lapse}", job.id),
        )?,
        events::insert(ctx.db, &lost)?,
        events::insert(ctx.db, &then)?,
    ];
    let changed = ctx.commit(&snap, false, statements).await?;
    if changed.get(..3) != Some(&[1, 1, 1][..]) {
        return Err(JobRefusal::internal(format!(
            "recovery batch changed {changed:?} rows"
        )));
    }
    ctx.alarm.set(AlarmChange::Clear);
    // The job is queued again (or finished), and its runner lost: claims must read D1.
    ctx.touched.replace(Some(job.organization_id.clone()));
    Ok(JobReply::Recovered(Recovered {
        job_id: job.id.clone(),
        state: next,
        lost: Some(LostClaim {
            claim_id: claim.id,
            runner_id: claim.runner_id,
            decision: decision.code().to_owned(),
        }),
    }))
}

/// The two writes that take a job off a claim that ends without a completion (lost or handed
/// back): the claim ends as `claim_end` (state, reason), and the job goes `from` → `to`
/// (queued, or cancelled with `reason` unless a cancel reason is already recorded), each
/// guarded by the claim being the job's active one at its attempt.
fn release_job(
    ctx: &OpCtx<'_>,
    job: &jobs::JobRow,
    claim: &jobs::ClaimRow,
    claim_end: (&str, &str),
    (from, to): (JobState, JobState),
    reason: &str,
    free_hand_back: bool,
) -> ApiResult<[worker::D1PreparedStatement; 2]> {
    let finished_at = (to == JobState::Cancelled).then_some(ctx.now);
    Ok([
        store::stmt(
            ctx.db,
            include_str!("store/queries/end_claim.sql"),
            &[
                claim.id.as_str().into(),
                ctx.now.into(),
                claim_end.0.into(),
                claim_end.1.into(),
            ],
        )?,
        store::stmt(
            ctx.db,
            include_str!("store/queries/free_job.sql"),
            &[
                job.id.as_str().into(),
                claim.id.as_str().into(),
                claim.dispatch_attempt.into(),
                from.as_str().into(),
                to.as_str().into(),
                ctx.now.into(),
                finished_at.into(),
                reason.into(),
                i64::from(free_hand_back).into(),
            ],
        )?,
    ])
}

/// What a lapsed lease says happened: when the claim last heartbeated, or that it never did.
fn lapse_reason(claim: &jobs::ClaimRow, lease: Option<i64>) -> String {
    let at = |ms: i64| rfc3339(ms).unwrap_or_else(|| format!("{ms} ms"));
    let expired = lease.map_or_else(
        || "its lease".to_owned(),
        |ms| format!("its lease ({})", at(ms)),
    );
    match (claim.last_heartbeat_at, claim.started_at) {
        (Some(last), _) => format!(
            "{expired} expired with no heartbeat since {} (attempt {})",
            at(last),
            claim.dispatch_attempt
        ),
        (None, Some(first)) => format!(
            "{expired} expired; heartbeats were accepted from {} (the last one's time was not recorded)",
            at(first)
        ),
        (None, None) => format!(
            "{expired} expired before any heartbeat (claimed {}, attempt {})",
            at(claim.issued_at),
            claim.dispatch_attempt
        ),
    }
}

// ------------------------------------------------------------------------------------------
// Release: the holder hands its claim back (it is stopping, or restarted and runs none of it).
// ------------------------------------------------------------------------------------------

async fn release(ctx: &OpCtx<'_>, snap: Snapshot, claim_id: &str, why: &str) -> Answer {
    let runner = ctx.runner()?;
    let claim = held_claim(&snap, runner, claim_id)?.clone();
    let job = &snap.job;
    if edgerunner_protocol::recovery::lease_expired(job.lease_expires_at.unwrap_or(0), ctx.now) {
        // Recovery owns a lapsed lease (its alarm is due): one decision per lease.
        return Err(JobRefusal::LeaseExpired(LeaseUse::HandBack));
    }
    let state = snap.state()?;
    let Some(decision) = decide_release(&snap.lease()?) else {
        return Err(JobRefusal::internal(format!(
            "job {} is {state} yet holds active claim {claim_id}",
            job.id
        )));
    };
    let next = decision.next_state();
    let actor = format!("runner:{runner}");
    let rationale = decision.reason();
    let free = matches!(decision, ReleaseDecision::Requeue { free: Some(_), .. });
    let counted = match decision {
        ReleaseDecision::Requeue { counted, .. } => Some(counted),
        ReleaseDecision::Exhausted { attempts } => Some(attempts),
        ReleaseDecision::Cancel => None,
    };
    // The answer; what was decided in it is the event's detail too.
    let answer = HandedBack {
        job_id: job.id.clone(),
        claim_id: claim_id.to_owned(),
        state: next,
        decision: decision.code().to_owned(),
        next_attempt: (next == JobState::Queued).then_some(claim.dispatch_attempt + 1),
        counted: !free,
        counted_attempts: counted,
    };
    let detail = json!({
        "decision": answer.decision,
        "nextAttempt": answer.next_attempt,
        "counted": answer.counted,
        "countedAttempts": answer.counted_attempts,
    })
    .to_string();
    let mut released = event(job, &actor, "job.released");
    released.runner_id = Some(runner);
    released.claim_id = Some(claim_id);
    released.attempt = Some(claim.dispatch_attempt);
    released.reason = Some(why);
    released.detail_json = Some(&detail);
    released.at = ctx.now;
    let end_reason = format!("handed back: {why}");
    let [end_claim, free_job] = release_job(
        ctx,
        job,
        &claim,
        ("released", &end_reason),
        (state, next),
        &rationale,
        free,
    )?;
    let mut statements = vec![
        end_claim,
        free_job,
        // Capacity comes back at once; the runner's state and credential are untouched (it
        // said what it is doing, it is not presumed dead).
        store::stmt(
            ctx.db,
            include_str!("store/queries/release_runner.sql"),
            &[runner.into(), ctx.now.into()],
        )?,
        events::insert(ctx.db, &released)?,
    ];
    let mut ended;
    if next == JobState::Cancelled {
        ended = event(job, &actor, "job.cancelled");
        ended.attempt = Some(claim.dispatch_attempt);
        ended.reason = Some(&rationale);
        ended.at = ctx.now;
        statements.push(events::insert(ctx.db, &ended)?);
    }
    let changed = ctx.commit(&snap, true, statements).await?;
    if changed.get(..3) != Some(&[1, 1, 1][..]) {
        return Err(JobRefusal::internal(format!(
            "release batch changed {changed:?} rows"
        )));
    }
    ctx.alarm.set(AlarmChange::Clear);
    if next == JobState::Queued {
        ctx.touched.replace(Some(job.organization_id.clone()));
    }
    Ok(JobReply::HandedBack(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

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
