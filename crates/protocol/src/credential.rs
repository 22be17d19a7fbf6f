//! Runner credentials: short-lived bearer tokens the edge can verify without a database read.
//!
//! A credential is `erc_<base64url(stable_json(claims))>.<hex HMAC-SHA256>`, keyed by a key
//! derived from `REMOTE_RUNNER_SIGNING_SECRET` under its own label (so a job-signing key can
//! never verify a credential, nor the reverse). Verification proves only that *we* issued it
//! and that it has not expired; whether its generation is still current (rotation, revocation)
//! is the runner's live state, checked by the caller against the runner record.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::envelope::{constant_time_eq, hmac_sha256, MasterSigningSecret};
use crate::stable_json::stable_json;

/// Credentials live at most this long (the seed's "expires within ten minutes").
pub const MAX_CREDENTIAL_TTL_MILLIS: i64 = 10 * 60 * 1000;

/// What a runner credential may do. Least privilege: nothing here reaches an admin route.
pub const RUNNER_SCOPES: [&str; 5] = [
    "runner:claim",
    "runner:heartbeat",
    "runner:stream",
    "runner:complete",
    "runner:self",
];

const PREFIX: &str = "erc_";
const LABEL: &[u8] = b"edgerunner/runner-credential/v1";

/// The facts a credential carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialClaims {
    /// Unique per issued credential (audit rows name it).
    pub id: String,
    pub runner_id: String,
    pub organization_id: String,
    /// The runner's credential generation at issue; rotation moves the runner's forward.
    pub generation: u64,
    pub issued_at_ms: i64,
    pub expires_at_ms: i64,
}

/// Proof that a token was issued by this server and is unexpired. Only [`verify`] builds one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedCredential(CredentialClaims);

impl VerifiedCredential {
    pub fn claims(&self) -> &CredentialClaims {
        &self.0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialError {
    /// Not shaped like a runner credential (an API key lands here too).
    Malformed,
    /// Shaped right, but not signed by this server's key.
    BadSignature,
    Expired,
    /// Asked to issue a credential that would outlive [`MAX_CREDENTIAL_TTL_MILLIS`].
    TtlTooLong,
}

impl CredentialError {
    pub fn code(self) -> &'static str {
        match self {
            Self::Malformed | Self::BadSignature | Self::Expired => "AUTHENTICATION_FAILED",
            Self::TtlTooLong => "CREDENTIAL_TTL_TOO_LONG",
        }
    }

    pub fn http_status(self) -> u16 {
        match self {
            Self::TtlTooLong => 500,
            _ => 401,
        }
    }
}

impl std::fmt::Display for CredentialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Malformed => "not a runner credential",
            Self::BadSignature => "runner credential signature is invalid",
            Self::Expired => "runner credential has expired",
            Self::TtlTooLong => "runner credentials may live at most ten minutes",
        })
    }
}

impl std::error::Error for CredentialError {}

fn credential_key(master: &MasterSigningSecret) -> [u8; 32] {
    hmac_sha256(master.as_bytes(), LABEL)
}

/// Issues a credential. Refuses lifetimes over ten minutes rather than clamping them silently.
pub fn issue(
    master: &MasterSigningSecret,
    claims: &CredentialClaims,
) -> Result<String, CredentialError> {
    let ttl = claims.expires_at_ms - claims.issued_at_ms;
    if ttl <= 0 || ttl > MAX_CREDENTIAL_TTL_MILLIS {
        return Err(CredentialError::TtlTooLong);
    }
    let body = json!({
        "v": 1,
        "jti": claims.id,
        "rid": claims.runner_id,
        "org": claims.organization_id,
        "gen": claims.generation,
        "iat": claims.issued_at_ms,
        "exp": claims.expires_at_ms,
    });
    let payload = URL_SAFE_NO_PAD.encode(stable_json(&body));
    let mac = hex::encode(hmac_sha256(&credential_key(master), payload.as_bytes()));
    Ok(format!("{PREFIX}{payload}.{mac}"))
}

