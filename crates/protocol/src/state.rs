//! Job and runner lifecycles as pure transition functions.
//!
//! The job machine follows the seed's diagram:
//!
//! ```text
//! queued → claimed → running → succeeded | failed
//!    │         │          │
//!    └─────────┴──────────┴→ cancel_requested → cancelled
//!              │
//!              └→ lost → queued (bounded retry) | cancelled
//! ```
//!
//! with the edges the diagram leaves implicit made explicit in [`JobState::transition`]:
//!
//! - **Queued and lost jobs cancel at once**; claimed, running and cancel-requested ones only
//!   *request* it, because a worker is holding them and learns of the request on heartbeat.
//! - **A completion may arrive while the job is still `claimed`.** The first heartbeat marks the
//!   start, but a job that finishes inside its first lease has no reason to heartbeat; refusing
//!   its completion would throw away paid work and make recovery run it again.
//! - **A completion during `cancel_requested` wins with the status it reports.** Cancellation is
//!   a request the worker sees only on its next heartbeat, so a worker can finish before it can
//!   possibly know. Its result is real, its evidence and costs are attached either way, and
//!   overwriting `succeeded` with `cancelled` would make the record lie about what ran. The
//!   terminal race is decided once, by whichever terminal event the job object applies first:
//!   the completion (with its own status; `cancelled` when the worker stopped on request), or
//!   the lease expiring, which ends the job `cancelled`.
//! - **A lease lost while cancellation is pending ends `cancelled`**, never `lost`: nobody
//!   requeues a job that someone asked to stop.
//! - **Only the control plane cancels.** A worker that reports `cancelled` for a job nobody asked
//!   to cancel is refused; its lease then lapses and recovery hands the work to another runner.
//! - Repeating a cancellation is idempotent (`cancel_requested` and `cancelled` stay put), so a
//!   retried `POST …/cancel` is not an error. Everything else that would leave a terminal state
//!   is refused: duplicate and conflicting completions are the reconciliation module's business,
//!   not a state change.
//!
//! Runner lifecycle: `pending_approval → active ⇄ draining`, `active → lost → active`, and
//! `revoked` from anywhere, permanently. See [`RunnerState::transition`].
//!
//! A claim has no machine of its own: [`ClaimState`] names where it is, and it leaves `active`
//! when its job does (completed, handed back, or its lease lost).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error_code::ErrorCode;
use crate::wire_name::wire_names;

/// Where a job is. Stored as [`JobState::as_str`]; the schema's CHECK constraint lists the same
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobState {
    Queued,
    Claimed,
    Running,
    CancelRequested,
    Succeeded,
    Failed,
    Cancelled,
    Lost,
}

/// The terminal status a worker reports in its completion (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CompletionStatus {
    Succeeded,
    Failed,
    /// The worker stopped at a safe boundary because cancellation was requested.
    Cancelled,
}

/// Something that happens to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobInput {
    /// A runner's claim was granted.
    Claim,
    /// The active claim's worker heartbeated; the first one marks execution start.
    Heartbeat,
    /// The active claim's worker completed with this status.
    Complete(CompletionStatus),
    /// Someone with `runs:write` asked to cancel.
    Cancel,
    /// The active claim's lease passed its expiry without a heartbeat.
    LeaseExpired,
    /// Recovery put a lost job back in the queue (attempt budget left).
    Requeue,
    /// Recovery gave up on a lost job (attempt budget spent).
    Exhaust,
}

/// A runner's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunnerState {
    /// Registered (or self-registered) and waiting for an administrator: nothing runs before
    /// approval.
    PendingApproval,
    Active,
    /// Finishes what it holds, takes nothing new.
    Draining,
    /// A lease of one of its claims expired: presumed dead until it proves otherwise.
    Lost,
    /// Permanent. A replacement registers as a new identity.
    Revoked,
}

/// Something that happens to a runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunnerInput {
    /// An administrator approved a pending registration.
    Approve,
    /// An administrator returned a draining or lost runner to service.
    Activate,
    /// An administrator stopped new work going to the runner.
    Drain,
    /// An administrator revoked the identity.
    Revoke,
    /// Recovery found an expired lease on one of the runner's claims.
    LeaseLost,
    /// The runner completed a fresh session exchange (bootstrap token or key-pair challenge).
    SessionProven,
    /// A key-pair enrollment waited for approval longer than its organization allows: the
    /// cron pass retires it, as a revocation nobody asked for.
    EnrollmentExpired,
}

