//! The schema guards writes rely on, each under the name the database reports, and the one
//! table that turns a fired guard into an API answer.
//!
//! A guard is a trigger's `RAISE(ABORT, '<code>')` or a UNIQUE constraint, reported by its
//! column list. D1 reports them inside an error text (`<code>: SQLITE_CONSTRAINT`, `UNIQUE
//! constraint failed: <table>.<column>, …`); [`Guard::reported`] finds the name in that text
//! by exact match (a whole snake_case word for a trigger code, the whole column list for a
//! UNIQUE constraint), never by a fragment. A constraint that is not in [`GUARDS`] is a bug of
//! ours: it is answered `500` with the text logged (see [`crate::error::ApiError::violation`]).

use edgerunner_protocol::error_code::ErrorCode;

use crate::answers::{self, Answer};

/// One guard and its default answer. Handlers that give a guard a meaning of their own (a
/// claim race, an idempotent replay) match on [`Guard::name`] and answer themselves.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Guard {
    pub(crate) name: &'static str,
    pub(crate) answer: Answer,
}

/// A guard only the schema decides: its answer is written here, and only here.
const fn guard(name: &'static str, status: u16, code: ErrorCode, message: &'static str) -> Guard {
    Guard {
        name,
        answer: Answer::new(status, code, message),
    }
}

/// A guard that refuses what an object's own decision also refuses: both answer as
/// [`crate::answers`] says.
const fn shared(name: &'static str, answer: Answer) -> Guard {
    Guard { name, answer }
}

// Trigger codes (migrations/*.sql, `RAISE(ABORT, …)`).
pub(crate) const RUNNER_AT_CAPACITY: &str = "runner_at_capacity";
pub(crate) const CLAIM_REQUIRES_ACTIVE_RUNNER: &str = "claim_requires_active_runner";
pub(crate) const CLAIM_REQUIRES_QUEUED_JOB: &str = "claim_requires_queued_job";
pub(crate) const EVIDENCE_NOT_IN_COMPLETION_RUN: &str = "evidence_not_in_completion_run";
pub(crate) const COMPLETION_DOES_NOT_CLOSE_STREAM: &str = "completion_does_not_close_stream";
pub(crate) const EVIDENCE_RUN_IN_CUSTODY: &str = "evidence_run_in_custody";
pub(crate) const STREAM_CHUNK_LIMIT: &str = "stream_chunk_limit";
pub(crate) const STREAM_BYTES_LIMIT: &str = "stream_bytes_limit";
pub(crate) const STREAM_BYTES_MISCOUNTED: &str = "stream_bytes_miscounted";
pub(crate) const COMPLETION_DECISIONS_AT_CAP: &str = "completion_decisions_at_cap";
pub(crate) const ORGANIZATION_QUOTA_EXCEEDED: &str = "organization_quota_exceeded";
/// An enqueue's key names an archived job (migration 0018's `jobs_idempotency_key_is_free`).
pub(crate) const IDEMPOTENCY_KEY_ARCHIVED: &str = "job_idempotency_key_taken";
/// A completion names a run an archived job holds (migration 0019's
/// `completion_evidence_run_is_free`; a live job's hold is [`UNIQUE_COMPLETION_EVIDENCE`]).
pub(crate) const EVIDENCE_RUN_HELD_BY_ARCHIVED_JOB: &str = "evidence_run_held_by_archived_job";
// Batch assertions (migration 0007).
pub(crate) const CREDENTIAL_REVOKED: &str = "credential_revoked";
pub(crate) const JOB_MOVED: &str = "job_moved";
pub(crate) const RUNNER_MOVED: &str = "runner_moved";

// UNIQUE constraints, by the column list SQLite reports.
pub(crate) const UNIQUE_IDEMPOTENCY_KEY: &str = "UNIQUE jobs.organization_id, jobs.idempotency_key";
pub(crate) const UNIQUE_CLAIM_ATTEMPT: &str =
    "UNIQUE job_claims.job_id, job_claims.dispatch_attempt";
