//! The signed job envelope: identities, per-runner signing keys, signing and verification.
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

use core::fmt;
use std::collections::{BTreeSet, HashSet};
use std::hash::BuildHasher;

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::error_code::ErrorCode;
use crate::stable_json::{
    self, first_non_portable_number, sha256_hex, FieldError, Fields, Sha256Hex,
    MAX_PORTABLE_INTEGER,
};
use crate::time::{Timestamp, UnixMillis};

// ---------------------------------------------------------------------------------------------
// Identities
// ---------------------------------------------------------------------------------------------

/// Longest identifier accepted from the wire, in bytes: generous for UUIDs and client keys,
/// small enough that a request cannot make the server store or hash megabytes of "id".
pub const MAX_IDENTIFIER_BYTES: usize = 256;

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Accepts 1 to [`MAX_IDENTIFIER_BYTES`] bytes without control characters.
            pub fn parse(text: &str) -> Result<Self, InvalidId> {
                check_identifier(text, $what)?;
                Ok(Self(text.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:?})"), self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }

        impl From<$name> for Value {
            fn from(id: $name) -> Self {
                Value::String(id.0)
            }
        }
    };
}

identifier!(
    /// The organization every row and request is scoped to.
    OrganizationId,
    "organization id"
);
identifier!(
    /// A remote job.
    JobId,
    "job id"
);
identifier!(
    /// One claim: one runner's hold on one dispatch attempt of one job.
    ClaimId,
    "claim id"
);
identifier!(
    /// A registered runner.
    RunnerId,
    "runner id"
);

impl ClaimId {
    /// The claim of `job`'s dispatch `attempt`, as the server names it: `<job id>-a<attempt>`,
    /// so that a request naming only its claim (a heartbeat) reaches its job without a lookup.
    pub fn for_attempt(job: &JobId, attempt: DispatchAttempt) -> Result<Self, InvalidId> {
        Self::parse(&format!("{}-a{}", job.as_str(), attempt.get()))
    }

    /// The job and attempt a claim id of the server's shape ([`ClaimId::for_attempt`]) names;
    /// `None` for any other text.
    pub fn job_and_attempt(text: &str) -> Option<(&str, DispatchAttempt)> {
        let (job, attempt) = text.rsplit_once("-a")?;
        let attempt = attempt
            .parse::<u32>()
            .ok()
            .filter(|_| attempt.bytes().all(|b| b.is_ascii_digit()))
            .and_then(DispatchAttempt::new)?;
        (!job.is_empty()).then_some((job, attempt))
    }
}
identifier!(
    /// The enqueuer's key that makes a repeated enqueue return the original job.
    IdempotencyKey,
    "idempotency key"
);
identifier!(
    /// A release artifact.
    ArtifactId,
    "artifact id"
);
identifier!(
    /// What kind of artifact a job runs (`prompt`, `scorer`, `tool`, `workflow`, `agent`).
    /// Kept as text: the capability rules, not this envelope, decide which kinds exist.
    SubjectKind,
    "subject kind"
);
identifier!(
    /// The single-use value that makes each signed envelope distinct; runners refuse one they
    /// have seen.
    Nonce,
    "nonce"
);
identifier!(
    /// Names a runner's job-signing key without revealing it: `rk_` + 16 hex digits.
    KeyId,
    "key id"
);

impl Nonce {
    /// A nonce from 32 caller-provided random bytes (this crate has no random source).
    pub fn from_random(bytes: [u8; 32]) -> Self {
        Self(hex::encode(bytes))
    }
}

fn check_identifier(text: &str, what: &'static str) -> Result<(), InvalidId> {
    let problem = if text.is_empty() {
        "is empty"
    } else if text.len() > MAX_IDENTIFIER_BYTES {
        "is longer than 256 bytes"
    } else if text.chars().any(char::is_control) {
        "contains a control character"
    } else {
        return Ok(());
    };
    Err(InvalidId { what, problem })
}

/// Why a text is not an identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidId {
    pub what: &'static str,
    pub problem: &'static str,
}

impl InvalidId {
    pub fn code(&self) -> &'static str {
        "INVALID_IDENTIFIER"
    }

    pub fn http_status(&self) -> u16 {
        422
    }
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.what, self.problem)
    }
}

impl std::error::Error for InvalidId {}

/// A dispatch attempt: the first claim of a job is attempt 1, each redispatch adds one.
/// (0 means "never dispatched" in job records and never appears on the wire.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DispatchAttempt(u32);

impl DispatchAttempt {
    pub const FIRST: Self = Self(1);

    /// `None` for 0.
    pub fn new(attempt: u32) -> Option<Self> {
        (attempt > 0).then_some(Self(attempt))
    }

    pub fn get(self) -> u32 {
        self.0
    }

    pub fn next(self) -> Option<Self> {
        self.0.checked_add(1).map(Self)
    }

    pub(crate) fn read(fields: &Fields<'_>, name: &str) -> Result<Self, FieldError> {
        fields
            .uint(name)?
            .try_into()
            .ok()
            .and_then(Self::new)
            .ok_or_else(|| fields.error(name, "must be a dispatch attempt (1 or more)"))
    }
}

impl fmt::Display for DispatchAttempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<DispatchAttempt> for Value {
    fn from(attempt: DispatchAttempt) -> Self {
        Value::from(attempt.0)
    }
}

impl Serialize for DispatchAttempt {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u32(self.0)
    }
}

impl<'de> Deserialize<'de> for DispatchAttempt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::new(u32::deserialize(deserializer)?)
            .ok_or_else(|| serde::de::Error::custom("a dispatch attempt is 1 or more"))
    }
}

/// Which of a runner's credential generations a key belongs to. Rotation bumps it, which
/// changes the derived signing secret and key id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CredentialGeneration(pub u64);

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/// Shortest master secret the server will sign with (characters, as the seed counts them).
pub const MIN_MASTER_SECRET_CHARS: usize = 32;

