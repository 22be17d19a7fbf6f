//! The refusals that more than one place gives, each answered from here: a schema guard (the
//! table in [`crate::store::guards`]) and an object's own decision refuse alike, so both take
//! the status, code and message written here. A refusal only one place gives keeps its answer
//! there (an object's refusal in its `From<…> for ApiError`, a guard only the schema decides in
//! the guard table), so every refusal has one mapping to HTTP.
//!
//! Where the deciding object knows more than the guard (which claim, in which state), it adds
//! those facts after the one message (`ApiError::stating`); the status, code and message stay
//! this file's. This module depends on nothing of the worker's: the guard table and the error
//! type both read it.

use edgerunner_protocol::error_code::ErrorCode;

/// A refusal's status, stable code and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) code: ErrorCode,
    pub(crate) message: &'static str,
}

impl Answer {
    pub(crate) const fn new(status: u16, code: ErrorCode, message: &'static str) -> Self {
        Self {
            status,
            code,
            message,
        }
    }
}

/// The runner holds as many claims as it may: the runner's object, or the schema's capacity
/// check when two claims raced.
pub(crate) const RUNNER_AT_CAPACITY: Answer = Answer::new(
    503,
    ErrorCode::RunnerAtCapacity,
    "the runner holds as many claims as it may",
);

/// The runner is not active: the runner's object (which names its state), or the schema when
/// the runner left `active` while its claim was decided.
pub(crate) const RUNNER_NOT_ACTIVE: Answer =
    Answer::new(503, ErrorCode::RunnerNotActive, "the runner is not active");

/// The job was claimed or changed between a claim's read and its write. The runner's object
/// tries its next candidate instead; a client reads this only if the schema refused a claim
/// no object wrote (never, as written).
pub(crate) const JOB_NOT_QUEUED: Answer = Answer::new(
    409,
    ErrorCode::JobNotQueued,
    "the job was claimed or changed concurrently",
);

/// The runner's claim is over (released, lost, or the job moved on): the job's object (which
/// names the claim, its state and the job's), or one of the schema's four claim guards.
pub(crate) const CLAIM_NOT_ACTIVE: Answer = Answer::new(
    409,
    ErrorCode::ClaimNotActive,
    "the claim is not the job's active claim",
);

/// The job finished: a cancel the job's object refused (it names how the job finished), or the
/// schema's guard on a finished job.
pub(crate) const JOB_FINISHED: Answer =
    Answer::new(409, ErrorCode::JobFinished, "the job has finished");

/// The runner's credential generation moved on (rotation, revocation, recovery): the job's
/// object from its read, or the batch's assertion when it moved during the write.
pub(crate) const CREDENTIAL_REVOKED: Answer = Answer::new(
    401,
    ErrorCode::AuthenticationFailed,
    "credential was revoked; exchange a new one",
);

/// Evidence a completion names is held by another accepted completion: the job's object (which
/// names the holder when it can find it), or the schema's uniqueness of custody.
pub(crate) const EVIDENCE_ALREADY_ATTACHED: Answer = Answer::new(
    409,
    ErrorCode::EvidenceAlreadyAttached,
    "an evidence row named here is already attached to another accepted completion",
);

/// Evidence a completion names is not in its evaluation run (the schema decides; the job's
/// object names it as its refusal).
pub(crate) const EVIDENCE_NOT_IN_RUN: Answer = Answer::new(
    422,
    ErrorCode::EvidenceNotInRun,
    "every evidence row must exist in this organization and belong to the completion's evaluation run",
);

/// A completion's final stream checksum is not the stored stream's last chunk's (the schema
/// decides; the job's object names it as its refusal).
pub(crate) const STREAM_NOT_CLOSED: Answer = Answer::new(
    409,
    ErrorCode::CompletionStreamChecksumMismatch,
    "the final stream checksum is not the last stored chunk's",
);

/// The failure of ours every object answers alike: the detail is in the log where it happened.
pub(crate) const INTERNAL: Answer = Answer::new(500, ErrorCode::Internal, "internal error");