pub(crate) const UNIQUE_ACTIVE_CLAIM: &str = "UNIQUE job_claims.job_id";
pub(crate) const UNIQUE_COMPLETION_EVIDENCE: &str =
    "UNIQUE completion_evidence.evidence_kind, completion_evidence.evidence_id";

/// A job's idempotency key is taken, by a live job or an archived one: one answer.
const KEY_TAKEN: Answer = Answer::new(
    409,
    ErrorCode::IdempotencyKeyReused,
    "a job with this idempotency key already exists",
);

/// Every guard a write may meet in normal operation, with its answer.
pub(crate) const GUARDS: &[Guard] = &[
    // Runners and their identity.
    shared(RUNNER_AT_CAPACITY, answers::RUNNER_AT_CAPACITY),
    guard(
        "UNIQUE runners.organization_id, runners.runner_key",
        409,
        ErrorCode::RunnerKeyTaken,
        "a runner with this runnerKey is already registered",
    ),
    guard(
        "UNIQUE runners.fingerprint",
        409,
        ErrorCode::FingerprintTaken,
        "this key is already enrolled; a revoked key never comes back, so generate a new one",
    ),
    // Migration 0020: a drained ephemeral runner took its one job.
    guard(
        "ephemeral_runner_is_spent",
        409,
        ErrorCode::IllegalRunnerTransition,
        "an ephemeral runner that took its job (or was drained) is spent: it never takes work again; revoke it",
    ),
    guard(
        "runner_revocation_is_permanent",
        409,
        ErrorCode::RunnerRevoked,
        "a revoked runner cannot change state",
    ),
    guard(
        "challenge_already_consumed",
        401,
        ErrorCode::AuthenticationFailed,
        "the challenge was already used",
    ),
    guard(
        "pending_enrollments_at_cap",
        429,
        ErrorCode::PendingEnrollmentsAtCap,
        "the organization has as many runners waiting for approval as it allows; an administrator must approve or revoke some first",
    ),
    // Enrollment policy and tokens (migration 0009).
    guard(
        "pending_enrollments_from_network_at_cap",
        429,
        ErrorCode::PendingEnrollmentsFromNetworkAtCap,
        "the organization has as many runners from this network waiting for approval as it allows; an administrator must approve or revoke some first, or issue an enrollment token",
    ),
    // Migration 0012: one site's (an IPv6 /48's) share.
    guard(
        "pending_enrollments_from_site_at_cap",
        429,
        ErrorCode::PendingEnrollmentsFromSiteAtCap,
        "the organization has as many runners from this site (an IPv6 /48, or an IPv4 address) waiting for approval as it allows; an administrator must approve or revoke some first, or issue an enrollment token",
    ),
    // The token was live when read and was spent or revoked before the insert: one answer.
    guard(
        "enrollment_token_invalid",
        403,
        ErrorCode::EnrollmentTokenInvalid,
        "the enrollment token is unknown, expired, revoked or used up",
    ),
    guard(
        "enrollment_tokens_at_cap",
        409,
        ErrorCode::EnrollmentTokensAtCap,
        "the organization holds 100 live enrollment tokens; revoke some first",
    ),
    // Our bug if either fires: nothing we send rewrites a token or a runner's enrollment.
    shared("enrollment_token_is_immutable", answers::INTERNAL),
    shared("runner_enrollment_is_fixed", answers::INTERNAL),
    // Releases.
    guard(
        "UNIQUE release_artifacts.organization_id, release_artifacts.kind, release_artifacts.name",
        409,
        ErrorCode::ArtifactExists,
        "an artifact of this kind with this name already exists",
    ),
    guard(
        "UNIQUE executable_targets.organization_id, executable_targets.target_key",
        409,
        ErrorCode::TargetExists,
        "a target with this key already exists",
    ),
    // Jobs and claims.
    shared(UNIQUE_IDEMPOTENCY_KEY, KEY_TAKEN),
    shared(IDEMPOTENCY_KEY_ARCHIVED, KEY_TAKEN),
    shared(CLAIM_REQUIRES_ACTIVE_RUNNER, answers::RUNNER_NOT_ACTIVE),
    shared(CLAIM_REQUIRES_QUEUED_JOB, answers::JOB_NOT_QUEUED),
    shared(UNIQUE_CLAIM_ATTEMPT, answers::JOB_NOT_QUEUED),
    shared(UNIQUE_ACTIVE_CLAIM, answers::JOB_NOT_QUEUED),
    shared("job_is_finished", answers::JOB_FINISHED),
    shared("claim_is_over", answers::CLAIM_NOT_ACTIVE),
    shared("job_claim_mismatch", answers::CLAIM_NOT_ACTIVE),
    // Streams and completions.
    guard(
        "stream_chunk_breaks_chain",
        409,
        ErrorCode::StreamChainBroken,
        "the chunk does not extend the stored chain",
    ),
    shared("stream_claim_not_active", answers::CLAIM_NOT_ACTIVE),
    shared("completion_not_from_active_claim", answers::CLAIM_NOT_ACTIVE),
    guard(
        "completion_input_hash_mismatch",
        422,
        ErrorCode::InputHashMismatch,
        "the completion's inputHash is not the job's",
    ),
    shared(COMPLETION_DOES_NOT_CLOSE_STREAM, answers::STREAM_NOT_CLOSED),
    // Per-job storage limits (migrations/0004_job_bounds.sql). The job's object checks each
    // before it writes; these answer only if that check and the schema ever disagree.
    guard(
        STREAM_CHUNK_LIMIT,
        409,
        ErrorCode::StreamChunkLimit,
        "this attempt's stream holds as many chunks as it may; it is closed",
    ),
    guard(
        STREAM_BYTES_LIMIT,
        409,
        ErrorCode::StreamBytesLimit,
        "this chunk would take the attempt's stream past its payload byte limit",
    ),
    // Every organization's live data (migration 0015).
    guard(
        ORGANIZATION_QUOTA_EXCEEDED,
        507,
        ErrorCode::QuotaExceeded,
        "the organization's data in D1 is at its quota: nothing was written; retention frees \
         finished jobs, and an operator may raise the quota",
    ),
    // Our bug if it ever fires (the object computes the running total): a 500, named.
    shared(STREAM_BYTES_MISCOUNTED, answers::INTERNAL),
    // Our bug if it ever fires (the object counts stored decisions under its lock).
    shared(COMPLETION_DECISIONS_AT_CAP, answers::INTERNAL),
    // Batch assertions: a runner's write whose credential generation moved on (rotation,
    // revocation, recovery) is refused whole, as the edge refuses a stale credential.
    shared(CREDENTIAL_REVOKED, answers::CREDENTIAL_REVOKED),
    // The job object reloads and decides again when this fires; a second time is our bug.
    shared(JOB_MOVED, answers::INTERNAL),
    // An admin's change to a runner decided from a state that another change moved on.
    guard(
        RUNNER_MOVED,
        409,
        ErrorCode::RunnerChanged,
        "the runner changed while this request was decided; reload and retry",
    ),
    // Evidence.
    guard(
        "evidence_needs_accepted_completion",
        409,
        ErrorCode::EvidenceNeedsAcceptedCompletion,
        "evidence is attached only to an accepted completion",
    ),
    shared(EVIDENCE_NOT_IN_COMPLETION_RUN, answers::EVIDENCE_NOT_IN_RUN),
    shared(UNIQUE_COMPLETION_EVIDENCE, answers::EVIDENCE_ALREADY_ATTACHED),
    shared(EVIDENCE_RUN_HELD_BY_ARCHIVED_JOB, answers::EVIDENCE_ALREADY_ATTACHED),
    guard(
        EVIDENCE_RUN_IN_CUSTODY,
        409,
        ErrorCode::EvidenceRunInCustody,
        "the evaluation run is in the custody of an accepted completion; its evidence is final",
    ),
];

