//! Keys: the master secret, each runner's derived job-signing secret and key id, and the HMAC
//! and constant-time comparison every signature here rests on.

use core::fmt;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::{CredentialGeneration, EnvelopeError, KeyId, RunnerId};
use crate::stable_json::{sha256_hex, FieldError, Fields};

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
pub struct JobSigningSecret(pub(super) String);

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

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::envelope::fixtures::*;

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
    fn constant_time_eq_compares_contents_and_lengths() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
