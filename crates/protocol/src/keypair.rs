//! Runner key pairs: ed25519 public keys, their fingerprints, and the session challenge.
//!
//! A self-registering runner generates one ed25519 key pair at its first start and never
//! rotates it (a leaked key is revoked and the runner registers again as a new identity). It
//! presents the public key as **standard base64 (with padding) of the 32 raw key bytes**
//! (44 characters), the form `base64.b64encode(raw)` and `Buffer.toString("base64")` produce.
//! An administrator approves its [`Fingerprint`], `SHA256:` followed by unpadded standard base64
//! of SHA-256 of the raw key, the form OpenSSH shows.
//!
//! To get a session the runner presents its fingerprint, receives a single-use [`Challenge`],
//! and signs [`challenge_message`]: the challenge bound to a protocol label and to the
//! fingerprint, so that a signature made for this purpose cannot be replayed as anything else,
//! nor for another key. Verification uses `verify_strict`, which refuses small-order keys and
//! non-canonical signatures, so no key or signature has a second valid encoding.
//!
//! The crate has no random source: key generation and challenges take 32 caller-provided random
//! bytes.

use core::fmt;

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::error_code::ErrorCode;

/// The domain-separation label that starts every challenge message.
pub const CHALLENGE_LABEL: &str = "edgerunner-challenge-v1";

/// The domain-separation label that starts every enrollment proof.
pub const ENROLLMENT_LABEL: &str = "edgerunner-enroll-v1";

/// A runner's ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Reads standard, padded base64 of the 32 raw key bytes.
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        let bytes = STANDARD
            .decode(text)
            .map_err(|_| KeyError::MalformedPublicKey {
                reason: "not standard padded base64",
            })?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| KeyError::MalformedPublicKey {
            reason: "an ed25519 public key has 32 bytes",
        })?;
        Self::from_bytes(&bytes)
    }

    /// Refuses encodings that are not curve points and small-order (weak) keys, for which
    /// one signature verifies almost any message.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<Self, KeyError> {
        let key = VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::MalformedPublicKey {
            reason: "not an ed25519 curve point",
        })?;
        if key.is_weak() {
            return Err(KeyError::WeakPublicKey);
        }
        Ok(Self(key))
    }

    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0.as_bytes())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(self)
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

/// `SHA256:` + unpadded standard base64 of SHA-256 of the raw key bytes.
pub fn fingerprint(key: &PublicKey) -> Fingerprint {
    Fingerprint(format!(
        "SHA256:{}",
        STANDARD_NO_PAD.encode(Sha256::digest(key.as_bytes()))
    ))
}

/// A public key's fingerprint: what an administrator approves and the runner presents.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Accepts exactly the form [`fingerprint`] writes.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let digest = text
            .strip_prefix("SHA256:")
            .and_then(|encoded| STANDARD_NO_PAD.decode(encoded).ok())
            .filter(|digest| digest.len() == 32);
        match digest {
            Some(_) => Ok(Self(text.to_owned())),
            None => Err(KeyError::MalformedFingerprint),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", self.0)
    }
}

/// A single-use session challenge: URL-safe base64 without padding, 16 to 256 characters.
///
/// The alphabet has no newline, so a challenge cannot forge the structure of
/// [`challenge_message`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Challenge(String);

impl Challenge {
    /// A challenge from 32 caller-provided random bytes (43 characters).
    pub fn from_random(bytes: [u8; 32]) -> Self {
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let well_formed = (16..=256).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if well_formed {
            Ok(Self(text.to_owned()))
        } else {
            Err(KeyError::MalformedChallenge)
        }
    }

    /// The challenge text, to send to the runner. Store only its hash server-side.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Challenge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Challenge(<redacted>)")
    }
}

/// The bytes a runner signs: `edgerunner-challenge-v1\n<fingerprint>\n<challenge>`.
pub fn challenge_message(fingerprint: &Fingerprint, challenge: &Challenge) -> Vec<u8> {
    format!("{CHALLENGE_LABEL}\n{}\n{}", fingerprint.0, challenge.0).into_bytes()
}