/// `REMOTE_RUNNER_SIGNING_SECRET`: the server-only root of every runner's signing secret.
#[derive(Clone)]
pub struct MasterSigningSecret(String);

impl MasterSigningSecret {
    /// Refuses a secret shorter than [`MIN_MASTER_SECRET_CHARS`]; the session endpoint answers
    /// that with 503 rather than handing out keys derived from a guessable root.
    pub fn new(secret: String) -> Result<Self, EnvelopeError> {
        let characters = secret.chars().count();
        if characters < MIN_MASTER_SECRET_CHARS {
            return Err(EnvelopeError::MasterSecretTooShort { characters });
        }
        Ok(Self(secret))
    }

    /// The root key bytes, for the derivations in this crate only.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for MasterSigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterSigningSecret(<redacted>)")
    }
}

/// A runner's job-signing secret: the text both sides key HMAC-SHA256 with.
#[derive(Clone, PartialEq, Eq)]
pub struct JobSigningSecret(String);

impl JobSigningSecret {
    /// Wraps a secret received from the server. Any non-empty text is accepted: the SDK keys
    /// HMAC with whatever text it was given.
    pub fn new(secret: String) -> Result<Self, EnvelopeError> {
        if secret.is_empty() {
            return Err(EnvelopeError::EmptySigningSecret);
        }
        Ok(Self(secret))
    }

    /// The secret itself, for the session response and for keying HMAC. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The key id that names this secret.
    pub fn key_id(&self) -> KeyId {
        let digest = sha256_hex(self.0.as_bytes());
        KeyId(format!("rk_{}", &digest.as_str()[..16]))
    }
}

impl fmt::Debug for JobSigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobSigningSecret(<redacted>)")
    }
}

const DERIVATION_LABEL: &[u8] = b"edgerunner/job-signing/v1";

/// The job-signing secret of `runner` at `generation`.
///
/// The runner id is length-prefixed so that no two (runner, generation) pairs share a message.
pub fn derive_job_signing_secret(
    master: &MasterSigningSecret,
    runner: &RunnerId,
    generation: CredentialGeneration,
) -> JobSigningSecret {
    let runner = runner.as_str().as_bytes();
    let mut message = Vec::with_capacity(DERIVATION_LABEL.len() + 12 + runner.len());
    message.extend_from_slice(DERIVATION_LABEL);
    // An identifier is at most 256 bytes, so its length always fits.
    message.extend_from_slice(
        &u32::try_from(runner.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    message.extend_from_slice(runner);
    message.extend_from_slice(&generation.0.to_be_bytes());
    JobSigningSecret(hex::encode(hmac_sha256(master.0.as_bytes(), &message)))
}

/// The only signing algorithm the SDK accepts.
pub const ALGORITHM_HMAC_SHA256: &str = "hmac-sha256";

/// The session response's `jobSigning`: `{"algorithm": "hmac-sha256", "keyId", "secret"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSigning {
    pub key_id: KeyId,
    pub secret: JobSigningSecret,
}

impl JobSigning {
    /// The signing key of `runner` at `generation`, with its key id.
    pub fn derive(
        master: &MasterSigningSecret,
        runner: &RunnerId,
        generation: CredentialGeneration,
    ) -> Self {
        let secret = derive_job_signing_secret(master, runner, generation);
        Self {
            key_id: secret.key_id(),
            secret,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("algorithm".into(), ALGORITHM_HMAC_SHA256.into());
        map.insert("keyId".into(), self.key_id.clone().into());
        map.insert("secret".into(), self.secret.0.clone().into());
        Value::Object(map)
    }

    /// Reads the session response's `jobSigning` (what a Rust runner keeps for verification).
    pub fn from_json(value: &Value) -> Result<Self, EnvelopeError> {
        let malformed = |error: FieldError| EnvelopeError::MalformedJobSigning {
            reason: error.to_string(),
        };
        let fields = Fields::of(value, "jobSigning.").map_err(malformed)?;
        let algorithm = fields.str("algorithm").map_err(malformed)?;
        if algorithm != ALGORITHM_HMAC_SHA256 {
            return Err(EnvelopeError::MalformedJobSigning {
                reason: format!("unsupported algorithm {algorithm:?}"),
            });
        }
        Ok(Self {
            key_id: fields.parsed("keyId", KeyId::parse).map_err(malformed)?,
            secret: JobSigningSecret::new(fields.str("secret").map_err(malformed)?.to_owned())?,
        })
    }
}

pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    // HMAC is defined for keys of every length (RFC 2104 §2 pads or hashes them);
    // `new_from_slice` returns a `Result` only because it implements a trait shared with ciphers.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// Equality of two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

// ---------------------------------------------------------------------------------------------
// The envelope
// ---------------------------------------------------------------------------------------------

/// A release environment a version can be promoted to and a job can bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Environment {
    Dev,
    Staging,
    Prod,
}

impl Environment {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dev => "dev",
            Self::Staging => "staging",
            Self::Prod => "prod",
        }
    }

    /// Only the canonical names: the seed forbids resolving aliases such as `production`.
    pub fn parse(text: &str) -> Result<Self, EnvelopeError> {
        match text {
            "dev" => Ok(Self::Dev),
            "staging" => Ok(Self::Staging),
            "prod" => Ok(Self::Prod),
            _ => Err(EnvelopeError::UnknownEnvironment {
                environment: text.to_owned(),
            }),
        }
    }
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The exact immutable release a job runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub kind: SubjectKind,
    pub artifact_id: ArtifactId,
    /// A database id, at most [`MAX_PORTABLE_INTEGER`] so that every SDK reads it exactly.
    pub version_id: u64,
    pub content_hash: Sha256Hex,
    pub environment: Environment,
}