wire_names! {
    /// Where a claim is (`job_claims.state`): holding its job, or over and how. Stored as
    /// [`ClaimState::as_str`]; the schema's CHECK constraint lists the same names. A claim
    /// leaves `active` once and never comes back: a job that is dispatched again gets a new
    /// claim.
    pub enum ClaimState: "a claim state" {
        /// The claim holds its job: only its runner may heartbeat, stream and complete it.
        Active = "active",
        /// Ended by its runner's word: an accepted completion, or a hand-back (the claim's
        /// `end_reason` says which).
        Released = "released",
        /// Its lease lapsed without a heartbeat; recovery decided what became of the job.
        Lost = "lost",
    }
}

/// Why a state name or a transition was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateError {
    UnknownJobState(String),
    UnknownRunnerState(String),
    /// An admin `status` that names no runner command.
    UnknownRunnerCommand(String),
    IllegalJobTransition {
        from: JobState,
        input: JobInput,
    },
    IllegalRunnerTransition {
        from: RunnerState,
        input: RunnerInput,
    },
}

impl JobState {
    pub const ALL: [JobState; 8] = [
        JobState::Queued,
        JobState::Claimed,
        JobState::Running,
        JobState::CancelRequested,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Claimed => "claimed",
            JobState::Running => "running",
            JobState::CancelRequested => "cancel_requested",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Result<JobState, StateError> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| StateError::UnknownJobState(s.to_owned()))
    }

    /// No input moves the job on any more (a repeated cancel is the only accepted no-op).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    /// A runner holds an active claim on the job: it counts against that runner's capacity, its
    /// lease is watched, and only that claim's attempt may heartbeat, stream or complete.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            JobState::Claimed | JobState::Running | JobState::CancelRequested
        )
    }

    /// The job machine. `Ok(self)` is a legal no-op (nothing to write); see the module docs for
    /// the edges the diagram leaves implicit.
    pub fn transition(self, input: JobInput) -> Result<JobState, StateError> {
        use JobInput as I;
        use JobState as S;
        let next = match (self, input) {
            (S::Queued, I::Claim) => S::Claimed,
            (S::Queued, I::Cancel) => S::Cancelled,

            (S::Claimed | S::Running, I::Heartbeat) => S::Running,
            (S::Claimed | S::Running, I::Complete(CompletionStatus::Succeeded)) => S::Succeeded,
            (S::Claimed | S::Running, I::Complete(CompletionStatus::Failed)) => S::Failed,
            (S::Claimed | S::Running, I::Cancel) => S::CancelRequested,
            (S::Claimed | S::Running, I::LeaseExpired) => S::Lost,

            // The worker keeps heartbeating until it reaches a safe boundary; each heartbeat
            // tells it `cancelRequested: true`.
            (S::CancelRequested, I::Heartbeat | I::Cancel) => S::CancelRequested,
            (S::CancelRequested, I::Complete(status)) => status.job_state(),
            (S::CancelRequested, I::LeaseExpired) => S::Cancelled,

            (S::Lost, I::Requeue) => S::Queued,
            (S::Lost, I::Exhaust | I::Cancel) => S::Cancelled,

            (S::Cancelled, I::Cancel) => S::Cancelled,

            _ => return Err(StateError::IllegalJobTransition { from: self, input }),
        };
        Ok(next)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl CompletionStatus {
    pub const ALL: [CompletionStatus; 3] = [
        CompletionStatus::Succeeded,
        CompletionStatus::Failed,
        CompletionStatus::Cancelled,
    ];

    /// The wire name, as the completion's `status` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            CompletionStatus::Succeeded => "succeeded",
            CompletionStatus::Failed => "failed",
            CompletionStatus::Cancelled => "cancelled",
        }
    }

    /// `None` for anything but the three wire names; the completion parser owns the error.
    pub fn parse(s: &str) -> Option<CompletionStatus> {
        CompletionStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
    }

    /// The terminal job state this status finalizes to.
    pub fn job_state(self) -> JobState {
        match self {
            CompletionStatus::Succeeded => JobState::Succeeded,
            CompletionStatus::Failed => JobState::Failed,
            CompletionStatus::Cancelled => JobState::Cancelled,
        }
    }
}

impl fmt::Display for CompletionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JobInput {
    /// Every input, each completion status separately: the columns of the transition table.
    pub const ALL: [JobInput; 9] = [
        JobInput::Claim,
        JobInput::Heartbeat,
        JobInput::Complete(CompletionStatus::Succeeded),
        JobInput::Complete(CompletionStatus::Failed),
        JobInput::Complete(CompletionStatus::Cancelled),
        JobInput::Cancel,
        JobInput::LeaseExpired,
        JobInput::Requeue,
        JobInput::Exhaust,
    ];

    /// A stable name for events and error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            JobInput::Claim => "claim",
            JobInput::Heartbeat => "heartbeat",
            JobInput::Complete(CompletionStatus::Succeeded) => "complete_succeeded",
            JobInput::Complete(CompletionStatus::Failed) => "complete_failed",
            JobInput::Complete(CompletionStatus::Cancelled) => "complete_cancelled",
            JobInput::Cancel => "cancel",
            JobInput::LeaseExpired => "lease_expired",
            JobInput::Requeue => "requeue",
            JobInput::Exhaust => "exhaust",
        }
    }
}