/// The bytes an enrolling runner signs to prove it holds the key it enrolls:
/// `edgerunner-enroll-v1\n<organizationId>\n<fingerprint>`. Naming the organization binds the
/// proof to one enrollment target, so nobody can enroll a key they saw but do not hold, and a
/// proof made for one organization cannot enroll the key into another.
pub fn enrollment_message(organization_id: &str, fingerprint: &Fingerprint) -> Vec<u8> {
    format!("{ENROLLMENT_LABEL}\n{organization_id}\n{}", fingerprint.0).into_bytes()
}

/// Signs the enrollment proof for `organization_id`; standard padded base64 of 64 bytes.
pub fn sign_enrollment(key: &RunnerSigningKey, organization_id: &str) -> String {
    let message = enrollment_message(organization_id, &key.public_key().fingerprint());
    STANDARD.encode(key.0.sign(&message).to_bytes())
}

/// Checks an enrollment proof: `signature_b64` signs [`enrollment_message`] for
/// `organization_id` under `public_key`.
pub fn verify_enrollment_signature(
    public_key: &PublicKey,
    organization_id: &str,
    signature_b64: &str,
) -> Result<KeyPossession, KeyError> {
    let fingerprint = public_key.fingerprint();
    verify_signature(
        public_key,
        &enrollment_message(organization_id, &fingerprint),
        signature_b64,
    )?;
    Ok(KeyPossession { fingerprint })
}

fn verify_signature(
    public_key: &PublicKey,
    message: &[u8],
    signature_b64: &str,
) -> Result<(), KeyError> {
    let bytes: [u8; 64] = STANDARD
        .decode(signature_b64)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(KeyError::MalformedSignature)?;
    public_key
        .0
        .verify_strict(message, &Signature::from_bytes(&bytes))
        .map_err(|_| KeyError::BadSignature)
}

/// A runner's ed25519 signing key (its private half).
#[derive(Clone)]
pub struct RunnerSigningKey(SigningKey);

impl RunnerSigningKey {
    /// A key from 32 random bytes, which are also its seed: store them to keep the key.
    pub fn from_random_bytes(seed: [u8; 32]) -> Self {
        Self(SigningKey::from_bytes(&seed))
    }

    /// The seed to store (as secret as the key itself).
    pub fn to_seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }
}

impl fmt::Debug for RunnerSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RunnerSigningKey(public: {})",
            self.public_key().to_base64()
        )
    }
}

/// Signs `challenge` for the key's own fingerprint; the result is standard padded base64 of
/// the 64-byte signature.
pub fn sign_challenge(key: &RunnerSigningKey, challenge: &Challenge) -> String {
    let message = challenge_message(&key.public_key().fingerprint(), challenge);
    STANDARD.encode(key.0.sign(&message).to_bytes())
}

/// Proof that the holder of a fingerprint's private key answered a challenge. Only
/// [`verify_challenge_signature`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPossession {
    fingerprint: Fingerprint,
}

impl KeyPossession {
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }
}

/// Checks that `signature_b64` signs `challenge` for `fingerprint` under `public_key`, and that
/// `fingerprint` is that key's.
pub fn verify_challenge_signature(
    public_key: &PublicKey,
    fingerprint: &Fingerprint,
    challenge: &Challenge,
    signature_b64: &str,
) -> Result<KeyPossession, KeyError> {
    if &public_key.fingerprint() != fingerprint {
        return Err(KeyError::FingerprintMismatch);
    }
    verify_signature(
        public_key,
        &challenge_message(fingerprint, challenge),
        signature_b64,
    )?;
    Ok(KeyPossession {
        fingerprint: fingerprint.clone(),
    })
}

/// Why a key, fingerprint, challenge or signature was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    MalformedPublicKey { reason: &'static str },
    WeakPublicKey,
    MalformedFingerprint,
    FingerprintMismatch,
    MalformedChallenge,
    MalformedSignature,
    BadSignature,
}

