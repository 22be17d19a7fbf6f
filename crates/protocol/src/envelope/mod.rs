//! The signed job envelope: identities, per-runner signing keys, signing and verification.
//!
//! The parts: `identity` (the ids an envelope names), `keys` (master and per-runner secrets),
//! `signed_job` (the envelope and its signature), `verify` (a runner's checks of a claim answer),
//! `error`. Everything public is re-exported here.
//!
//! # Keys
//!
//! One master secret (`REMOTE_RUNNER_SIGNING_SECRET`) never leaves the server. Each runner gets
//! its own job-signing secret, derived as
//! `hex(HMAC-SHA256(master, "edgerunner/job-signing/v1" ‖ u32be(len(runner id)) ‖ runner id ‖
//! u64be(generation)))` and handed to it in the session response (`jobSigning.secret`). The derivation is one-way, so a
//! runner's secret reveals neither the master nor another runner's secret; and it includes the
//! runner's credential generation, which rotation bumps, so a rotated runner's old secret stops
//! verifying anything new. The key id shown to operators is `rk_` plus 16 hex digits of
//! SHA-256 of the secret: enough to tell keys apart, useless for recovering one.
//!
//! # Signatures
//!
//! `payloadHash = H(envelope)`; `signature` = lowercase hex HMAC-SHA256 keyed by the UTF-8 bytes
//! of the runner's secret (the hex *text*, as the SDK uses it) over the ASCII bytes of
//! `payloadHash`.
//!
//! # Numbers in the envelope
//!
//! The SDK hashes its own rendering of the envelope it parsed, not the bytes the server sent
//! (see [`crate::stable_json`]). So every number in the envelope must be one that Python and
//! JavaScript print back unchanged: integers only, within ±(2^53 − 1). The ids and attempts are
//! integers by construction; [`EnvelopeRequirements`] refuses any other number, which is why the
//! job input travels as `inputHash` rather than inline.

mod error;
#[cfg(test)]
mod fixtures;
mod identity;
mod keys;
mod signed_job;
mod verify;

pub use error::{AssignmentError, EnvelopeError};
pub use identity::{
    ArtifactId, ClaimId, CredentialGeneration, DispatchAttempt, IdempotencyKey, InvalidId, JobId,
    KeyId, Nonce, OrganizationId, RunnerId, SubjectKind, MAX_IDENTIFIER_BYTES,
};
pub(crate) use keys::hmac_sha256;
pub use keys::{
    constant_time_eq, derive_job_signing_secret, JobSigning, JobSigningSecret, MasterSigningSecret,
    ALGORITHM_HMAC_SHA256, MIN_MASTER_SECRET_CHARS,
};
pub use signed_job::{sign, EnvelopeRequirements, Environment, JobEnvelope, SignedJob, Subject};
pub use verify::{
    verify_assignment, NonceStore, ServedTarget, SessionBinding, VerifiedAssignment,
    CLOCK_SKEW_MILLIS,
};