impl fmt::Display for JobInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RunnerState {
    pub const ALL: [RunnerState; 5] = [
        RunnerState::PendingApproval,
        RunnerState::Active,
        RunnerState::Draining,
        RunnerState::Lost,
        RunnerState::Revoked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunnerState::PendingApproval => "pending_approval",
            RunnerState::Active => "active",
            RunnerState::Draining => "draining",
            RunnerState::Lost => "lost",
            RunnerState::Revoked => "revoked",
        }
    }

    pub fn parse(s: &str) -> Result<RunnerState, StateError> {
        RunnerState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| StateError::UnknownRunnerState(s.to_owned()))
    }

    /// Only an active runner is offered new work. Capacity is the runner object's own check.
    pub fn can_claim(self) -> bool {
        self == RunnerState::Active
    }

    /// Whether a bootstrap-token runner's token may be rotated: in every state but revoked (a
    /// revoked runner is registered again instead).
    pub fn can_rotate(self) -> bool {
        self != RunnerState::Revoked
    }

    /// Whether the runner may obtain a session at all. Draining and lost runners still need
    /// credentials to heartbeat and complete what they hold; pending and revoked ones get none.
    pub fn can_authenticate(self) -> bool {
        self.transition(RunnerInput::SessionProven).is_ok()
    }

    /// The runner machine. `Ok(self)` is a legal no-op.
    ///
    /// - A pending runner can only be approved or revoked: no session, no work, before a person
    ///   has looked at it.
    /// - A lost runner returns to `active` when it proves it is alive with a fresh session
    ///   exchange. Heartbeats on surviving claims do not count: they prove a claim is alive, and
    ///   the runner was marked lost because one of its claims was not. (The edge can make the
    ///   SDK re-exchange at once by retiring the runner's credential generation when it is
    ///   marked lost: its next call gets a 401, and the SDK exchanges a new session.)
    /// - Draining is an operator's decision and survives lease loss and new sessions; only
    ///   `Activate` ends it. Otherwise a drained runner that hiccupped would come back into
    ///   service by itself.
    /// - Revoked is permanent: every input but a repeated `Revoke` is refused.
    pub fn transition(self, input: RunnerInput) -> Result<RunnerState, StateError> {
        use RunnerInput as I;
        use RunnerState as S;
        let next = match (self, input) {
            (S::PendingApproval, I::Approve) => S::Active,
            (S::Active | S::Draining | S::Lost, I::Activate) => S::Active,
            (S::Active | S::Draining | S::Lost, I::Drain) => S::Draining,
            (_, I::Revoke) => S::Revoked,
            (S::Active | S::Lost, I::LeaseLost) => S::Lost,
            (S::Draining, I::LeaseLost) => S::Draining,
            (S::Active | S::Lost, I::SessionProven) => S::Active,
            (S::Draining, I::SessionProven) => S::Draining,
            (S::PendingApproval, I::EnrollmentExpired) => S::Revoked,
            _ => return Err(StateError::IllegalRunnerTransition { from: self, input }),
        };
        Ok(next)
    }
}

impl fmt::Display for RunnerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RunnerInput {
    pub const ALL: [RunnerInput; 7] = [
        RunnerInput::Approve,
        RunnerInput::Activate,
        RunnerInput::Drain,
        RunnerInput::Revoke,
        RunnerInput::LeaseLost,
        RunnerInput::SessionProven,
        RunnerInput::EnrollmentExpired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunnerInput::Approve => "approve",
            RunnerInput::Activate => "activate",
            RunnerInput::Drain => "drain",
            RunnerInput::Revoke => "revoke",
            RunnerInput::LeaseLost => "lease_lost",
            RunnerInput::SessionProven => "session_proven",
            RunnerInput::EnrollmentExpired => "enrollment_expired",
        }
    }

    /// The `status` of `PATCH /api/remote-runners/{id}`: the command verb (`approve`,
    /// `activate`, `drain`, `revoke`) or the state it leads to (`approved`, `active`,
    /// `draining`, `revoked`). Lease loss and sessions are never an administrator's to assert.
    pub fn from_admin_status(status: &str) -> Result<RunnerInput, StateError> {
        match status {
            "approve" | "approved" => Ok(RunnerInput::Approve),
            "activate" | "active" => Ok(RunnerInput::Activate),
            "drain" | "draining" => Ok(RunnerInput::Drain),
            "revoke" | "revoked" => Ok(RunnerInput::Revoke),
            _ => Err(StateError::UnknownRunnerCommand(status.to_owned())),
        }
    }

    /// Whether taking this input in state `from` retires the runner's credential generation,
    /// so that every credential issued under it stops working at once. True exactly for a
    /// move (the state changes) into:
    ///
    /// - `revoked`: the identity is gone, and so must be everything that proves it.
    /// - `lost`: the runner is presumed dead, but a live runner cut off for a while would keep
    ///   calling with its old credential, and heartbeats on surviving claims do not bring it
    ///   back ([`RunnerState::transition`]). Its next call gets a 401 instead, the SDK
    ///   exchanges a fresh session at once, and that session is what returns it to `active`.
    ///
    /// A move that stays put retires nothing: a lost runner losing another lease was retired
    /// already, and a draining one keeps its state (and its credential) through lease loss.
    /// A session exchange never retires: the credential it issues is at the current
    /// generation. An illegal move retires nothing, since it does not happen.
    pub fn retires_credential(self, from: RunnerState) -> bool {
        from.transition(self)
            .is_ok_and(|to| to != from && matches!(to, RunnerState::Lost | RunnerState::Revoked))
    }
}

