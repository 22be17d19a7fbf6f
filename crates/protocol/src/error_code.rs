//! The machine codes of the edge's error answers, `{"error": {"code", "message"}}`.
//!
//! One variant per code the edge can answer: the codes `docs/openapi.json` lists per route and
//! status, the router's `METHOD_NOT_ALLOWED`, the schema guard table's codes, and every code of
//! the protocol errors the edge answers as they are ([`ErrorCode`]'s tests hold the list to the
//! document). A client matches on the type, never on text; the text is the wire form.
//!
//! A client meets codes it does not know (a newer server adds some): [`ErrorCode::parse`] is
//! `None` for them, and deserializing one is an error the caller can fall back from, so
//! nothing here decides what an unknown code means.

use std::fmt;
use std::str::FromStr;

use crate::wire_name::wire_names;

wire_names! {
    /// A machine code of an error answer, by its wire name (`SCREAMING_SNAKE_CASE`).
    pub enum ErrorCode: "an error code this version knows" {
        // Any route.
        /// No credential, or one the server does not accept (wrong, expired, revoked, rotated).
        AuthenticationFailed = "AUTHENTICATION_FAILED",
        /// The credential is valid but lacks the scope or role the route needs.
        Forbidden = "FORBIDDEN",
        /// No such resource in the caller's organization, or no such path.
        NotFound = "NOT_FOUND",
        /// The path exists but not with this method (`Allow` lists the methods it has).
        MethodNotAllowed = "METHOD_NOT_ALLOWED",
        /// Too many requests of a kind from the caller's network; `Retry-After` says when to retry.
        RateLimited = "RATE_LIMITED",
        /// A failure of the server's; the detail is in its log only.
        Internal = "INTERNAL",

        // The request's body and fields.
        /// The body is not one the route reads (a bad `Content-Length`, not an object, …).
        InvalidBody = "INVALID_BODY",
        /// The body is not JSON.
        InvalidJson = "INVALID_JSON",
        /// The body nests deeper than the server reads.
        JsonTooDeep = "JSON_TOO_DEEP",
        /// The body exceeds the route's byte limit.
        BodyTooLarge = "BODY_TOO_LARGE",
        /// A required field is absent.
        MissingField = "MISSING_FIELD",
        /// A field the route does not know.
        UnknownField = "UNKNOWN_FIELD",
        /// A field has the wrong type or is out of its bounds.
        InvalidField = "INVALID_FIELD",
        /// A text field holds NUL or control characters.
        InvalidCharacters = "INVALID_CHARACTERS",
        /// A page cursor (`after`) that the listing did not hand out.
        InvalidCursor = "INVALID_CURSOR",
        /// A page size (`limit`) outside its bounds.
        InvalidLimit = "INVALID_LIMIT",
        /// A state filter that names no state.
        InvalidState = "INVALID_STATE",
        /// A job id that is not one this server issues.
        JobIdMalformed = "JOB_ID_MALFORMED",
        /// A claim id that is not one this server issues.
        ClaimIdMalformed = "CLAIM_ID_MALFORMED",

        // Configuration of the server itself.
        /// A configured secret is still the example file's placeholder.
        SecretIsPlaceholder = "SECRET_IS_PLACEHOLDER",
        /// `REMOTE_RUNNER_SIGNING_SECRET` is shorter than the protocol allows.
        SigningSecretTooShort = "SIGNING_SECRET_TOO_SHORT",
        /// The job-signing secret derived for a runner is empty.
        SigningSecretEmpty = "SIGNING_SECRET_EMPTY",
        /// `CRON_SECRET` is shorter than the server allows.
        CronSecretTooShort = "CRON_SECRET_TOO_SHORT",

        // API keys.
        /// Scopes outside the ones an API key may have.
        InvalidScopes = "INVALID_SCOPES",
        /// A role that is neither `admin` nor `member`.
        InvalidRole = "INVALID_ROLE",

        // Runner registration, enrollment and identity.
        /// A runner with this `runnerKey` is already registered.
        RunnerKeyTaken = "RUNNER_KEY_TAKEN",
        /// The public key is already enrolled (a revoked key never comes back).
        FingerprintTaken = "FINGERPRINT_TAKEN",
        /// Approving a key-pair runner takes the fingerprint the operator compared.
        FingerprintRequired = "FINGERPRINT_REQUIRED",
        /// The fingerprint given is not the runner's.
        FingerprintMismatch = "FINGERPRINT_MISMATCH",
        /// A fingerprint that is not one (`SHA256:` and base64).
        FingerprintMalformed = "FINGERPRINT_MALFORMED",
        /// A public key that is not a 32-byte ed25519 key in base64.
        PublicKeyMalformed = "PUBLIC_KEY_MALFORMED",
        /// An ed25519 key of small order, which anyone could sign for.
        PublicKeyWeak = "PUBLIC_KEY_WEAK",
        /// A challenge that is not one the server issues.
        ChallengeMalformed = "CHALLENGE_MALFORMED",
        /// A challenge signature that is not a 64-byte ed25519 signature in base64.
        ChallengeSignatureMalformed = "CHALLENGE_SIGNATURE_MALFORMED",
        /// A challenge signature the key did not make.
        ChallengeSignatureInvalid = "CHALLENGE_SIGNATURE_INVALID",
        /// An enrollment signature that is not a 64-byte ed25519 signature in base64.
        EnrollmentSignatureMalformed = "ENROLLMENT_SIGNATURE_MALFORMED",
        /// The organization does not accept enrollments now.
        EnrollmentClosed = "ENROLLMENT_CLOSED",
        /// The organization enrolls runners only with an enrollment token.
        EnrollmentTokenRequired = "ENROLLMENT_TOKEN_REQUIRED",
        /// The enrollment token is unknown, expired, revoked or used up.
        EnrollmentTokenInvalid = "ENROLLMENT_TOKEN_INVALID",
        /// The organization holds as many live enrollment tokens as it may.
        EnrollmentTokensAtCap = "ENROLLMENT_TOKENS_AT_CAP",
        /// An enrollment policy that is not `open`, `token` or `closed`.
        InvalidEnrollmentPolicy = "INVALID_ENROLLMENT_POLICY",
        /// A `retentionDays` that is not a whole number from 1 to 400.
        InvalidRetention = "INVALID_RETENTION",
        /// The organization's live data in D1 is at its quota: the write is refused whole.
        QuotaExceeded = "QUOTA_EXCEEDED",
        /// A request field only a local test server honours (`EDGERUNNER_LOCAL_HOOKS`), such as
        /// a retention pass's `asOf`.
        LocalHooksOnly = "LOCAL_HOOKS_ONLY",
        /// An enrollment token's `expiresInSeconds` outside its bounds.
        InvalidExpiresIn = "INVALID_EXPIRES_IN",
        /// An enrollment token's `maxUses` outside its bounds.
        InvalidMaxUses = "INVALID_MAX_USES",
        /// As many runners wait for approval as the organization allows.
        PendingEnrollmentsAtCap = "PENDING_ENROLLMENTS_AT_CAP",
        /// As many runners from this network wait for approval as the organization allows.
        PendingEnrollmentsFromNetworkAtCap = "PENDING_ENROLLMENTS_FROM_NETWORK_AT_CAP",
        /// As many runners from this site (an IPv6 /48, an IPv4 address) wait for approval as
        /// the organization allows.
        PendingEnrollmentsFromSiteAtCap = "PENDING_ENROLLMENTS_FROM_SITE_AT_CAP",
        /// An enrollment carries more files, or more bytes of them, than it may.
        EnrollFilesTooLarge = "ENROLL_FILES_TOO_LARGE",
        /// A key-pair runner has no bootstrap token to rotate.
        RotationUnsupported = "ROTATION_UNSUPPORTED",

        // Runners.
        /// The runner is revoked, permanently.
        RunnerRevoked = "RUNNER_REVOKED",
        /// The runner is not active (pending approval, draining or lost): no work for it now.
        RunnerNotActive = "RUNNER_NOT_ACTIVE",
        /// The runner holds as many claims as it may.
        RunnerAtCapacity = "RUNNER_AT_CAPACITY",
        /// The runner changed while an admin's change to it was decided; reload and retry.
        RunnerChanged = "RUNNER_CHANGED",
        /// A request names another runner than the caller's credential.
        RunnerMismatch = "RUNNER_MISMATCH",
        /// A runner status that names no runner command.
        InvalidRunnerStatus = "INVALID_RUNNER_STATUS",
        /// The runner cannot take that command from its state.
        IllegalRunnerTransition = "ILLEGAL_RUNNER_TRANSITION",
        /// A stored runner state that names no state.
        UnknownRunnerState = "UNKNOWN_RUNNER_STATE",
        /// A status or tag change without a reason.
        ReasonRequired = "REASON_REQUIRED",
        /// Tags are an operator's to set, never a runner's.
        TagsAreOperatorSet = "TAGS_ARE_OPERATOR_SET",
        /// A capability document that does not read.
        InvalidCapabilities = "INVALID_CAPABILITIES",
        /// Runner tags that do not read.
        InvalidTags = "INVALID_TAGS",
        /// A runner's served targets that do not read.
        InvalidServedTargets = "INVALID_SERVED_TARGETS",
        /// A runner file name outside `[A-Za-z0-9._-]`, or starting with a dot.
        InvalidFileName = "INVALID_FILE_NAME",
        /// A runner file that is not UTF-8 text.
        InvalidFile = "INVALID_FILE",
        /// A runner file larger than a file may be.
        FileTooLarge = "FILE_TOO_LARGE",
        /// The runner holds as many files, or bytes of them, as it may.
        RunnerFilesFull = "RUNNER_FILES_FULL",
        /// Returned by servers before the key-pair session answered a pending runner as an unknown
        /// one (`401`). This server never answers it; a runner still reads it from an older one.
        RunnerPendingApproval = "RUNNER_PENDING_APPROVAL",

        // Jobs.
        /// An environment that is not `dev`, `staging` or `prod`.
        InvalidEnvironment = "INVALID_ENVIRONMENT",
        /// A job subject that does not name an artifact version of the kind it says.
        InvalidSubject = "INVALID_SUBJECT",
        /// Job requirements that do not read.
        InvalidRequirements = "INVALID_REQUIREMENTS",
        /// An artifact kind that names no kind.
        InvalidKind = "INVALID_KIND",
        /// A claim's `waitSeconds` outside its bounds.
        InvalidWait = "INVALID_WAIT",
        /// A claim's `requestId` that is not one.
        InvalidRequestId = "INVALID_REQUEST_ID",
        /// An attempt number outside the job's attempts.
        InvalidAttempt = "INVALID_ATTEMPT",
        /// A heartbeat's `extendSeconds` outside its bounds.
        InvalidLease = "INVALID_LEASE",
        /// An idempotency key already used for another job.
        IdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED",
        /// An idempotency key already used for a job with another subject, input or requirements.
        IdempotencyConflict = "IDEMPOTENCY_CONFLICT",
        /// The job has finished.
        JobFinished = "JOB_FINISHED",
        /// The job is not finished, so it has no archive to make yet.
        JobNotFinished = "JOB_NOT_FINISHED",
        /// The job archive (R2) cannot be reached; try again.
        ArchiveUnavailable = "ARCHIVE_UNAVAILABLE",
        /// The job was claimed or changed concurrently (a claim race the schema settled).
        JobNotQueued = "JOB_NOT_QUEUED",
        /// The job cannot take that input from its state.
        IllegalJobTransition = "ILLEGAL_JOB_TRANSITION",
        /// A stored job state that names no state.
        UnknownJobState = "UNKNOWN_JOB_STATE",
        /// A stored environment that names no environment.
        UnknownEnvironment = "UNKNOWN_ENVIRONMENT",
        /// A stored job's requirements are not a JSON object.
        RequirementsNotObject = "REQUIREMENTS_NOT_OBJECT",
        /// A stored job's requirements hold a number that is not a portable integer.
        RequirementsNonIntegerNumber = "REQUIREMENTS_NON_INTEGER_NUMBER",
        /// A stored job that does not make an envelope.
        EnvelopeMalformed = "ENVELOPE_MALFORMED",
        /// A stored served target that does not read.
        ServedTargetMalformed = "SERVED_TARGET_MALFORMED",
        /// A runner's job-signing material that does not read.
        JobSigningMalformed = "JOB_SIGNING_MALFORMED",

        // Claims and leases.
        /// The claim is over (released, lost, or the job moved on).
        ClaimNotActive = "CLAIM_NOT_ACTIVE",
        /// The completion names no claim of this runner for this job and attempt.
        ClaimMismatch = "CLAIM_MISMATCH",
        /// The lease lapsed before this request; the job will be recovered.
        LeaseExpired = "LEASE_EXPIRED",

        // Streams.
        /// A stream chunk that does not read.
        StreamChunkMalformed = "STREAM_CHUNK_MALFORMED",
        /// A stream kind other than `log` or `trajectory`.
        StreamKindInvalid = "STREAM_KIND_INVALID",
        /// The chunk names another job, claim or attempt than the active one.
        StreamIdentityChanged = "STREAM_IDENTITY_CHANGED",
        /// The lease lapsed before this chunk.
        StreamLeaseExpired = "STREAM_LEASE_EXPIRED",
        /// The chunk's payload is larger than a chunk may carry.
        StreamPayloadTooLarge = "STREAM_PAYLOAD_TOO_LARGE",
        /// The chunk's payload hash is not its payload's.
        StreamPayloadHashMismatch = "STREAM_PAYLOAD_HASH_MISMATCH",
        /// The chunk's checksum is not the one its fields make.
        StreamChecksumMismatch = "STREAM_CHECKSUM_MISMATCH",
        /// The same chunk was stored already (a retry whose first answer was lost).
        StreamDuplicateChecksum = "STREAM_DUPLICATE_CHECKSUM",
        /// Another chunk holds this sequence number.
        StreamDuplicateSequence = "STREAM_DUPLICATE_SEQUENCE",
        /// The sequence number leaves a gap.
        StreamSequenceGap = "STREAM_SEQUENCE_GAP",
        /// The first chunk names a previous checksum.
        StreamPreviousAtZero = "STREAM_PREVIOUS_AT_ZERO",
        /// The previous checksum is not the last stored chunk's.
        StreamPreviousMismatch = "STREAM_PREVIOUS_MISMATCH",
        /// The chunk does not extend the stored chain (the schema's guard).
        StreamChainBroken = "STREAM_CHAIN_BROKEN",
        /// The attempt's stream holds as many chunks as it may.
        StreamChunkLimit = "STREAM_CHUNK_LIMIT",
        /// The chunk would take the attempt's stream past its byte limit.
        StreamBytesLimit = "STREAM_BYTES_LIMIT",

        // Completions.
        /// A completion that does not read.
        CompletionMalformed = "COMPLETION_MALFORMED",
        /// A completion status that names no status.
        CompletionStatusInvalid = "COMPLETION_STATUS_INVALID",
        /// The completion's checksum is not the one its fields make.
        CompletionChecksumMismatch = "COMPLETION_CHECKSUM_MISMATCH",
        /// The completion names an attempt the job never had.
        CompletionAttemptUnknown = "COMPLETION_ATTEMPT_UNKNOWN",
        /// The completion names another claim than its attempt's.
        CompletionClaimMismatch = "COMPLETION_CLAIM_MISMATCH",
        /// The completion names another organization than the claim's.
        CompletionOrganizationMismatch = "COMPLETION_ORGANIZATION_MISMATCH",
        /// The completion names another runner than the claim's.
        CompletionRunnerMismatch = "COMPLETION_RUNNER_MISMATCH",
        /// The completion's input hash is not the job's.
        CompletionInputHashMismatch = "COMPLETION_INPUT_HASH_MISMATCH",
        /// The completion's input hash is not the job's (the schema's guard).
        InputHashMismatch = "INPUT_HASH_MISMATCH",
        /// The completion's final stream checksum is not the last stored chunk's.
        CompletionStreamChecksumMismatch = "COMPLETION_STREAM_CHECKSUM_MISMATCH",
        /// The completion reports a status the job may not end with (`cancelled` unasked).
        CompletionStatusNotAllowed = "COMPLETION_STATUS_NOT_ALLOWED",
        /// Another completion was accepted for the job; this one is recorded, not applied.
        CompletionConflict = "COMPLETION_CONFLICT",
        /// The completion comes from an attempt that no longer holds the job; recorded, not
        /// applied.
        CompletionStale = "COMPLETION_STALE",

        // Evidence.
        /// The completion names more evidence ids than it may.
        EvidenceLimit = "EVIDENCE_LIMIT",
        /// An evidence row named is not in the completion's evaluation run.
        EvidenceNotInRun = "EVIDENCE_NOT_IN_RUN",
        /// An evidence row named is attached to another accepted completion.
        EvidenceAlreadyAttached = "EVIDENCE_ALREADY_ATTACHED",
        /// The evaluation run is in an accepted completion's custody; its evidence is final.
        EvidenceRunInCustody = "EVIDENCE_RUN_IN_CUSTODY",
        /// Evidence is attached only to an accepted completion (the schema's guard).
        EvidenceNeedsAcceptedCompletion = "EVIDENCE_NEEDS_ACCEPTED_COMPLETION",

        // Releases.
        /// An artifact of this kind with this name exists.
        ArtifactExists = "ARTIFACT_EXISTS",
        /// An executable target with this key exists.
        TargetExists = "TARGET_EXISTS",
        /// No such artifact version in the organization.
        VersionNotFound = "VERSION_NOT_FOUND",
        /// The version is not promoted to the environment asked for.
        VersionNotPromoted = "VERSION_NOT_PROMOTED",
    }
}

