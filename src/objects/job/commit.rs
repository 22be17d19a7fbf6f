//! The one write of an operation: its statements sent as one D1 batch after the assertions
//! that make what it decided from hold at the commit ([`OpCtx::commit`]), and what the object
//! learns from it (the job as the write left it, where the alarm goes, whom to touch).

use edgerunner_protocol::kind::EventKind;
use std::cell::{Cell, RefCell};

use super::snapshot::{Known, Snapshot};
use crate::error::{ApiError, ApiResult};
use crate::objects::job::{Holder, JobRefusal, JobReply};
use crate::platform::now_ms;
use crate::store::lifecycle::{self, AsKnown};
use crate::store::writes::{Changed, Writes};
use crate::store::{self, events, jobs, runners, Db};

/// What an operation answers: carried out, or refused (and why).
pub(super) type Answer = OpResult<JobReply>;

/// The job object's own result: a refusal (or failure) is answered to the edge as itself.
pub(super) type OpResult<T> = std::result::Result<T, JobRefusal>;

/// An operation's decision, and what it means for the job's alarm.
pub(super) struct OpOutcome {
    pub(super) answer: Answer,
    /// The lease the job now holds: the alarm goes there.
    pub(super) alarm_at: Option<i64>,
    /// The job holds no lease any more.
    pub(super) clear_alarm: bool,
    /// The organization whose dispatcher is to be told (see `OpCtx::touched`).
    pub(super) touched: Option<String>,
}

/// What a committed operation did to the job's lease, so the alarm follows it.
#[derive(Clone, Copy)]
pub(super) enum AlarmChange {
    Keep,
    At(i64),
    Clear,
}

pub(super) struct OpCtx<'a> {
    pub(super) db: &'a Db,
    /// The Worker's bindings (the archive's R2 bucket, for a job archived already).
    pub(super) env: &'a worker::Env,
    pub(super) now: i64,
    /// The runner a runner's operation comes from.
    pub(super) holder: Option<&'a Holder>,
    /// Set by an operation once its write committed.
    pub(super) alarm: Cell<AlarmChange>,
    /// Whether the operation's batch committed ([`OpCtx::commit`]).
    pub(super) wrote: Cell<bool>,
    /// The job as the committed write left it, for the object to remember; `None` forgets.
    pub(super) learned: RefCell<Option<Snapshot>>,
    /// The organization whose claimable work the committed write changed (a job queued again,
    /// a runner marked lost): its dispatcher is told once the operation is done.
    pub(super) touched: RefCell<Option<String>>,
}

impl<'a> OpCtx<'a> {
    pub(super) fn new(db: &'a Db, env: &'a worker::Env, holder: Option<&'a Holder>) -> Self {
        Self {
            db,
            env,
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
    pub(super) fn outcome(
        self,
        answer: Answer,
        known: &Known,
        fresh: Option<Snapshot>,
    ) -> OpOutcome {
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
    pub(super) fn runner(&self) -> ApiResult<&str> {
        self.holder
            .map(|h| h.runner_id.as_str())
            .ok_or_else(|| ApiError::internal("a runner's operation without its holder"))
    }

    /// Sends `writes` as one batch after the assertions that make what the operation decided
    /// from hold at the commit: the holder's credential generation (a runner's operation), and
    /// the job's state, attempt and active claim as `snap` has them, with a lease live now
    /// when `live_lease`. Answers what `writes` changed, checked as they say.
    pub(super) async fn commit(
        &self,
        snap: &Snapshot,
        live_lease: bool,
        writes: impl Into<Writes>,
    ) -> ApiResult<Changed> {
        let job = &snap.job;
        let decided_from = AsKnown {
            job_id: &job.id,
            state: job.state,
            attempt: job.dispatch_attempt,
            active_claim: job.active_claim_id.as_deref(),
        };
        self.commit_as(&decided_from, live_lease, writes.into())
            .await
    }

    /// [`OpCtx::commit`] for a decision made from `decided_from` (its reads, if any, see the
    /// batch's writes).
    pub(super) async fn commit_as(
        &self,
        decided_from: &AsKnown<'_>,
        live_lease: bool,
        writes: Writes,
    ) -> ApiResult<Changed> {
        let (statements, expected) = writes.into_parts();
        let mut batch = Vec::with_capacity(statements.len() + 2);
        if let Some(holder) = self.holder {
            batch.push(runners::credential_check(
                self.db,
                runners::CredentialCheck::Assert,
                &holder.runner_id,
                &holder.organization_id,
                holder.generation,
            )?);
        }
        batch.push(lifecycle::assert_job_as_known(
            self.db,
            decided_from,
            live_lease.then_some(self.now),
        )?);
        let assertions = batch.len();
        batch.extend(statements);
        let mut results = store::write_batch(self.db, batch).await?;
        self.wrote.set(true);
        expected.changed(results.split_off(assertions.min(results.len())))
    }

    /// What the object knows of its job after this operation's write.
    pub(super) fn learn(&self, snap: Snapshot) {
        *self.learned.borrow_mut() = Some(snap);
    }
}

pub(super) fn event<'a>(
    job: &'a jobs::JobRow,
    actor: &'a str,
    kind: EventKind,
) -> events::NewEvent<'a> {
    events::NewEvent {
        job_id: Some(&job.id),
        ..events::NewEvent::of_organization(&job.organization_id, actor, kind, None, 0)
    }
}