impl Guard {
    /// The guard of [`GUARDS`] called `name`.
    pub(crate) fn named(name: &str) -> Option<&'static Guard> {
        GUARDS.iter().find(|g| g.name == name)
    }

    /// The guard named in a database error text, if it is one of [`GUARDS`].
    pub(crate) fn reported(text: &str) -> Option<&'static Guard> {
        if let Some(columns) = reported_list(text, "UNIQUE constraint failed: ") {
            return Guard::named(&format!("UNIQUE {columns}"));
        }
        // A trigger's code is one whole snake_case word of the text.
        text.split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .filter(|word| word.contains('_'))
            .find_map(Guard::named)
    }
}

/// A guard crosses a Durable Object's wire by its name, and comes back as the table's entry
/// (a name not in the table does not deserialize): `#[serde(with = "guards::by_name")]`.
pub(crate) mod by_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Guard;

    pub(crate) fn serialize<S: Serializer>(
        guard: &&'static Guard,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(guard.name)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<&'static Guard, D::Error> {
        let name = String::deserialize(deserializer)?;
        Guard::named(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("{name:?} is not a guard")))
    }
}

/// The constraint's column list after `label`, up to D1's `: SQLITE_…` suffix or the end.
fn reported_list<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    let rest = &text[text.find(label)? + label.len()..];
    let end = rest.find(": SQLITE").unwrap_or(rest.len());
    Some(rest[..end].trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_codes_are_found_as_whole_words() {
        let text = "D1_ERROR: claim_requires_queued_job: SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_TRIGGER)";
        assert_eq!(
            Guard::reported(text).map(|g| g.answer.code),
            Some(ErrorCode::JobNotQueued)
        );
        // A code that merely contains a known one is not it.
        assert_eq!(
            Guard::reported("D1_ERROR: not_claim_requires_queued_job: SQLITE_CONSTRAINT"),
            None
        );
    }

    #[test]
    fn unique_constraints_are_found_by_their_whole_column_list() {
        let text = "D1_ERROR: UNIQUE constraint failed: jobs.organization_id, jobs.idempotency_key: SQLITE_CONSTRAINT";
        assert_eq!(
            Guard::reported(text).map(|g| g.name),
            Some(UNIQUE_IDEMPOTENCY_KEY)
        );
        let partial = "UNIQUE constraint failed: job_claims.job_id";
        assert_eq!(
            Guard::reported(partial).map(|g| g.name),
            Some(UNIQUE_ACTIVE_CLAIM)
        );
        // Another table's idempotency key is not the jobs' one.
        assert_eq!(
            Guard::reported("UNIQUE constraint failed: other.idempotency_key: SQLITE_CONSTRAINT"),
            None
        );
    }

    #[test]
    fn a_key_an_archived_job_holds_answers_as_a_taken_key() {
        let text = "D1_ERROR: job_idempotency_key_taken: SQLITE_CONSTRAINT";
        let guard = Guard::reported(text).expect("a guard");
        assert_eq!(guard.name, IDEMPOTENCY_KEY_ARCHIVED);
        let unique = Guard::named(UNIQUE_IDEMPOTENCY_KEY).expect("a guard");
        assert_eq!(guard.answer, unique.answer);
        // A job id taken by an archived job is no answer of the API's: a 500 (never met:
        // ids are 96 random bits).
        assert_eq!(
            Guard::reported("D1_ERROR: job_id_taken: SQLITE_CONSTRAINT"),
            None
        );
    }

    #[test]
    fn unnamed_checks_and_foreign_keys_are_not_guards() {
        for text in [
            "D1_ERROR: CHECK constraint failed: length(name) BETWEEN 1 AND 200: SQLITE_CONSTRAINT",
            "D1_ERROR: FOREIGN KEY constraint failed: SQLITE_CONSTRAINT",
            "D1_ERROR: NOT NULL constraint failed: runners.name: SQLITE_CONSTRAINT",
        ] {
            assert_eq!(Guard::reported(text), None, "{text}");
        }
    }

    #[test]
    fn every_guard_is_named_once() {
        for (i, g) in GUARDS.iter().enumerate() {
            assert!(
                GUARDS[i + 1..].iter().all(|other| other.name != g.name),
                "{} twice",
                g.name
            );
            assert!((400..600).contains(&g.answer.status), "{}", g.name);
        }
    }
}