/// A code this crate does not know, as it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownErrorCode(pub String);

impl fmt::Display for UnknownErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not an error code this version knows", self.0)
    }
}

impl std::error::Error for UnknownErrorCode {}

impl FromStr for ErrorCode {
    type Err = UnknownErrorCode;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ErrorCode::parse(text).ok_or_else(|| UnknownErrorCode(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn every_code_round_trips_through_its_name_and_serde() {
        crate::wire_name::assert_round_trips(ErrorCode::ALL, ErrorCode::as_str, ErrorCode::parse);
        for &code in ErrorCode::ALL {
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(code));
        }
    }

    #[test]
    fn every_name_is_screaming_snake_case() {
        for code in ErrorCode::ALL {
            let name = code.as_str();
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && !name.starts_with('_')
                    && !name.ends_with('_')
                    && !name.contains("__"),
                "{name}"
            );
        }
    }

    #[test]
    fn a_code_this_version_does_not_know_is_none_or_an_error_never_another_code() {
        for text in ["STREAM_GAP", "claim_not_active", "CLAIM_NOT_ACTIVE ", ""] {
            assert_eq!(ErrorCode::parse(text), None, "{text:?}");
            assert_eq!(
                text.parse::<ErrorCode>(),
                Err(UnknownErrorCode(text.to_owned()))
            );
            assert!(serde_json::from_value::<ErrorCode>(text.into()).is_err());
        }
    }

