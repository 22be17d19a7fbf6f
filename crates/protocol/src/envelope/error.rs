//! The two errors of this module: building envelopes and keys ([`EnvelopeError`]), and a
//! runner refusing an assignment ([`AssignmentError`]).

use core::fmt;

use serde::{Deserialize, Serialize};

use super::{JobId, MIN_MASTER_SECRET_CHARS};
use crate::error_code::ErrorCode;

/// Building envelopes and keys (the server's side, and a runner reading its session).
/// Serializable, as [`crate::chunk::ChunkError`] is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvelopeError {
    MasterSecretTooShort { characters: usize },
    EmptySigningSecret,
    MalformedJobSigning { reason: String },
    UnknownEnvironment { environment: String },
    RequirementsNotObject,
    NonPortableNumber { number: String },
    MalformedEnvelope { reason: String },
    MalformedServedTarget { reason: String },
}

impl EnvelopeError {
    /// The machine code of `{"error": {"code", …}}` when the edge answers this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::MasterSecretTooShort { .. } => ErrorCode::SigningSecretTooShort,
            Self::EmptySigningSecret => ErrorCode::SigningSecretEmpty,
            Self::MalformedJobSigning { .. } => ErrorCode::JobSigningMalformed,
            Self::UnknownEnvironment { .. } => ErrorCode::UnknownEnvironment,
            Self::RequirementsNotObject => ErrorCode::RequirementsNotObject,
            Self::NonPortableNumber { .. } => ErrorCode::RequirementsNonIntegerNumber,
            Self::MalformedEnvelope { .. } => ErrorCode::EnvelopeMalformed,
            Self::MalformedServedTarget { .. } => ErrorCode::ServedTargetMalformed,
        }
    }

    /// The wire name of [`Self::error_code`].
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// 503 for a misconfigured server (the seed's answer to a short master secret); 422 for
    /// everything that arrived malformed.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::MasterSecretTooShort { .. } => 503,
            _ => 422,
        }
    }
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MasterSecretTooShort { characters } => write!(
                f,
                "REMOTE_RUNNER_SIGNING_SECRET has {characters} characters; at least \
                 {MIN_MASTER_SECRET_CHARS} are required"
            ),
            Self::EmptySigningSecret => f.write_str("the job-signing secret is empty"),
            Self::MalformedJobSigning { reason } => write!(f, "jobSigning: {reason}"),
            Self::UnknownEnvironment { environment } => write!(
                f,
                "{environment:?} is not an environment; expected dev, staging or prod"
            ),
            Self::RequirementsNotObject => f.write_str("requirements must be a JSON object"),
            Self::NonPortableNumber { number } => write!(
                f,
                "requirements may contain only whole numbers up to 2^53 - 1, not {number} \
                 (SDKs re-print other numbers differently, which breaks the signature)"
            ),
            Self::MalformedEnvelope { reason } => write!(f, "job envelope: {reason}"),
            Self::MalformedServedTarget { reason } => write!(f, "served target: {reason}"),
        }
    }
}

impl std::error::Error for EnvelopeError {}

/// Why a Rust runner refused a claim response. Statuses mirror the SDK's
/// `RemoteRunnerProtocolError`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignmentError {
    Malformed { reason: String },
    UnsupportedAlgorithm { algorithm: String },
    KeyIdMismatch,
    PayloadHashMismatch,
    BadSignature,
    OrganizationMismatch,
    ClaimJobMismatch,
    ClaimAttemptMismatch,
    ClaimIdMismatch,
    TargetNotServed { job_id: JobId, version_id: u64 },
    NotYetValid,
    Expired,
    NonceReplayed,
}

impl AssignmentError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => "ASSIGNMENT_MALFORMED",
            Self::UnsupportedAlgorithm { .. } => "SIGNING_ALGORITHM_UNSUPPORTED",
            Self::KeyIdMismatch => "SIGNING_KEY_MISMATCH",
            Self::PayloadHashMismatch => "PAYLOAD_HASH_MISMATCH",
            Self::BadSignature => "SIGNATURE_INVALID",
            Self::OrganizationMismatch => "ORGANIZATION_MISMATCH",
            Self::ClaimJobMismatch => "CLAIM_JOB_MISMATCH",
            Self::ClaimAttemptMismatch => "CLAIM_ATTEMPT_MISMATCH",
            Self::ClaimIdMismatch => "CLAIM_ID_MISMATCH",
            // The SDK's own code for this refusal.
            Self::TargetNotServed { .. } => "TARGET_MISMATCH",
            Self::NotYetValid => "CLAIM_NOT_YET_VALID",
            Self::Expired => "CLAIM_EXPIRED",
            Self::NonceReplayed => "NONCE_REPLAYED",
        }
    }

    /// 409 where the SDK says 409 (a target it does not serve, a nonce already consumed): the
    /// assignment is genuine but conflicts with the runner's state. 422 for everything else.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::TargetNotServed { .. } | Self::NonceReplayed => 409,
            _ => 422,
        }
    }
}

impl fmt::Display for AssignmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { reason } => write!(f, "claim response is malformed: {reason}"),
            Self::UnsupportedAlgorithm { algorithm } => {
                write!(f, "job signing algorithm {algorithm:?} is not hmac-sha256")
            }
            Self::KeyIdMismatch => f.write_str("runner job signing key does not match"),
            Self::PayloadHashMismatch => f.write_str("runner job payload hash does not match"),
            Self::BadSignature => f.write_str("runner job signature is invalid"),
            Self::OrganizationMismatch => {
                f.write_str("job envelope is for another organization than the session's")
            }
            Self::ClaimJobMismatch => f.write_str("claim jobId differs from the signed jobId"),
            Self::ClaimAttemptMismatch => {
                f.write_str("claim dispatchAttempt differs from the signed dispatchAttempt")
            }
            Self::ClaimIdMismatch => f.write_str("claim id differs from the signed claimId"),
            Self::TargetNotServed { job_id, version_id } => write!(
                f,
                "job {job_id} is for target version {version_id}, which this runner does not \
                 serve; it was not executed"
            ),
            Self::NotYetValid => {
                f.write_str("runner job claim is outside its validity window (not yet valid)")
            }
            Self::Expired => {
                f.write_str("runner job claim is outside its validity window (expired)")
            }
            Self::NonceReplayed => f.write_str("runner job claim nonce was already consumed"),
        }
    }
}

impl std::error::Error for AssignmentError {}