impl KeyError {
    /// The machine code of `{"error": {"code", …}}` when the edge answers this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::MalformedPublicKey { .. } => ErrorCode::PublicKeyMalformed,
            Self::WeakPublicKey => ErrorCode::PublicKeyWeak,
            Self::MalformedFingerprint => ErrorCode::FingerprintMalformed,
            Self::FingerprintMismatch => ErrorCode::FingerprintMismatch,
            Self::MalformedChallenge => ErrorCode::ChallengeMalformed,
            Self::MalformedSignature => ErrorCode::ChallengeSignatureMalformed,
            Self::BadSignature => ErrorCode::ChallengeSignatureInvalid,
        }
    }

    /// The wire name of [`Self::error_code`].
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// 401 when the runner failed to prove its key (the session endpoint's answer to a wrong
    /// credential); 422 for material that is malformed or unusable.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::FingerprintMismatch | Self::BadSignature => 401,
            Self::MalformedPublicKey { .. }
            | Self::WeakPublicKey
            | Self::MalformedFingerprint
            | Self::MalformedChallenge
            | Self::MalformedSignature => 422,
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MalformedPublicKey { reason } => write!(
                f,
                "public key must be standard base64 of 32 ed25519 key bytes: {reason}"
            ),
            Self::WeakPublicKey => f.write_str("public key has small order and cannot be used"),
            Self::MalformedFingerprint => {
                f.write_str("fingerprint must be SHA256: followed by 43 base64 characters")
            }
            Self::FingerprintMismatch => f.write_str("fingerprint is not the public key's"),
            Self::MalformedChallenge => f.write_str("challenge is malformed"),
            Self::MalformedSignature => {
                f.write_str("signature must be standard base64 of 64 bytes")
            }
            Self::BadSignature => f.write_str("challenge signature does not verify"),
        }
    }
}