    #[test]
    fn the_wire_name_is_static_text() {
        const NAME: &str = ErrorCode::ClaimNotActive.as_str();
        assert_eq!(NAME, "CLAIM_NOT_ACTIVE");
    }

    /// Codes the edge can answer that `docs/openapi.json` does not list under any route, each
    /// with where it comes from. Shrink this list by documenting a code, never grow it without
    /// a reason.
    #[cfg(not(target_arch = "wasm32"))]
    const UNDOCUMENTED: &[(ErrorCode, &str)] = &[
        (
            ErrorCode::MethodNotAllowed,
            "the router's 405 for any documented path; docs/API.md says so in prose",
        ),
        (
            ErrorCode::JobNotQueued,
            "guard table: a claim race the dispatcher settles",
        ),
        (
            ErrorCode::StreamChainBroken,
            "guard table: the object's own check comes first",
        ),
        (
            ErrorCode::InputHashMismatch,
            "guard table: the object's own check comes first",
        ),
        (
            ErrorCode::EvidenceNeedsAcceptedCompletion,
            "guard table: the object's own check comes first",
        ),
        (
            ErrorCode::SigningSecretEmpty,
            "EnvelopeError, answered as it is",
        ),
        (
            ErrorCode::JobSigningMalformed,
            "EnvelopeError, answered as it is",
        ),
        (
            ErrorCode::UnknownEnvironment,
            "EnvelopeError, answered as it is",
        ),
        (
            ErrorCode::RequirementsNotObject,
            "EnvelopeError, answered as it is",
        ),
        (
            ErrorCode::RequirementsNonIntegerNumber,
            "EnvelopeError, answered as it is",
        ),
        (
            ErrorCode::EnvelopeMalformed,
            "EnvelopeError, answered as it is",
        ),
        (
            ErrorCode::ServedTargetMalformed,
            "EnvelopeError, answered as it is",
        ),
        (
            ErrorCode::CompletionAttemptUnknown,
            "CompletionError, answered as it is",
        ),
        (
            ErrorCode::CompletionClaimMismatch,
            "CompletionError, answered as it is",
        ),
        (
            ErrorCode::CompletionRunnerMismatch,
            "CompletionError, answered as it is",
        ),
        (ErrorCode::UnknownJobState, "StateError, answered as it is"),
        (
            ErrorCode::UnknownRunnerState,
            "StateError, answered as it is",
        ),
        (
            ErrorCode::IllegalJobTransition,
            "StateError, answered as it is",
        ),
        (ErrorCode::ChallengeMalformed, "KeyError, answered as it is"),
        (
            ErrorCode::ChallengeSignatureMalformed,
            "KeyError, answered as it is",
        ),
        (
            ErrorCode::ChallengeSignatureInvalid,
            "KeyError, answered as it is",
        ),
        (
            ErrorCode::RunnerPendingApproval,
            "retired: older servers' answer, which runners still read",
        ),
        (
            ErrorCode::EnrollmentClosed,
            "retired (issue 41: a closed organization is answered as one that asks for a token is): older servers' answer, which runners still read",
        ),
    ];

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn every_documented_code_is_a_variant_and_every_variant_is_documented_or_named() {
        let documented = crate::documents::documented_error_codes();
        assert!(documented.len() > 50, "the walk found the document's codes");
        let unknown: Vec<&String> = documented
            .iter()
            .filter(|code| ErrorCode::parse(code).is_none())
            .collect();
        assert!(unknown.is_empty(), "documented, no variant: {unknown:?}");
        for &code in ErrorCode::ALL {
            let named = UNDOCUMENTED.iter().any(|(c, _)| *c == code);
            assert!(
                documented.contains(code.as_str()) != named,
                "{code}: {}",
                if named {
                    "documented now: take it off UNDOCUMENTED"
                } else {
                    "neither in docs/openapi.json nor in UNDOCUMENTED"
                }
            );
        }
    }
}
