//! The job envelope itself (subject, requirements, validity window, nonce) and its signature.

use core::fmt;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::{
    hmac_sha256, ArtifactId, ClaimId, DispatchAttempt, EnvelopeError, IdempotencyKey, JobId,
    JobSigningSecret, KeyId, Nonce, OrganizationId, RunnerId, SubjectKind, ALGORITHM_HMAC_SHA256,
};
use crate::stable_json::{
    self, first_non_portable_number, FieldError, Fields, Sha256Hex, MAX_PORTABLE_INTEGER,
};
use crate::time::Timestamp;

/// A release environment a version can be promoted to and a job can bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Environment {
    Dev,
    Staging,
    Prod,
}

impl Environment {
    /// Every environment, in promotion order.
    pub const ALL: [Environment; 3] = [Self::Dev, Self::Staging, Self::Prod];

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

    pub(super) fn read(value: &Value) -> Result<Self, FieldError> {
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

pub(super) fn signature_hex(secret: &JobSigningSecret, payload_hash: &Sha256Hex) -> String {
    hex::encode(hmac_sha256(
        secret.0.as_bytes(),
        payload_hash.as_str().as_bytes(),
    ))
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::envelope::fixtures::*;
    use crate::envelope::{JobSigning, ServedTarget};
    use crate::testkit::{assert_refusal, check};

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
}