impl std::error::Error for KeyError {}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::testkit::{assert_refusal, check, Rng};

    fn key(seed: u8) -> RunnerSigningKey {
        RunnerSigningKey::from_random_bytes([seed; 32])
    }

    fn challenge() -> Challenge {
        Challenge::from_random([9; 32])
    }

    #[test]
    fn rfc_8032_test_vector_1() {
        // RFC 8032 §7.1, TEST 1: the empty message.
        let seed: [u8; 32] =
            hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                .expect("hex")
                .try_into()
                .expect("32 bytes");
        let key = RunnerSigningKey::from_random_bytes(seed);
        assert_eq!(
            hex::encode(key.public_key().as_bytes()),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        );
        assert_eq!(
            hex::encode(key.0.sign(b"").to_bytes()),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
    }

    #[test]
    fn public_keys_round_trip_through_base64() {
        let public = key(1).public_key();
        let text = public.to_base64();
        assert_eq!(text.len(), 44);
        assert_eq!(PublicKey::from_base64(&text), Ok(public));
        assert!(matches!(
            PublicKey::from_base64(text.trim_end_matches('=')),
            Err(KeyError::MalformedPublicKey { .. })
        ));
        assert!(matches!(
            PublicKey::from_base64(&STANDARD.encode([1u8; 31])),
            Err(KeyError::MalformedPublicKey { .. })
        ));
        assert!(matches!(
            PublicKey::from_base64("not base64!"),
            Err(KeyError::MalformedPublicKey { .. })
        ));
    }

    #[test]
    fn small_order_keys_are_refused() {
        // The identity point (y = 1) has order 1.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(
            PublicKey::from_bytes(&identity),
            Err(KeyError::WeakPublicKey)
        );
    }

    #[test]
    fn fingerprints_are_stable_and_distinct() {
        let public = key(1).public_key();
        let print = fingerprint(&public);
        assert!(print.as_str().starts_with("SHA256:"));
        assert_eq!(print.as_str().len(), 7 + 43);
        assert_eq!(Fingerprint::parse(print.as_str()), Ok(print.clone()));
        let expected = format!(
            "SHA256:{}",
            STANDARD_NO_PAD.encode(Sha256::digest(public.as_bytes()))
        );
        assert_eq!(print.as_str(), expected);
        assert_ne!(key(2).public_key().fingerprint(), print);
        for bad in ["", "SHA256:", "sha256:abc", "SHA256:AAAA", "MD5:abc"] {
            assert_eq!(
                Fingerprint::parse(bad),
                Err(KeyError::MalformedFingerprint),
                "{bad}"
            );
        }
    }

    #[test]
    fn challenge_message_is_domain_separated() {
        let print = key(1).public_key().fingerprint();
        let message = challenge_message(&print, &challenge());
        let text = String::from_utf8(message).expect("ASCII");
        assert_eq!(
            text,
            format!(
                "edgerunner-challenge-v1\n{}\n{}",
                print,
                challenge().as_str()
            )
        );
        assert_eq!(challenge().as_str().len(), 43);
        assert!(Challenge::parse("short").is_err());
        assert!(Challenge::parse("has a space in it....").is_err());
        assert!(Challenge::parse("line\nbreak-and-more-chars").is_err());
        assert_eq!(Challenge::parse(challenge().as_str()), Ok(challenge()));
    }

    #[test]
    fn an_enrollment_proof_binds_the_key_and_the_organization() {
        let key = key(4);
        let public = key.public_key();
        let text =
            String::from_utf8(enrollment_message("org_a", &public.fingerprint())).expect("ASCII");
        assert_eq!(
            text,
            format!("edgerunner-enroll-v1\norg_a\n{}", public.fingerprint())
        );
        let proof = sign_enrollment(&key, "org_a");
        let possession = verify_enrollment_signature(&public, "org_a", &proof).expect("verifies");
        assert_eq!(possession.fingerprint(), &public.fingerprint());
        assert!(
            verify_enrollment_signature(&public, "org_b", &proof) == Err(KeyError::BadSignature),
            "a proof for one organization does not enroll into another"
        );
        assert!(
            verify_enrollment_signature(&self::key(5).public_key(), "org_a", &proof)
                == Err(KeyError::BadSignature),
            "a proof made by one key does not enroll another"
        );
        assert!(
            verify_enrollment_signature(&public, "org_a", "not base64")
                == Err(KeyError::MalformedSignature),
            "a malformed proof is told apart"
        );
        // A challenge signature is not an enrollment proof, nor the other way round.
        let challenge_signature = sign_challenge(&key, &challenge());
        assert!(
            verify_enrollment_signature(&public, "org_a", &challenge_signature)
                == Err(KeyError::BadSignature),
            "labels separate the two messages"
        );
    }

    #[test]
    fn a_signed_challenge_verifies() {
        let key = key(3);
        let public = key.public_key();
        let signature = sign_challenge(&key, &challenge());
        let proof =
            verify_challenge_signature(&public, &public.fingerprint(), &challenge(), &signature)
                .expect("verifies");
        assert_eq!(proof.fingerprint(), &public.fingerprint());
        assert_eq!(
            RunnerSigningKey::from_random_bytes(key.to_seed()).public_key(),
            public
        );
    }

    #[test]
    fn signatures_bind_key_fingerprint_and_challenge() {
        let key = key(3);
        let public = key.public_key();
        let print = public.fingerprint();
        let signature = sign_challenge(&key, &challenge());
        let other = Challenge::from_random([8; 32]);
        assert_eq!(
            verify_challenge_signature(&public, &print, &other, &signature),
            Err(KeyError::BadSignature)
        );
        let stranger = self::key(4).public_key();
        assert_eq!(
            verify_challenge_signature(&stranger, &print, &challenge(), &signature),
            Err(KeyError::FingerprintMismatch)
        );
        assert_eq!(
            verify_challenge_signature(
                &stranger,
                &stranger.fingerprint(),
                &challenge(),
                &signature
            ),
            Err(KeyError::BadSignature)
        );
        assert_eq!(
            verify_challenge_signature(&public, &print, &challenge(), "AAAA"),
            Err(KeyError::MalformedSignature)
        );
        // A signature over the bare challenge (no label, no fingerprint) is not accepted.
        let bare = STANDARD.encode(key.0.sign(challenge().as_str().as_bytes()).to_bytes());
        assert_eq!(
            verify_challenge_signature(&public, &print, &challenge(), &bare),
            Err(KeyError::BadSignature)
        );
    }

    #[test]
    fn any_flipped_bit_of_the_signature_is_refused() {
        let key = key(5);
        let public = key.public_key();
        let print = public.fingerprint();
        let signature = STANDARD
            .decode(sign_challenge(&key, &challenge()))
            .expect("base64");
        check(128, |rng| {
            let mut flipped = signature.clone();
            let bit = rng.below(512) as usize;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                verify_challenge_signature(
                    &public,
                    &print,
                    &challenge(),
                    &STANDARD.encode(&flipped)
                ),
                Err(KeyError::BadSignature),
                "bit {bit}"
            );
        });
    }

    #[test]
    fn keys_from_random_seeds_sign_and_verify() {
        check(50, |rng| {
            let mut seed = [0u8; 32];
            for chunk in seed.chunks_mut(8) {
                chunk.copy_from_slice(&rng.next_u64().to_be_bytes());
            }
            let key = RunnerSigningKey::from_random_bytes(seed);
            let public = PublicKey::from_base64(&key.public_key().to_base64()).expect("round trip");
            let challenge = Challenge::from_random(seed);
            let signature = sign_challenge(&key, &challenge);
            assert!(verify_challenge_signature(
                &public,
                &public.fingerprint(),
                &challenge,
                &signature
            )
            .is_ok());
        });
    }

    /// Standard padded base64 of 0 to 80 random bytes, most often exactly `length`.
    fn random_base64(rng: &mut Rng, length: usize) -> String {
        let length = if rng.chance(3, 4) {
            length
        } else {
            rng.below(81) as usize
        };
        let bytes: Vec<u8> = (0..length).map(|_| rng.below(256) as u8).collect();
        STANDARD.encode(bytes)
    }

    #[test]
    fn arbitrary_key_material_reads_back_as_written_or_is_a_typed_refusal() {
        let genuine = key(5).public_key();
        let (mut accepted, mut refused) = (0, 0);
        check(300, |rng| {
            let text = match rng.below(4) {
                0 => rng.json_string(),
                1 => rng.edit_text(&genuine.to_base64()),
                _ => random_base64(rng, 32),
            };
            match PublicKey::from_base64(&text) {
                Ok(public) => {
                    accepted += 1;
                    assert_eq!(public.to_base64(), text);
                    assert_eq!(PublicKey::from_base64(&public.to_base64()), Ok(public));
                    let print = public.fingerprint();
                    assert_eq!(Fingerprint::parse(print.as_str()), Ok(print));
                }
                Err(error) => {
                    refused += 1;
                    assert_refusal(error.code(), error.http_status(), &error);
                }
            }

            let print = match rng.below(3) {
                0 => rng.json_string(),
                1 => rng.edit_text(genuine.fingerprint().as_str()),
                _ => format!("SHA256:{}", random_base64(rng, 32).trim_end_matches('=')),
            };
            match Fingerprint::parse(&print) {
                Ok(parsed) => assert_eq!(parsed.as_str(), print),
                Err(error) => assert_refusal(error.code(), error.http_status(), &error),
            }

            let challenge_text = match rng.below(3) {
                0 => rng.json_string(),
                1 => rng.edit_text(challenge().as_str()),
                _ => rng.string(60),
            };
            match Challenge::parse(&challenge_text) {
                Ok(parsed) => {
                    assert_eq!(parsed.as_str(), challenge_text);
                    // Its alphabet cannot add a line to the signed message.
                    let message = challenge_message(&genuine.fingerprint(), &parsed);
                    assert_eq!(message.iter().filter(|b| **b == b'\n').count(), 2);
                }
                Err(error) => assert_refusal(error.code(), error.http_status(), &error),
            }
        });
        assert!(
            accepted > 0 && refused > 0,
            "{accepted} accepted, {refused} refused"
        );
    }

    #[test]
    fn only_the_genuine_signature_verifies_and_the_rest_are_typed_refusals() {
        let key = key(5);
        let public = key.public_key();
        let print = public.fingerprint();
        let signed_challenge = sign_challenge(&key, &challenge());
        check(150, |rng| {
            let organization = rng.json_string();
            let session = rng.chance(1, 2);
            let genuine = if session {
                signed_challenge.clone()
            } else {
                sign_enrollment(&key, &organization)
            };
            let presented = match rng.below(4) {
                0 => rng.json_string(),
                1 => random_base64(rng, 64),
                2 => rng.edit_text(&genuine),
                _ => genuine.clone(),
            };
            let verified = if session {
                verify_challenge_signature(&public, &print, &challenge(), &presented)
            } else {
                verify_enrollment_signature(&public, &organization, &presented)
            };
            match verified {
                Ok(possession) => {
                    assert_eq!(presented, genuine);
                    assert_eq!(possession.fingerprint(), &print);
                }
                Err(error) => {
                    assert_ne!(presented, genuine);
                    assert_refusal(error.code(), error.http_status(), &error);
                }
            }
        });
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let key = key(6);
        let seed_hex = hex::encode(key.to_seed());
        assert!(!format!("{key:?}").contains(&seed_hex));
        assert_eq!(format!("{:?}", challenge()), "Challenge(<redacted>)");
    }
}