impl Subject {
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("kind".into(), self.kind.clone().into());
        map.insert("artifactId".into(), self.artifact_id.clone().into());
        map.insert("versionId".into(), self.version_id.into());
        map.insert("contentHash".into(), self.content_hash.clone().into());
        map.insert("environment".into(), self.environment.as_str().into());
        Value::Object(map)
    }

    fn read(value: &Value) -> Result<Self, FieldError> {
        let fields = Fields::of(value, "subject.")?;
        let version_id = fields.uint("versionId")?;
        if version_id > MAX_PORTABLE_INTEGER {
            return Err(fields.error("versionId", "is above 2^53 - 1"));
        }
        Ok(Self {
            kind: fields.parsed("kind", SubjectKind::parse)?,
            artifact_id: fields.parsed("artifactId", ArtifactId::parse)?,
            version_id,
            content_hash: fields.parsed("contentHash", Sha256Hex::parse)?,
            environment: fields.parsed("environment", Environment::parse)?,
        })
    }
}

/// The job's requirements as the envelope carries them: a JSON object whose every number is a
/// portable integer (see the module docs; `1.5` would make Python's re-hash differ).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvelopeRequirements(Map<String, Value>);

impl EnvelopeRequirements {
    pub fn new(requirements: Map<String, Value>) -> Result<Self, EnvelopeError> {
        let wrapped = Value::Object(requirements);
        if let Some(number) = first_non_portable_number(&wrapped) {
            return Err(EnvelopeError::NonPortableNumber {
                number: number.to_string(),
            });
        }
        match wrapped {
            Value::Object(requirements) => Ok(Self(requirements)),
            _ => Err(EnvelopeError::RequirementsNotObject),
        }
    }

    pub fn from_value(value: Value) -> Result<Self, EnvelopeError> {
        match value {
            Value::Object(map) => Self::new(map),
            _ => Err(EnvelopeError::RequirementsNotObject),
        }
    }

    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }
}

/// What a runner is told to run, signed by the server: `claim` → `signedJob.envelope`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnvelope {
    pub organization_id: OrganizationId,
    pub job_id: JobId,
    pub claim_id: ClaimId,
    pub runner_id: RunnerId,
    pub dispatch_attempt: DispatchAttempt,
    pub idempotency_key: IdempotencyKey,
    pub subject: Subject,
    pub input_hash: Sha256Hex,
    pub requirements: EnvelopeRequirements,
    pub issued_at: Timestamp,
    pub expires_at: Timestamp,
    pub nonce: Nonce,
}

impl JobEnvelope {
    /// The wire form (camelCase), which is also what `payloadHash` covers.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("organizationId".into(), self.organization_id.clone().into());
        map.insert("jobId".into(), self.job_id.clone().into());
        map.insert("claimId".into(), self.claim_id.clone().into());
        map.insert("runnerId".into(), self.runner_id.clone().into());
        map.insert("dispatchAttempt".into(), self.dispatch_attempt.into());
        map.insert("idempotencyKey".into(), self.idempotency_key.clone().into());
        map.insert("subject".into(), self.subject.to_json());
        map.insert("inputHash".into(), self.input_hash.clone().into());
        map.insert(
            "requirements".into(),
            Value::Object(self.requirements.0.clone()),
        );
        map.insert("issuedAt".into(), self.issued_at.as_str().into());
        map.insert("expiresAt".into(), self.expires_at.as_str().into());
        map.insert("nonce".into(), self.nonce.clone().into());
        Value::Object(map)
    }

    /// Reads an envelope as received. Unknown fields are ignored here; the payload hash, computed
    /// over the received value, covers them.
    pub fn from_json(value: &Value) -> Result<Self, EnvelopeError> {
        Self::read(value).map_err(|error| EnvelopeError::MalformedEnvelope {
            reason: error.to_string(),
        })
    }

    fn read(value: &Value) -> Result<Self, FieldError> {
        let fields = Fields::of(value, "envelope.")?;
        let requirements = fields.value("requirements")?.clone();
        Ok(Self {
            organization_id: fields.parsed("organizationId", OrganizationId::parse)?,
            job_id: fields.parsed("jobId", JobId::parse)?,
            claim_id: fields.parsed("claimId", ClaimId::parse)?,
            runner_id: fields.parsed("runnerId", RunnerId::parse)?,
            dispatch_attempt: DispatchAttempt::read(&fields, "dispatchAttempt")?,
            idempotency_key: fields.parsed("idempotencyKey", IdempotencyKey::parse)?,
            subject: Subject::read(fields.value("subject")?)?,
            input_hash: fields.parsed("inputHash", Sha256Hex::parse)?,
            requirements: EnvelopeRequirements::from_value(requirements)
                .map_err(|error| fields.error("requirements", &format!("is invalid: {error}")))?,
            issued_at: fields.parsed("issuedAt", Timestamp::parse)?,
            expires_at: fields.parsed("expiresAt", Timestamp::parse)?,
            nonce: fields.parsed("nonce", Nonce::parse)?,
        })
    }

    /// `H(envelope)`.
    pub fn payload_hash(&self) -> Sha256Hex {
        stable_json::hash(&self.to_json())
    }
}

impl Serialize for JobEnvelope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

/// `claim` → `signedJob`: the envelope with its hash and HMAC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedJob {
    pub key_id: KeyId,
    pub envelope: JobEnvelope,
    pub payload_hash: Sha256Hex,
    /// Lowercase hex HMAC-SHA256.
    pub signature: String,
}

impl SignedJob {
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("algorithm".into(), ALGORITHM_HMAC_SHA256.into());
        map.insert("keyId".into(), self.key_id.clone().into());
        map.insert("envelope".into(), self.envelope.to_json());
        map.insert("payloadHash".into(), self.payload_hash.clone().into());
        map.insert("signature".into(), self.signature.clone().into());
        Value::Object(map)
    }
}