/// Verifies a presented token at `now_ms`: our signature (constant-time), then expiry.
pub fn verify(
    master: &MasterSigningSecret,
    token: &str,
    now_ms: i64,
) -> Result<VerifiedCredential, CredentialError> {
    let rest = token
        .strip_prefix(PREFIX)
        .ok_or(CredentialError::Malformed)?;
    let (payload, mac) = rest.split_once('.').ok_or(CredentialError::Malformed)?;
    // Compared as the exact lowercase hex we issue: decoding first would accept other spellings.
    let expected = hex::encode(hmac_sha256(&credential_key(master), payload.as_bytes()));
    if !constant_time_eq(mac.as_bytes(), expected.as_bytes()) {
        return Err(CredentialError::BadSignature);
    }
    // Signed by us, so the payload is ours; a parse failure here means a format change.
    let bytes = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| CredentialError::Malformed)?;
    let body: Value = serde_json::from_slice(&bytes).map_err(|_| CredentialError::Malformed)?;
    let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_owned);
    let int = |key: &str| body.get(key).and_then(Value::as_i64);
    let claims = CredentialClaims {
        id: text("jti").ok_or(CredentialError::Malformed)?,
        runner_id: text("rid").ok_or(CredentialError::Malformed)?,
        organization_id: text("org").ok_or(CredentialError::Malformed)?,
        generation: body
            .get("gen")
            .and_then(Value::as_u64)
            .ok_or(CredentialError::Malformed)?,
        issued_at_ms: int("iat").ok_or(CredentialError::Malformed)?,
        expires_at_ms: int("exp").ok_or(CredentialError::Malformed)?,
    };
    if now_ms >= claims.expires_at_ms {
        return Err(CredentialError::Expired);
    }
    Ok(VerifiedCredential(claims))
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::testkit::assert_refusal;

    fn master(text: &str) -> MasterSigningSecret {
        MasterSigningSecret::new(text.to_owned()).unwrap()
    }

    fn claims(now: i64, ttl: i64) -> CredentialClaims {
        CredentialClaims {
            id: "cred_1".into(),
            runner_id: "run_1".into(),
            organization_id: "org_1".into(),
            generation: 3,
            issued_at_ms: now,
            expires_at_ms: now + ttl,
        }
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn issued_credential_verifies_until_it_expires() {
        let m = master(SECRET);
        let token = issue(&m, &claims(1_000, 600_000)).unwrap();
        assert!(token.starts_with("erc_"));
        let verified = verify(&m, &token, 1_000).unwrap();
        assert_eq!(verified.claims(), &claims(1_000, 600_000));
        assert!(verify(&m, &token, 600_999).is_ok());
        assert_eq!(verify(&m, &token, 601_000), Err(CredentialError::Expired));
    }

    #[test]
    fn lifetimes_over_ten_minutes_are_refused() {
        let m = master(SECRET);
        assert_eq!(
            issue(&m, &claims(0, 600_001)),
            Err(CredentialError::TtlTooLong)
        );
        assert_eq!(issue(&m, &claims(0, 0)), Err(CredentialError::TtlTooLong));
    }

    #[test]
    fn another_servers_credential_is_refused() {
        let token = issue(&master(SECRET), &claims(0, 1_000)).unwrap();
        let other = master("fedcba9876543210fedcba9876543210");
        assert_eq!(
            verify(&other, &token, 0),
            Err(CredentialError::BadSignature)
        );
    }

    #[test]
    fn any_tampering_is_refused() {
        let m = master(SECRET);
        let token = issue(&m, &claims(0, 1_000)).unwrap();
        crate::testkit::check(200, |rng| {
            let mut bytes = token.clone().into_bytes();
            let at = rng.below(bytes.len() as u64) as usize;
            let replacement = *rng.pick(b"0123456789abcdefABCDEF_-.xyz");
            if bytes[at] == replacement {
                return;
            }
            bytes[at] = replacement;
            let tampered = String::from_utf8(bytes).unwrap();
            assert!(
                verify(&m, &tampered, 0).is_err(),
                "accepted tampered token {tampered}"
            );
        });
    }

    /// A token whose payload is `body` (as stable JSON), signed with `m`'s credential key: what
    /// only a format change on our side could produce, so the parse after the signature runs.
    fn signed_token(m: &MasterSigningSecret, body: &Value) -> String {
        let payload = URL_SAFE_NO_PAD.encode(stable_json(body));
        let mac = hex::encode(hmac_sha256(&credential_key(m), payload.as_bytes()));
        format!("{PREFIX}{payload}.{mac}")
    }

    #[test]
    fn arbitrary_tokens_verify_to_their_claims_or_are_refused_with_401() {
        let m = master(SECRET);
        let token = issue(&m, &claims(0, 1_000)).unwrap();
        let body = json!({"v": 1, "jti": "cred_1", "rid": "run_1", "org": "org_1", "gen": 3,
            "iat": 0, "exp": 1_000});
        let (mut accepted, mut refused) = (0, 0);
        crate::testkit::check(300, |rng| {
            let presented = match rng.below(5) {
                0 => rng.json_string(),
                1 => format!("{PREFIX}{}", rng.string(40)),
                2 => rng.edit_text(&token),
                3 => signed_token(&m, &rng.json(2)),
                _ => signed_token(&m, &rng.mutate(&body)),
            };
            let now = rng.below(2_000) as i64;
            match verify(&m, &presented, now) {
                Ok(verified) => {
                    accepted += 1;
                    let claims = verified.claims();
                    assert!(now < claims.expires_at_ms);
                    // What verifies is what would be issued with the same claims, if the
                    // lifetime is one we issue.
                    if let Ok(reissued) = issue(&m, claims) {
                        assert_eq!(verify(&m, &reissued, now).as_ref(), Ok(&verified));
                    }
                }
                Err(error) => {
                    refused += 1;
                    assert_refusal(error.code(), error.http_status(), &error);
                    assert_eq!(
                        (error.code(), error.http_status()),
                        ("AUTHENTICATION_FAILED", 401)
                    );
                }
            }
        });
        assert!(
            accepted > 0 && refused > 0,
            "{accepted} accepted, {refused} refused"
        );
    }

    #[test]
    fn api_keys_and_garbage_are_malformed() {
        let m = master(SECRET);
        for token in ["erk_0123", "", "erc_", "erc_abc", "erc_abc.zz", "Bearer x"] {
            assert!(
                matches!(
                    verify(&m, token, 0),
                    Err(CredentialError::Malformed | CredentialError::BadSignature)
                ),
                "{token}"
            );
        }
    }
}