impl fmt::Display for RunnerInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl StateError {
    /// The stable machine code of `{"error": {"code", …}}`.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            StateError::UnknownJobState(_) => ErrorCode::UnknownJobState,
            StateError::UnknownRunnerState(_) => ErrorCode::UnknownRunnerState,
            StateError::UnknownRunnerCommand(_) => ErrorCode::InvalidRunnerStatus,
            StateError::IllegalJobTransition { .. } => ErrorCode::IllegalJobTransition,
            StateError::IllegalRunnerTransition { .. } => ErrorCode::IllegalRunnerTransition,
        }
    }

    /// The wire name of [`Self::error_code`].
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// State names reach this crate from requests (stored ones are pinned by CHECK
    /// constraints), so an unknown name is the caller's mistake; an illegal move conflicts
    /// with the current state.
    pub fn http_status(&self) -> u16 {
        match self {
            StateError::UnknownJobState(_)
            | StateError::UnknownRunnerState(_)
            | StateError::UnknownRunnerCommand(_) => 422,
            StateError::IllegalJobTransition { .. }
            | StateError::IllegalRunnerTransition { .. } => 409,
        }
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::UnknownJobState(s) => write!(f, "{s:?} is not a job state"),
            StateError::UnknownRunnerState(s) => write!(f, "{s:?} is not a runner state"),
            StateError::UnknownRunnerCommand(s) => write!(
                f,
                "{s:?} is not a runner status; expected approve, activate, drain or revoke"
            ),
            StateError::IllegalJobTransition { from, input } => {
                write!(f, "a {from} job cannot take {input}")
            }
            StateError::IllegalRunnerTransition { from, input } => {
                write!(f, "a {from} runner cannot take {input}")
            }
        }
    }
}

impl std::error::Error for StateError {}

/// States and inputs cross a wire (a refusal that names them) by their stable names, the
/// ones D1 and the events hold, never by their Rust spelling.
macro_rules! serde_by_name {
    ($($ty:ident: $what:literal),* $(,)?) => {$(
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = String::deserialize(deserializer)?;
                $ty::ALL
                    .into_iter()
                    .find(|value| value.as_str() == name)
                    .ok_or_else(|| {
                        serde::de::Error::custom(format!(concat!("{:?} is not ", $what), name))
                    })
            }
        }
    )*};
}