impl Serialize for SignedJob {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

/// Signs `envelope` for the runner holding `secret`, whose key id is `key_id`.
pub fn sign(envelope: &JobEnvelope, secret: &JobSigningSecret, key_id: &KeyId) -> SignedJob {
    let payload_hash = envelope.payload_hash();
    SignedJob {
        key_id: key_id.clone(),
        envelope: envelope.clone(),
        signature: signature_hex(secret, &payload_hash),
        payload_hash,
    }
}

fn signature_hex(secret: &JobSigningSecret, payload_hash: &Sha256Hex) -> String {
    hex::encode(hmac_sha256(
        secret.0.as_bytes(),
        payload_hash.as_str().as_bytes(),
    ))
}

// ---------------------------------------------------------------------------------------------
// Verification (Rust runners)
// ---------------------------------------------------------------------------------------------

/// How far ahead of the runner's clock `issuedAt` may be, as the SDK allows.
pub const CLOCK_SKEW_MILLIS: i64 = 30_000;

/// A target version a runner serves: `{"versionId": int, "contentHash"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServedTarget {
    pub version_id: u64,
    pub content_hash: Sha256Hex,
}

impl ServedTarget {
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("versionId".into(), self.version_id.into());
        map.insert("contentHash".into(), self.content_hash.clone().into());
        Value::Object(map)
    }

    pub fn from_json(value: &Value) -> Result<Self, EnvelopeError> {
        let read = || -> Result<Self, FieldError> {
            let fields = Fields::of(value, "servedTargets[].")?;
            Ok(Self {
                version_id: fields.uint("versionId")?,
                content_hash: fields.parsed("contentHash", Sha256Hex::parse)?,
            })
        };
        read().map_err(|error| EnvelopeError::MalformedServedTarget {
            reason: error.to_string(),
        })
    }
}

/// The nonces a runner has already accepted. Implemented for `HashSet` and `BTreeSet`; a
/// runner that survives restarts may back it with storage.
pub trait NonceStore {
    /// Records `nonce`; `false` when it was already recorded.
    fn remember(&mut self, nonce: &Nonce) -> bool;
}

impl<S: BuildHasher> NonceStore for HashSet<Nonce, S> {
    fn remember(&mut self, nonce: &Nonce) -> bool {
        self.insert(nonce.clone())
    }
}

impl NonceStore for BTreeSet<Nonce> {
    fn remember(&mut self, nonce: &Nonce) -> bool {
        self.insert(nonce.clone())
    }
}

/// What the runner knows from its session, against which an assignment is checked.
#[derive(Clone, Debug)]
pub struct SessionBinding {
    /// `claims.organizationId` of the session.
    pub organization_id: OrganizationId,
    /// `jobSigning` of the session.
    pub signing: JobSigning,
    /// The targets this runner serves; empty means "any", exactly as the SDK reads an empty
    /// list.
    pub served_targets: Vec<ServedTarget>,
}

/// A claim response that passed every check of [`verify_assignment`]. Only that function makes
/// one, so code that takes it cannot run an unverified job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedAssignment {
    claim_id: ClaimId,
    envelope: JobEnvelope,
    payload_hash: Sha256Hex,
}

impl VerifiedAssignment {
    pub fn claim_id(&self) -> &ClaimId {
        &self.claim_id
    }

    pub fn envelope(&self) -> &JobEnvelope {
        &self.envelope
    }

    pub fn payload_hash(&self) -> &Sha256Hex {
        &self.payload_hash
    }
}

