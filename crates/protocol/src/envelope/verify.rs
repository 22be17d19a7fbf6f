//! A Rust runner's verification of a claim answer, check by check as the SDK does it, before
//! anything runs; and the nonces it has seen.

use std::collections::{BTreeSet, HashSet};
use std::hash::BuildHasher;

use serde_json::{Map, Value};

use super::signed_job::signature_hex;
use super::{
    constant_time_eq, AssignmentError, ClaimId, DispatchAttempt, EnvelopeError, JobEnvelope, JobId,
    JobSigning, Nonce, OrganizationId, ALGORITHM_HMAC_SHA256,
};
use crate::stable_json::{self, FieldError, Fields, Sha256Hex};
use crate::time::UnixMillis;

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

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::envelope::fixtures::*;
    use crate::testkit::{assert_refusal, check};

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
}