serde_by_name!(
    JobState: "a job state",
    CompletionStatus: "a completion status",
    JobInput: "a job input",
    RunnerState: "a runner state",
    RunnerInput: "a runner input",
);

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::testkit::{assert_refusal, check};

    use CompletionStatus as CS;
    use JobInput as I;
    use JobState as S;

    /// The whole job table, one row per state, one column per [`JobInput::ALL`] entry
    /// (claim, heartbeat, complete ok/failed/cancelled, cancel, lease_expired, requeue,
    /// exhaust). `None` is a refused move. Changing a cell here is changing the protocol.
    const JOB_TABLE: [(JobState, [Option<JobState>; 9]); 8] = [
        (
            S::Queued,
            [
                Some(S::Claimed),
                None,
                None,
                None,
                None,
                Some(S::Cancelled),
                None,
                None,
                None,
            ],
        ),
        (
            S::Claimed,
            [
                None,
                Some(S::Running),
                Some(S::Succeeded),
                Some(S::Failed),
                None,
                Some(S::CancelRequested),
                Some(S::Lost),
                None,
                None,
            ],
        ),
        (
            S::Running,
            [
                None,
                Some(S::Running),
                Some(S::Succeeded),
                Some(S::Failed),
                None,
                Some(S::CancelRequested),
                Some(S::Lost),
                None,
                None,
            ],
        ),
        (
            S::CancelRequested,
            [
                None,
                Some(S::CancelRequested),
                Some(S::Succeeded),
                Some(S::Failed),
                Some(S::Cancelled),
                Some(S::CancelRequested),
                Some(S::Cancelled),
                None,
                None,
            ],
        ),
        (S::Succeeded, [None; 9]),
        (S::Failed, [None; 9]),
        (
            S::Cancelled,
            [
                None,
                None,
                None,
                None,
                None,
                Some(S::Cancelled),
                None,
                None,
                None,
            ],
        ),
        (
            S::Lost,
            [
                None,
                None,
                None,
                None,
                None,
                Some(S::Cancelled),
                None,
                Some(S::Queued),
                Some(S::Cancelled),
            ],
        ),
    ];

    /// Rows: [`RunnerState::ALL`]; columns: [`RunnerInput::ALL`] (approve, activate, drain,
    /// revoke, lease_lost, session_proven).
    const RUNNER_TABLE: [(RunnerState, [Option<RunnerState>; 7]); 5] = {
        use RunnerState as R;
        // Inputs in RunnerInput::ALL order: approve, activate, drain, revoke, lease_lost,
        // session_proven, enrollment_expired.
        [
            (
                R::PendingApproval,
                [
                    Some(R::Active),
                    None,
                    None,
                    Some(R::Revoked),
                    None,
                    None,
                    Some(R::Revoked),
                ],
            ),
            (
                R::Active,
                [
                    None,
                    Some(R::Active),
                    Some(R::Draining),
                    Some(R::Revoked),
                    Some(R::Lost),
                    Some(R::Active),
                    None,
                ],
            ),
            (
                R::Draining,
                [
                    None,
                    Some(R::Active),
                    Some(R::Draining),
                    Some(R::Revoked),
                    Some(R::Draining),
                    Some(R::Draining),
                    None,
                ],
            ),
            (
                R::Lost,
                [
                    None,
                    Some(R::Active),
                    Some(R::Draining),
                    Some(R::Revoked),
                    Some(R::Lost),
                    Some(R::Active),
                    None,
                ],
            ),
            (
                R::Revoked,
                [None, None, None, Some(R::Revoked), None, None, None],
            ),
        ]
    };

    #[test]
    fn job_table_is_pinned_for_every_state_and_input() {
        let mut cells = 0;
        for (row, (state, expected)) in JOB_TABLE.iter().enumerate() {
            assert_eq!(*state, JobState::ALL[row], "rows follow JobState::ALL");
            for (input, want) in JobInput::ALL.iter().zip(expected) {
                let got = state.transition(*input);
                match want {
                    Some(next) => assert_eq!(got, Ok(*next), "{state} + {input}"),
                    None => assert_eq!(
                        got,
                        Err(StateError::IllegalJobTransition {
                            from: *state,
                            input: *input
                        }),
                        "{state} + {input}"
                    ),
                }
                cells += 1;
            }
        }
        assert_eq!(cells, JobState::ALL.len() * JobInput::ALL.len());
    }

    #[test]
    fn runner_table_is_pinned_for_every_state_and_input() {
        let mut cells = 0;
        for (row, (state, expected)) in RUNNER_TABLE.iter().enumerate() {
            assert_eq!(
                *state,
                RunnerState::ALL[row],
                "rows follow RunnerState::ALL"
            );
            for (input, want) in RunnerInput::ALL.iter().zip(expected) {
                let got = state.transition(*input);
                match want {
                    Some(next) => assert_eq!(got, Ok(*next), "{state} + {input}"),
                    None => assert_eq!(
                        got,
                        Err(StateError::IllegalRunnerTransition {
                            from: *state,
                            input: *input
                        }),
                        "{state} + {input}"
                    ),
                }
                cells += 1;
            }
        }
        assert_eq!(cells, RunnerState::ALL.len() * RunnerInput::ALL.len());
    }

    #[test]
    fn all_lists_are_complete_and_distinct() {
        // A new variant must be added to ALL (and so to the tables): the match below stops
        // compiling when a variant appears, and the counts catch a missing ALL entry.
        fn job_index(s: JobState) -> usize {
            match s {
                S::Queued => 0,
                S::Claimed => 1,
                S::Running => 2,
                S::CancelRequested => 3,
                S::Succeeded => 4,
                S::Failed => 5,
                S::Cancelled => 6,
                S::Lost => 7,
            }
        }
        for (i, s) in JobState::ALL.iter().enumerate() {
            assert_eq!(job_index(*s), i);
        }
        fn runner_index(s: RunnerState) -> usize {
            match s {
                RunnerState::PendingApproval => 0,
                RunnerState::Active => 1,
                RunnerState::Draining => 2,
                RunnerState::Lost => 3,
                RunnerState::Revoked => 4,
            }
        }
        for (i, s) in RunnerState::ALL.iter().enumerate() {
            assert_eq!(runner_index(*s), i);
        }
        let names: std::collections::BTreeSet<_> =
            JobInput::ALL.iter().map(|i| i.as_str()).collect();
        assert_eq!(names.len(), JobInput::ALL.len());
        let names: std::collections::BTreeSet<_> =
            RunnerInput::ALL.iter().map(|i| i.as_str()).collect();
        assert_eq!(names.len(), RunnerInput::ALL.len());
    }

    #[test]
    fn state_names_round_trip_and_unknown_names_are_refused() {
        for s in JobState::ALL {
            assert_eq!(JobState::parse(s.as_str()), Ok(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        for s in RunnerState::ALL {
            assert_eq!(RunnerState::parse(s.as_str()), Ok(s));
        }
        for s in CompletionStatus::ALL {
            assert_eq!(CompletionStatus::parse(s.as_str()), Some(s));
        }
        let err = JobState::parse("Queued").unwrap_err();
        assert_eq!(err.code(), "UNKNOWN_JOB_STATE");
        assert_eq!(err.http_status(), 422);
        assert!(RunnerState::parse("approved").is_err());
        assert_eq!(CompletionStatus::parse("success"), None);
    }

    #[test]
    fn states_and_inputs_cross_a_wire_by_their_stored_names() {
        fn round_trip<T>(value: T, name: &str)
        where
            T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + fmt::Debug,
        {
            let text = serde_json::to_string(&value).unwrap();
            assert_eq!(text, format!("{name:?}"));
            assert_eq!(serde_json::from_str::<T>(&text).unwrap(), value);
        }
        JobState::ALL
            .into_iter()
            .for_each(|s| round_trip(s, s.as_str()));
        RunnerState::ALL
            .into_iter()
            .for_each(|s| round_trip(s, s.as_str()));
        CompletionStatus::ALL
            .into_iter()
            .for_each(|s| round_trip(s, s.as_str()));
        JobInput::ALL
            .into_iter()
            .for_each(|i| round_trip(i, i.as_str()));
        RunnerInput::ALL
            .into_iter()
            .for_each(|i| round_trip(i, i.as_str()));
        assert!(serde_json::from_str::<JobState>(r#""Queued""#).is_err());
        let err = StateError::IllegalJobTransition {
            from: S::Succeeded,
            input: I::Complete(CS::Failed),
        };
        let back: StateError = serde_json::from_str(&serde_json::to_string(&err).unwrap()).unwrap();
        assert_eq!(back, err);
    }

    #[test]
    fn terminal_states_accept_nothing_but_a_repeated_cancel() {
        for state in JobState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for input in JobInput::ALL {
                match state.transition(input) {
                    Ok(next) => {
                        assert_eq!(
                            (state, input, next),
                            (S::Cancelled, I::Cancel, S::Cancelled)
                        )
                    }
                    Err(err) => {
                        assert_eq!(err.code(), "ILLEGAL_JOB_TRANSITION");
                        assert_eq!(err.http_status(), 409);
                    }
                }
            }
        }
    }

    #[test]
    fn active_means_holding_a_claim() {
        let active: Vec<_> = JobState::ALL
            .into_iter()
            .filter(|s| s.is_active())
            .collect();
        assert_eq!(active, [S::Claimed, S::Running, S::CancelRequested]);
        // Only active jobs have a worker that can heartbeat, and only they can lose a lease.
        for s in JobState::ALL {
            assert_eq!(s.transition(I::Heartbeat).is_ok(), s.is_active(), "{s}");
            assert_eq!(s.transition(I::LeaseExpired).is_ok(), s.is_active(), "{s}");
            assert!(!(s.is_active() && s.is_terminal()));
        }
    }

    #[test]
    fn queued_and_lost_jobs_cancel_at_once_held_jobs_only_request_it() {
        assert_eq!(S::Queued.transition(I::Cancel), Ok(S::Cancelled));
        assert_eq!(S::Lost.transition(I::Cancel), Ok(S::Cancelled));
        assert_eq!(S::Claimed.transition(I::Cancel), Ok(S::CancelRequested));
        assert_eq!(S::Running.transition(I::Cancel), Ok(S::CancelRequested));
    }

    #[test]
    fn completion_racing_a_cancel_request_keeps_its_reported_status() {
        assert_eq!(
            S::CancelRequested.transition(I::Complete(CS::Succeeded)),
            Ok(S::Succeeded)
        );
        assert_eq!(
            S::CancelRequested.transition(I::Complete(CS::Failed)),
            Ok(S::Failed)
        );
        assert_eq!(
            S::CancelRequested.transition(I::Complete(CS::Cancelled)),
            Ok(S::Cancelled)
        );
    }

    #[test]
    fn lease_lost_after_cancel_request_cancels_instead_of_requeueing() {
        assert_eq!(
            S::CancelRequested.transition(I::LeaseExpired),
            Ok(S::Cancelled)
        );
    }

    #[test]
    fn worker_cannot_cancel_a_job_nobody_asked_to_cancel() {
        assert!(S::Running.transition(I::Complete(CS::Cancelled)).is_err());
        assert!(S::Claimed.transition(I::Complete(CS::Cancelled)).is_err());
    }

    #[test]
    fn completion_before_the_first_heartbeat_is_accepted() {
        assert_eq!(
            S::Claimed.transition(I::Complete(CS::Succeeded)),
            Ok(S::Succeeded)
        );
    }

    #[test]
    fn a_lost_job_completes_nothing_it_is_requeued_or_cancelled() {
        assert!(S::Lost.transition(I::Complete(CS::Succeeded)).is_err());
        assert!(S::Lost.transition(I::Heartbeat).is_err());
        assert_eq!(S::Lost.transition(I::Requeue), Ok(S::Queued));
        assert_eq!(S::Lost.transition(I::Exhaust), Ok(S::Cancelled));
    }

    #[test]
    fn every_state_is_reachable_from_queued_and_every_path_can_end() {
        let mut seen = std::collections::BTreeSet::from([S::Queued]);
        let mut frontier = vec![S::Queued];
        while let Some(s) = frontier.pop() {
            for input in JobInput::ALL {
                if let Ok(next) = s.transition(input) {
                    if seen.insert(next) {
                        frontier.push(next);
                    }
                }
            }
        }
        assert_eq!(seen.len(), JobState::ALL.len());
        // From every non-terminal state some sequence of inputs reaches a terminal state.
        for start in JobState::ALL.into_iter().filter(|s| !s.is_terminal()) {
            let mut seen = std::collections::BTreeSet::from([start]);
            let mut frontier = vec![start];
            while let Some(s) = frontier.pop() {
                for next in JobInput::ALL
                    .into_iter()
                    .filter_map(|i| s.transition(i).ok())
                {
                    if seen.insert(next) {
                        frontier.push(next);
                    }
                }
            }
            assert!(seen.iter().any(|s| s.is_terminal()), "{start} cannot end");
        }
    }

    #[test]
    fn random_walks_never_leave_a_terminal_state() {
        check(300, |rng| {
            let mut state = S::Queued;
            let mut terminal_at: Option<JobState> = None;
            for _ in 0..40 {
                let input = *rng.pick(&JobInput::ALL);
                if let Ok(next) = state.transition(input) {
                    if let Some(t) = terminal_at {
                        assert_eq!(next, t, "left terminal {t} by {input}");
                    }
                    state = next;
                    if state.is_terminal() {
                        terminal_at.get_or_insert(state);
                    }
                }
            }
        });
    }

    #[test]
    fn only_active_runners_claim() {
        let claimers: Vec<_> = RunnerState::ALL
            .into_iter()
            .filter(|s| s.can_claim())
            .collect();
        assert_eq!(claimers, [RunnerState::Active]);
    }

    #[test]
    fn pending_and_revoked_runners_get_no_session() {
        use RunnerState as R;
        let authenticating: Vec<_> = R::ALL
            .into_iter()
            .filter(|s| s.can_authenticate())
            .collect();
        assert_eq!(authenticating, [R::Active, R::Draining, R::Lost]);
    }

    #[test]
    fn revocation_is_permanent() {
        use RunnerState as R;
        check(200, |rng| {
            let mut state = *rng.pick(&R::ALL);
            let mut revoked = false;
            for _ in 0..30 {
                if let Ok(next) = state.transition(*rng.pick(&RunnerInput::ALL)) {
                    state = next;
                }
                revoked |= state == R::Revoked;
                if revoked {
                    assert_eq!(state, R::Revoked);
                }
            }
        });
    }

    #[test]
    fn lost_runner_returns_on_a_fresh_session_but_drain_survives_it() {
        use RunnerInput as RI;
        use RunnerState as R;
        assert_eq!(R::Lost.transition(RI::SessionProven), Ok(R::Active));
        let drained = R::Active.transition(RI::Drain).unwrap();
        let after = drained
            .transition(RI::LeaseLost)
            .and_then(|s| s.transition(RI::SessionProven));
        assert_eq!(after, Ok(R::Draining));
    }

    #[test]
    fn only_a_move_into_lost_or_revoked_retires_the_credential() {
        use RunnerInput as RI;
        use RunnerState as R;
        let mut retiring = Vec::new();
        for from in R::ALL {
            for input in RI::ALL {
                if input.retires_credential(from) {
                    retiring.push((from, input));
                }
            }
        }
        assert_eq!(
            retiring,
            [
                (R::PendingApproval, RI::Revoke),
                (R::PendingApproval, RI::EnrollmentExpired),
                (R::Active, RI::Revoke),
                (R::Active, RI::LeaseLost),
                (R::Draining, RI::Revoke),
                (R::Lost, RI::Revoke),
            ]
        );
    }

    #[test]
    fn lease_loss_retires_only_an_active_runners_credential() {
        use RunnerInput as RI;
        use RunnerState as R;
        // Draining survives lease loss with its credential; a lost runner was retired when it
        // became lost; pending and revoked runners cannot lose a lease at all.
        for from in [R::PendingApproval, R::Draining, R::Lost, R::Revoked] {
            assert!(!RI::LeaseLost.retires_credential(from), "{from}");
        }
        assert!(RI::LeaseLost.retires_credential(R::Active));
    }

    #[test]
    fn a_session_never_retires_the_credential_it_issues() {
        for from in RunnerState::ALL {
            assert!(
                !RunnerInput::SessionProven.retires_credential(from),
                "{from}"
            );
        }
    }

    #[test]
    fn repeating_a_revocation_retires_nothing_more() {
        assert!(!RunnerInput::Revoke.retires_credential(RunnerState::Revoked));
    }

    #[test]
    fn admin_status_names_map_to_commands() {
        use RunnerInput as RI;
        for (name, input) in [
            ("approve", RI::Approve),
            ("approved", RI::Approve),
            ("activate", RI::Activate),
            ("active", RI::Activate),
            ("drain", RI::Drain),
            ("draining", RI::Drain),
            ("revoke", RI::Revoke),
            ("revoked", RI::Revoke),
        ] {
            assert_eq!(RunnerInput::from_admin_status(name), Ok(input));
        }
        for name in [
            "lost",
            "lease_lost",
            "session_proven",
            "pending_approval",
            "",
            "Drain",
        ] {
            let err = RunnerInput::from_admin_status(name).unwrap_err();
            assert_eq!(err.code(), "INVALID_RUNNER_STATUS");
            assert_eq!(err.http_status(), 422);
        }
    }

    #[test]
    fn illegal_transition_messages_name_state_and_input() {
        let err = S::Succeeded.transition(I::Cancel).unwrap_err();
        assert_eq!(err.to_string(), "a succeeded job cannot take cancel");
        let err = RunnerState::Revoked
            .transition(RunnerInput::SessionProven)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "a revoked runner cannot take session_proven"
        );
        assert_eq!(err.code(), "ILLEGAL_RUNNER_TRANSITION");
    }

    #[test]
    fn arbitrary_state_names_read_as_written_or_are_typed_refusals() {
        // Job states arrive as a query filter, runner commands in an admin's PATCH body.
        let names: Vec<&str> = JobState::ALL
            .iter()
            .map(|s| s.as_str())
            .chain(RunnerState::ALL.iter().map(|s| s.as_str()))
            .chain(CompletionStatus::ALL.iter().map(|s| s.as_str()))
            .chain(["approve", "activate", "drain", "revoke"])
            .collect();
        check(500, |rng| {
            let text = if rng.chance(1, 2) {
                rng.json_string()
            } else {
                let name = *rng.pick(&names);
                rng.edit_text(name)
            };
            let text = text.as_str();
            match JobState::parse(text) {
                Ok(state) => assert_eq!(state.as_str(), text),
                Err(error) => assert_refusal(error.code(), error.http_status(), &error),
            }
            match RunnerState::parse(text) {
                Ok(state) => assert_eq!(state.as_str(), text),
                Err(error) => assert_refusal(error.code(), error.http_status(), &error),
            }
            match RunnerInput::from_admin_status(text) {
                Ok(input) => assert!(
                    RunnerState::ALL
                        .iter()
                        .any(|s| s.transition(input).is_ok_and(|to| to.as_str() == text))
                        || ["approve", "activate", "drain", "revoke"].contains(&text),
                    "{text:?} read as {input}"
                ),
                Err(error) => assert_refusal(error.code(), error.http_status(), &error),
            }
            if let Some(status) = CompletionStatus::parse(text) {
                assert_eq!(status.as_str(), text);
            }
        });
    }

    #[test]
    fn claim_states_round_trip_by_name() {
        crate::wire_name::assert_round_trips(
            ClaimState::ALL,
            ClaimState::as_str,
            ClaimState::parse,
        );
        assert_eq!(ClaimState::parse("completed"), None);
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn claim_states_are_the_schemas_and_the_documents() {
        let names: Vec<&str> = ClaimState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(crate::documents::check_list("job_claims", "state"), names);
        for schema in ["JobClaim", "RunnerClaim", "JobBundleClaim"] {
            assert_eq!(
                crate::documents::schema_enum(schema, "state"),
                names,
                "{schema}"
            );
        }
    }
}