/// Verifies a claim response (`{"claim": {...}, "signedJob": {...}}`) as the SDK's
/// `_verify_assignment` does, and records its nonce.
///
/// Accepts exactly what the SDK accepts, plus one check it lacks (`claim.id` must equal the
/// signed `claimId`, since a runner reports on `claim.id`). The order differs: the signature is
/// checked before any field is trusted, and the nonce last, so that a refused assignment never
/// consumes its nonce.
pub fn verify_assignment(
    assignment: &Value,
    session: &SessionBinding,
    now: UnixMillis,
    nonces: &mut dyn NonceStore,
) -> Result<VerifiedAssignment, AssignmentError> {
    let malformed = |error: FieldError| AssignmentError::Malformed {
        reason: error.to_string(),
    };
    let top = Fields::of(assignment, "").map_err(malformed)?;
    let signed =
        Fields::of(top.value("signedJob").map_err(malformed)?, "signedJob.").map_err(malformed)?;

    let algorithm = signed.str("algorithm").map_err(malformed)?;
    if algorithm != ALGORITHM_HMAC_SHA256 {
        return Err(AssignmentError::UnsupportedAlgorithm {
            algorithm: algorithm.to_owned(),
        });
    }
    if signed.str("keyId").map_err(malformed)? != session.signing.key_id.as_str() {
        return Err(AssignmentError::KeyIdMismatch);
    }
    let raw_envelope = signed.value("envelope").map_err(malformed)?;
    let payload_hash = stable_json::hash(raw_envelope);
    if signed.str("payloadHash").map_err(malformed)? != payload_hash.as_str() {
        return Err(AssignmentError::PayloadHashMismatch);
    }
    let expected = signature_hex(&session.signing.secret, &payload_hash);
    let received = signed.str("signature").map_err(malformed)?;
    if !constant_time_eq(expected.as_bytes(), received.as_bytes()) {
        return Err(AssignmentError::BadSignature);
    }

    let envelope = JobEnvelope::read(raw_envelope).map_err(malformed)?;
    let claim = Fields::of(top.value("claim").map_err(malformed)?, "claim.").map_err(malformed)?;
    let claim_id = claim.parsed("id", ClaimId::parse).map_err(malformed)?;
    let claim_job = claim.parsed("jobId", JobId::parse).map_err(malformed)?;
    let claim_attempt = DispatchAttempt::read(&claim, "dispatchAttempt").map_err(malformed)?;

    if envelope.organization_id != session.organization_id {
        return Err(AssignmentError::OrganizationMismatch);
    }
    if claim_job != envelope.job_id {
        return Err(AssignmentError::ClaimJobMismatch);
    }
    if claim_attempt != envelope.dispatch_attempt {
        return Err(AssignmentError::ClaimAttemptMismatch);
    }
    if claim_id != envelope.claim_id {
        return Err(AssignmentError::ClaimIdMismatch);
    }
    let served = session.served_targets.is_empty()
        || session.served_targets.iter().any(|target| {
            target.version_id == envelope.subject.version_id
                && target.content_hash == envelope.subject.content_hash
        });
    if !served {
        return Err(AssignmentError::TargetNotServed {
            job_id: envelope.job_id.clone(),
            version_id: envelope.subject.version_id,
        });
    }
    let earliest = envelope.issued_at.instant().get() - CLOCK_SKEW_MILLIS;
    if now.get() < earliest {
        return Err(AssignmentError::NotYetValid);
    }
    if now >= envelope.expires_at.instant() {
        return Err(AssignmentError::Expired);
    }
    if !nonces.remember(&envelope.nonce) {
        return Err(AssignmentError::NonceReplayed);
    }
    Ok(VerifiedAssignment {
        claim_id,
        envelope,
        payload_hash,
    })
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

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

#[cfg(test)]
pub(crate) mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::testkit::{assert_refusal, check};

    pub(crate) fn id<T>(parse: fn(&str) -> Result<T, InvalidId>, text: &str) -> T {
        parse(text).expect("test id is valid")
    }

    fn master() -> MasterSigningSecret {
        MasterSigningSecret::new("m".repeat(32)).expect("long enough")
    }

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).expect("test timestamp")
    }

    #[test]
    fn a_claim_id_names_its_job_and_attempt_and_nothing_else_does() {
        let job = id(JobId::parse, "job_6c-a1");
        let third = DispatchAttempt::new(3).expect("3");
        let claim = ClaimId::for_attempt(&job, third).expect("a claim id");
        assert_eq!(claim.as_str(), "job_6c-a1-a3");
        assert_eq!(
            ClaimId::job_and_attempt(claim.as_str()),
            Some(("job_6c-a1", third))
        );
        for other in [
            "job_1",
            "job_1-a",
            "-a1",
            "job_1-a0",
            "job_1-a+1",
            "job_1-a1x",
            "job_1-a99999999999",
        ] {
            assert_eq!(ClaimId::job_and_attempt(other), None, "{other}");
        }
    }

    fn envelope() -> JobEnvelope {
        JobEnvelope {
            organization_id: id(OrganizationId::parse, "org_1"),
            job_id: id(JobId::parse, "job_1"),
            claim_id: id(ClaimId::parse, "claim_1"),
            runner_id: id(RunnerId::parse, "runner_1"),
            dispatch_attempt: DispatchAttempt::FIRST,
            idempotency_key: id(IdempotencyKey::parse, "idem-1"),
            subject: Subject {
                kind: id(SubjectKind::parse, "scorer"),
                artifact_id: id(ArtifactId::parse, "art_1"),
                version_id: 7,
                content_hash: stable_json::sha256_hex(b"content"),
                environment: Environment::Prod,
            },
            input_hash: stable_json::hash(&json!({"question": "2+2"})),
            requirements: EnvelopeRequirements::from_value(json!({
                "executionKind": "scorer",
                "runtime": "python3.12",
                "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1048576},
                "network": {"mode": "deny_all"},
                "streaming": true,
                "cancellation": true,
            }))
            .expect("integer-only requirements"),
            issued_at: at("2026-11-30T01:11:32.123Z"),
            expires_at: at("2026-11-30T01:16:32.123Z"),
            nonce: Nonce::from_random([7; 32]),
        }
    }

    fn session() -> SessionBinding {
        SessionBinding {
            organization_id: id(OrganizationId::parse, "org_1"),
            signing: JobSigning::derive(
                &master(),
                &id(RunnerId::parse, "runner_1"),
                CredentialGeneration(1),
            ),
            served_targets: Vec::new(),
        }
    }

    fn assignment(signed: &SignedJob) -> Value {
        json!({
            "claim": {
                "id": signed.envelope.claim_id.as_str(),
                "jobId": signed.envelope.job_id.as_str(),
                "dispatchAttempt": signed.envelope.dispatch_attempt.get(),
                "leaseExpiresAt": "2026-11-30T01:12:32.123Z",
            },
            "signedJob": signed.to_json(),
        })
    }

    fn now() -> UnixMillis {
        UnixMillis::parse_rfc3339("2026-11-30T01:11:33Z").expect("test instant")
    }

    fn signed_assignment() -> (SessionBinding, Value) {
        let session = session();
        let signed = sign(
            &envelope(),
            &session.signing.secret,
            &session.signing.key_id,
        );
        (session, assignment(&signed))
    }

    fn verify(
        session: &SessionBinding,
        value: &Value,
    ) -> Result<VerifiedAssignment, AssignmentError> {
        verify_assignment(value, session, now(), &mut HashSet::new())
    }

    /// Re-signs the (edited) envelope of `value` so that only the edit is wrong.
    fn resign(session: &SessionBinding, value: &mut Value) {
        let envelope = value["signedJob"]["envelope"].clone();
        let payload_hash = stable_json::hash(&envelope);
        value["signedJob"]["signature"] =
            signature_hex(&session.signing.secret, &payload_hash).into();
        value["signedJob"]["payloadHash"] = payload_hash.into();
    }

    #[test]
    fn identifiers_refuse_empty_long_and_control_text() {
        assert!(JobId::parse("job_1").is_ok());
        assert!(JobId::parse("ジョブ").is_ok());
        assert_eq!(
            JobId::parse(""),
            Err(InvalidId {
                what: "job id",
                problem: "is empty"
            })
        );
        assert!(JobId::parse(&"x".repeat(257)).is_err());
        assert!(JobId::parse("a\nb").is_err());
        assert!(JobId::parse("a\u{7f}").is_err());
        assert_eq!(DispatchAttempt::new(0), None);
        assert_eq!(DispatchAttempt::FIRST.next(), DispatchAttempt::new(2));
    }

    #[test]
    fn master_secret_must_have_32_characters() {
        assert_eq!(
            MasterSigningSecret::new("é".repeat(31)).map(|_| ()),
            Err(EnvelopeError::MasterSecretTooShort { characters: 31 })
        );
        assert_eq!(
            EnvelopeError::MasterSecretTooShort { characters: 31 }.http_status(),
            503
        );
        assert!(MasterSigningSecret::new("é".repeat(32)).is_ok());
        assert!(!format!("{:?}", master()).contains("mmm"));
    }

    #[test]
    fn derived_secrets_differ_by_runner_generation_and_master() {
        let runner = id(RunnerId::parse, "runner_1");
        let base = JobSigning::derive(&master(), &runner, CredentialGeneration(1));
        assert_eq!(base.secret.expose().len(), 64);
        assert!(base.key_id.as_str().starts_with("rk_"));
        assert_eq!(base.key_id.as_str().len(), 19);
        assert_eq!(
            base,
            JobSigning::derive(&master(), &runner, CredentialGeneration(1))
        );
        let rotated = JobSigning::derive(&master(), &runner, CredentialGeneration(2));
        assert_ne!(rotated.secret, base.secret);
        assert_ne!(rotated.key_id, base.key_id);
        let other = JobSigning::derive(
            &master(),
            &id(RunnerId::parse, "runner_2"),
            CredentialGeneration(1),
        );
        assert_ne!(other.secret, base.secret);
        let other_master = MasterSigningSecret::new("n".repeat(32)).expect("long enough");
        assert_ne!(
            JobSigning::derive(&other_master, &runner, CredentialGeneration(1)).secret,
            base.secret
        );
        assert!(!format!("{base:?}").contains(base.secret.expose()));
    }

    #[test]
    fn derivation_is_pinned() {
        // Python: hmac.new(b"m" * 32, b"edgerunner/job-signing/v1" + (8).to_bytes(4, "big")
        //   + b"runner_1" + (1).to_bytes(8, "big"), hashlib.sha256).hexdigest()
        let signing = JobSigning::derive(
            &master(),
            &id(RunnerId::parse, "runner_1"),
            CredentialGeneration(1),
        );
        assert_eq!(
            signing.secret.expose(),
            "0aaff7a8d43e6df25de12175487b4ee2fe36b00db645b80d8739fafb466b69b6"
        );
        assert_eq!(signing.key_id.as_str(), "rk_5da2d4839d29fa68");
    }

    #[test]
    fn job_signing_round_trips_through_the_session_response() {
        let signing = session().signing;
        assert_eq!(
            JobSigning::from_json(&signing.to_json()),
            Ok(signing.clone())
        );
        let mut wrong = signing.to_json();
        wrong["algorithm"] = "hmac-sha512".into();
        assert!(matches!(
            JobSigning::from_json(&wrong),
            Err(EnvelopeError::MalformedJobSigning { .. })
        ));
    }

    #[test]
    fn signature_matches_the_python_sdk() {
        // hmac.new(secret.encode(), payload_hash.encode(), hashlib.sha256).hexdigest(), with
        // payload_hash = hash_remote_runner_payload(envelope) from evalgate-sdk 3.15.0.
        let session = session();
        let signed = sign(
            &envelope(),
            &session.signing.secret,
            &session.signing.key_id,
        );
        assert_eq!(
            signed.payload_hash.as_str(),
            "0e057dfb2cd592821a6770037673e17d9920909ed80eac23d61287d7290ec26d"
        );
        assert_eq!(
            signed.signature,
            "ecda093b8c64a4352bb250289a7e0f5ca30ef1910de756f528d59336f0d71ed3"
        );
    }

    #[test]
    fn envelope_round_trips_through_json() {
        let original = envelope();
        let json = original.to_json();
        assert_eq!(JobEnvelope::from_json(&json), Ok(original.clone()));
        assert_eq!(
            serde_json::to_value(&original).expect("serializes"),
            json,
            "Serialize and to_json agree"
        );
        let keys: Vec<&str> = json
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        for key in [
            "organizationId",
            "jobId",
            "claimId",
            "runnerId",
            "dispatchAttempt",
            "idempotencyKey",
            "subject",
            "inputHash",
            "requirements",
            "issuedAt",
            "expiresAt",
            "nonce",
        ] {
            assert!(keys.contains(&key), "{key}");
        }
    }

    #[test]
    fn requirements_refuse_numbers_sdks_would_reprint() {
        for number in ["1.5", "1.0", "1e+3", "-0", "9007199254740992"] {
            let value: Value =
                serde_json::from_str(&format!("{{\"limits\":{{\"cpuSeconds\":{number}}}}}"))
                    .expect("test JSON");
            assert_eq!(
                EnvelopeRequirements::from_value(value),
                Err(EnvelopeError::NonPortableNumber {
                    number: number.to_owned()
                })
            );
        }
        assert_eq!(
            EnvelopeRequirements::from_value(json!([1])),
            Err(EnvelopeError::RequirementsNotObject)
        );
    }

    #[test]
    fn a_signed_envelope_verifies_once() {
        let (session, value) = signed_assignment();
        let mut nonces = HashSet::new();
        let verified = verify_assignment(&value, &session, now(), &mut nonces).expect("verifies");
        assert_eq!(verified.envelope(), &envelope());
        assert_eq!(verified.claim_id().as_str(), "claim_1");
        assert_eq!(verified.payload_hash(), &envelope().payload_hash());
        assert_eq!(
            verify_assignment(&value, &session, now(), &mut nonces),
            Err(AssignmentError::NonceReplayed)
        );
    }

    #[test]
    fn a_refused_assignment_does_not_consume_its_nonce() {
        let (session, value) = signed_assignment();
        let mut nonces = BTreeSet::new();
        let late = UnixMillis::parse_rfc3339("2026-11-30T01:16:32.123Z").expect("instant");
        assert_eq!(
            verify_assignment(&value, &session, late, &mut nonces),
            Err(AssignmentError::Expired)
        );
        assert!(verify_assignment(&value, &session, now(), &mut nonces).is_ok());
    }

    #[test]
    fn validity_window_allows_30_seconds_of_skew_and_ends_at_expiry() {
        let (session, value) = signed_assignment();
        let check = |text: &str| {
            let now = UnixMillis::parse_rfc3339(text).expect("instant");
            verify_assignment(&value, &session, now, &mut HashSet::new()).map(|_| ())
        };
        assert_eq!(check("2026-11-30T01:11:02.123Z"), Ok(()));
        assert_eq!(
            check("2026-11-30T01:11:02.122Z"),
            Err(AssignmentError::NotYetValid)
        );
        assert_eq!(check("2026-11-30T01:16:32.122Z"), Ok(()));
        assert_eq!(
            check("2026-11-30T01:16:32.123Z"),
            Err(AssignmentError::Expired)
        );
    }

    #[test]
    fn every_sdk_check_has_its_own_error() {
        let (session, good) = signed_assignment();
        type Edit = fn(&SessionBinding, &mut Value);
        let cases: Vec<(Edit, AssignmentError)> = vec![
            (
                |_, v| v["signedJob"]["algorithm"] = "hmac-sha512".into(),
                AssignmentError::UnsupportedAlgorithm {
                    algorithm: "hmac-sha512".into(),
                },
            ),
            (
                |_, v| v["signedJob"]["keyId"] = "rk_0000000000000000".into(),
                AssignmentError::KeyIdMismatch,
            ),
            (
                |_, v| v["signedJob"]["envelope"]["nonce"] = "other".into(),
                AssignmentError::PayloadHashMismatch,
            ),
            (
                |_, v| {
                    v["signedJob"]["envelope"]["nonce"] = "other".into();
                    let hash = stable_json::hash(&v["signedJob"]["envelope"]);
                    v["signedJob"]["payloadHash"] = hash.into();
                },
                AssignmentError::BadSignature,
            ),
            (
                |s, v| {
                    v["signedJob"]["envelope"]["organizationId"] = "org_2".into();
                    resign(s, v);
                },
                AssignmentError::OrganizationMismatch,
            ),
            (
                |_, v| v["claim"]["jobId"] = "job_2".into(),
                AssignmentError::ClaimJobMismatch,
            ),
            (
                |_, v| v["claim"]["dispatchAttempt"] = 2.into(),
                AssignmentError::ClaimAttemptMismatch,
            ),
            (
                |_, v| v["claim"]["id"] = "claim_2".into(),
                AssignmentError::ClaimIdMismatch,
            ),
            (
                |s, v| {
                    v["signedJob"]["envelope"]["issuedAt"] = "2026-11-30T01:12:04Z".into();
                    resign(s, v);
                },
                AssignmentError::NotYetValid,
            ),
            (
                |s, v| {
                    v["signedJob"]["envelope"]["expiresAt"] = "2026-11-30T01:11:33Z".into();
                    resign(s, v);
                },
                AssignmentError::Expired,
            ),
            (
                |s, v| {
                    v["signedJob"]["envelope"]["dispatchAttempt"] = json!(1.0);
                    resign(s, v);
                },
                AssignmentError::Malformed {
                    reason: "`envelope.dispatchAttempt` must be a non-negative integer written as plain digits".into(),
                },
            ),
            (
                |_, v| {
                    v["signedJob"]
                        .as_object_mut()
                        .map(|m| m.remove("signature"));
                },
                AssignmentError::Malformed {
                    reason: "`signedJob.signature` is missing".into(),
                },
            ),
        ];
        for (edit, expected) in cases {
            let mut value = good.clone();
            edit(&session, &mut value);
            assert_eq!(
                verify(&session, &value),
                Err(expected.clone()),
                "{expected}"
            );
        }
    }

    #[test]
    fn served_targets_restrict_what_is_accepted() {
        let (mut session, value) = signed_assignment();
        let content_hash = envelope().subject.content_hash;
        session.served_targets = vec![ServedTarget {
            version_id: 8,
            content_hash: content_hash.clone(),
        }];
        assert_eq!(
            verify(&session, &value).map(|_| ()),
            Err(AssignmentError::TargetNotServed {
                job_id: id(JobId::parse, "job_1"),
                version_id: 7
            })
        );
        session.served_targets.push(ServedTarget {
            version_id: 7,
            content_hash,
        });
        assert!(verify(&session, &value).is_ok());
        let target = &session.served_targets[1];
        assert_eq!(
            ServedTarget::from_json(&target.to_json()).as_ref(),
            Ok(target)
        );
    }

    #[test]
    fn any_flipped_bit_of_the_signature_or_hash_is_refused() {
        let (session, good) = signed_assignment();
        check(300, |rng| {
            let field = *rng.pick(&["signature", "payloadHash"]);
            let mut value = good.clone();
            let text = value["signedJob"][field]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let mut bytes = text.into_bytes();
            let index = rng.below(bytes.len() as u64) as usize;
            bytes[index] ^= 1 << rng.below(7);
            value["signedJob"][field] = String::from_utf8_lossy(&bytes).into_owned().into();
            let expected = if field == "signature" {
                AssignmentError::BadSignature
            } else {
                AssignmentError::PayloadHashMismatch
            };
            assert_eq!(verify(&session, &value).map(|_| ()), Err(expected));
        });
    }

    #[test]
    fn any_edit_of_the_envelope_breaks_the_hash() {
        let (session, good) = signed_assignment();
        check(300, |rng| {
            let mut value = good.clone();
            let key = rng.pick(&[
                "organizationId",
                "jobId",
                "claimId",
                "runnerId",
                "idempotencyKey",
                "inputHash",
                "issuedAt",
                "expiresAt",
                "nonce",
            ]);
            let edited = format!("{}{}", rng.string(3), "x");
            value["signedJob"]["envelope"][*key] = edited.into();
            assert_eq!(
                verify(&session, &value).map(|_| ()),
                Err(AssignmentError::PayloadHashMismatch)
            );
        });
    }

    /// [`resign`] where the shape allows it: a mutation may have removed what it writes to.
    fn resigned(session: &SessionBinding, mut value: Value) -> Value {
        let envelope = value.pointer("/signedJob/envelope").cloned();
        if let (Some(envelope), Some(Value::Object(signed))) =
            (envelope, value.get_mut("signedJob"))
        {
            let payload_hash = stable_json::hash(&envelope);
            let signature = signature_hex(&session.signing.secret, &payload_hash);
            signed.insert("signature".into(), signature.into());
            signed.insert("payloadHash".into(), payload_hash.into());
        }
        value
    }

    #[test]
    fn arbitrary_claim_responses_verify_once_or_are_typed_refusals() {
        let (session, good) = signed_assignment();
        let (mut accepted, mut refused) = (0, 0);
        check(300, |rng| {
            let value = match rng.below(4) {
                0 => rng.json(3),
                1 => rng.mutate(&good),
                _ => resigned(&session, rng.mutate(&good)),
            };
            let mut nonces = HashSet::new();
            match verify_assignment(&value, &session, now(), &mut nonces) {
                Ok(verified) => {
                    accepted += 1;
                    let raw = &value["signedJob"]["envelope"];
                    assert_eq!(verified.payload_hash(), &stable_json::hash(raw));
                    let envelope = verified.envelope();
                    assert_eq!(JobEnvelope::from_json(raw).as_ref(), Ok(envelope));
                    assert_eq!(
                        JobEnvelope::from_json(&envelope.to_json()).as_ref(),
                        Ok(envelope)
                    );
                    assert_eq!(verified.claim_id(), &envelope.claim_id);
                    assert_eq!(
                        verify_assignment(&value, &session, now(), &mut nonces),
                        Err(AssignmentError::NonceReplayed)
                    );
                }
                Err(error) => {
                    refused += 1;
                    assert_refusal(error.code(), error.http_status(), &error);
                    assert!(nonces.is_empty(), "a refusal consumed its nonce: {error:?}");
                }
            }
        });
        assert!(
            accepted > 0 && refused > 0,
            "{accepted} accepted, {refused} refused"
        );
    }

    #[test]
    fn arbitrary_envelopes_and_session_parts_print_back_or_are_typed_refusals() {
        let good = envelope().to_json();
        let signing = session().signing.to_json();
        let target = ServedTarget {
            version_id: 7,
            content_hash: stable_json::sha256_hex(b"content"),
        }
        .to_json();
        let mut accepted = 0;
        check(300, |rng| {
            let arbitrary = rng.chance(1, 4);
            let mut pick = |document: &Value| {
                if arbitrary {
                    rng.json(3)
                } else {
                    rng.mutate(document)
                }
            };
            let (envelope, signing, target) = (pick(&good), pick(&signing), pick(&target));
            let refused = |error: EnvelopeError| {
                assert_refusal(error.code(), error.http_status(), &error);
            };
            match JobEnvelope::from_json(&envelope) {
                Ok(parsed) => {
                    accepted += 1;
                    assert_eq!(
                        JobEnvelope::from_json(&parsed.to_json()).as_ref(),
                        Ok(&parsed)
                    );
                    assert_eq!(
                        stable_json::first_non_portable_number(&parsed.to_json()),
                        None
                    );
                }
                Err(error) => refused(error),
            }
            match JobSigning::from_json(&signing) {
                Ok(parsed) => assert_eq!(JobSigning::from_json(&parsed.to_json()), Ok(parsed)),
                Err(error) => refused(error),
            }
            match ServedTarget::from_json(&target) {
                Ok(parsed) => assert_eq!(ServedTarget::from_json(&parsed.to_json()), Ok(parsed)),
                Err(error) => refused(error),
            }
            if let Err(error) = EnvelopeRequirements::from_value(rng.json(2)) {
                refused(error);
            }
        });
        assert!(accepted > 0);
    }

    #[test]
    fn identifiers_are_what_they_read_or_typed_refusals() {
        check(500, |rng| {
            let text = if rng.chance(1, 2) {
                rng.json_string()
            } else {
                rng.edit_text(&"x".repeat(MAX_IDENTIFIER_BYTES))
            };
            let read = [
                OrganizationId::parse(&text).map(|id| id.to_string()),
                JobId::parse(&text).map(|id| id.to_string()),
                ClaimId::parse(&text).map(|id| id.to_string()),
                RunnerId::parse(&text).map(|id| id.to_string()),
                IdempotencyKey::parse(&text).map(|id| id.to_string()),
                ArtifactId::parse(&text).map(|id| id.to_string()),
                SubjectKind::parse(&text).map(|id| id.to_string()),
                Nonce::parse(&text).map(|id| id.to_string()),
                KeyId::parse(&text).map(|id| id.to_string()),
            ];
            for result in read {
                match result {
                    Ok(read) => {
                        assert_eq!(read, text);
                        assert!(!text.is_empty() && text.len() <= MAX_IDENTIFIER_BYTES);
                    }
                    Err(error) => assert_refusal(error.code(), error.http_status(), &error),
                }
            }
            match Environment::parse(&text) {
                Ok(environment) => assert_eq!(environment.as_str(), text),
                Err(error) => assert_refusal(error.code(), error.http_status(), &error),
            }
        });
    }

    #[test]
    fn constant_time_eq_compares_contents_and_lengths() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
