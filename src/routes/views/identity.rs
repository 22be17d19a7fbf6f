//! The runner's side of identity: a challenge to sign, and the session a runner exchanges its
//! proof for (the enrolled runner is [`super::runners::EnrolledView`]).

use edgerunner_protocol::credential::{CredentialClaims, RUNNER_SCOPES};
use serde::Serialize;
use serde_json::Value;

use crate::platform::rfc3339;

/// `POST /api/remote-runners/challenge`'s answer, the same whatever the fingerprint names.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChallengeView<'a> {
    pub(crate) challenge: &'a str,
    pub(crate) expires_at: Option<String>,
}

/// `RunnerSession`: the credential, what it lets the runner do and until when, and the key
/// its jobs' envelopes are signed with.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionView<'a> {
    token: &'a str,
    claims: SessionClaimsView<'a>,
    job_signing: Value,
}

/// The credential's claims as the runner reads them (not its id nor its generation).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionClaimsView<'a> {
    runner_id: &'a str,
    organization_id: &'a str,
    scopes: &'static [&'static str],
    issued_at: Option<String>,
    expires_at: Option<String>,
}

impl<'a> SessionView<'a> {
    /// `token` is the credential issued with `claims`; `job_signing` the signing key's JSON.
    pub(crate) fn new(token: &'a str, claims: &'a CredentialClaims, job_signing: Value) -> Self {
        SessionView {
            token,
            claims: SessionClaimsView {
                runner_id: &claims.runner_id,
                organization_id: &claims.organization_id,
                scopes: &RUNNER_SCOPES,
                issued_at: rfc3339(claims.issued_at_ms),
                expires_at: rfc3339(claims.expires_at_ms),
            },
            job_signing,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::routes::views::to_value;

    /// 2026-01-01T00:00:00Z.
    const NOW: i64 = 1_767_225_600_000;

    #[test]
    fn a_challenge_reads_with_its_end() {
        assert_eq!(
            to_value(&ChallengeView {
                challenge: "c2lnbiBtZSBwbGVhc2U",
                expires_at: rfc3339(NOW + 60_000),
            })
            .unwrap(),
            json!({"challenge": "c2lnbiBtZSBwbGVhc2U", "expiresAt": "2026-01-01T00:01:00.000Z"})
        );
    }

    #[test]
    fn a_session_reads_with_its_claims_and_signing_key_but_not_the_credentials_id() {
        let claims = CredentialClaims {
            id: "crd_secretish".to_owned(),
            runner_id: "run_1".to_owned(),
            organization_id: "org_1".to_owned(),
            generation: 3,
            issued_at_ms: NOW,
            expires_at_ms: NOW + 3_600_000,
        };
        let signing = json!({"keyId": "jsk_1", "algorithm": "Ed25519", "publicKey": "AAAA"});
        assert_eq!(
            to_value(&SessionView::new("erc.token", &claims, signing.clone())).unwrap(),
            json!({
                "token": "erc.token",
                "claims": {
                    "runnerId": "run_1", "organizationId": "org_1", "scopes": RUNNER_SCOPES,
                    "issuedAt": "2026-01-01T00:00:00.000Z",
                    "expiresAt": "2026-01-01T01:00:00.000Z",
                },
                "jobSigning": signing,
            })
        );
    }
}
