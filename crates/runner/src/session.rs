//! Who the runner is and the short-lived session it holds.
//!
//! Two identity models end at the same `POST /api/remote-runners/session`:
//! - **bootstrap token** (an admin registered the runner): `{"runnerId", "bootstrapToken"}`;
//! - **key pair** (the runner enrolled itself): `POST /challenge {"fingerprint"}`, then
//!   `{"fingerprint", "challenge", "signature"}` with the challenge signed by its ed25519 key.
//!
//! Either way the answer is a credential valid for at most ten minutes, the organization it is
//! bound to and the job-signing key claims are checked against. [`Session::needs_refresh`] is
//! the SDK's rule: exchange again 30 s before expiry.

use core::fmt;

use edgerunner_protocol::envelope::{
    JobSigning, OrganizationId, RunnerId, ServedTarget, SessionBinding,
};
use edgerunner_protocol::keypair::{Fingerprint, RunnerSigningKey};
use edgerunner_protocol::time::UnixMillis;
use serde_json::Value;

use crate::http::ClientError;

/// How long before `expiresAt` a session is exchanged again (the SDK's 30 s).
pub const REFRESH_MARGIN_MILLIS: i64 = 30_000;

/// A bootstrap token (`erb_…`): never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken(String);

impl BootstrapToken {
    pub fn new(token: &str) -> Result<Self, ClientError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(ClientError::Config("the bootstrap token is empty".into()));
        }
        Ok(Self(token.to_owned()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BootstrapToken(<redacted>)")
    }
}

/// What the runner proves its identity with.
#[derive(Clone, Debug)]
pub enum Credentials {
    /// Registered by an admin; the token is reusable until rotated.
    Bootstrap {
        runner_id: RunnerId,
        token: BootstrapToken,
    },
    /// Self-enrolled; approved by an admin who compared the fingerprint.
    KeyPair(RunnerSigningKey),
}

impl Credentials {
    /// The fingerprint a key-pair runner presents.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        match self {
            Self::KeyPair(key) => Some(key.public_key().fingerprint()),
            Self::Bootstrap { .. } => None,
        }
    }

    /// The runner id, when known before the first session (bootstrap model).
    pub fn runner_id(&self) -> Option<&RunnerId> {
        match self {
            Self::Bootstrap { runner_id, .. } => Some(runner_id),
            Self::KeyPair(_) => None,
        }
    }
}

/// What this runner's configuration says its sessions are bound to; `None` where it does not
/// know (a bootstrap-token runner is not told its organization unless configured with it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpectedBinding {
    pub runner_id: Option<RunnerId>,
    pub organization_id: Option<OrganizationId>,
}

/// A session answer, read and checked.
#[derive(Clone)]
pub struct Session {
    token: String,
    pub runner_id: RunnerId,
    pub organization_id: OrganizationId,
    pub scopes: Vec<String>,
    pub issued_at: UnixMillis,
    pub expires_at: UnixMillis,
    pub signing: JobSigning,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("token", &"<redacted>")
            .field("runner_id", &self.runner_id)
            .field("organization_id", &self.organization_id)
            .field("expires_at", &self.expires_at)
            .field("key_id", &self.signing.key_id)
            .finish()
    }
}

impl Session {
    /// Reads `{"token", "claims": {...}, "jobSigning": {...}}`. The claims must name the runner
    /// and organization `expected` knows: a session for another identity is refused
    /// ([`ClientError::IdentityMismatch`]) and never used, since claims would be verified
    /// against its organization and signing key.
    pub fn from_json(value: &Value, expected: &ExpectedBinding) -> Result<Self, ClientError> {
        let malformed = |detail: String| ClientError::Malformed {
            what: "POST /api/remote-runners/session".into(),
            detail,
        };
        let text = |value: &Value, key: &str| -> Result<String, ClientError> {
            value[key]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| malformed(format!("`{key}` is missing or not a string")))
        };
        let token = text(value, "token")?;
        let claims = &value["claims"];
        let runner_id = RunnerId::parse(&text(claims, "runnerId")?)
            .map_err(|error| malformed(format!("claims.runnerId: {error}")))?;
        let organization_id = OrganizationId::parse(&text(claims, "organizationId")?)
            .map_err(|error| malformed(format!("claims.organizationId: {error}")))?;
        if let Some(expected) = &expected.runner_id {
            if &runner_id != expected {
                return Err(ClientError::IdentityMismatch(format!(
                    "the server issued a session for runner {runner_id}, but this runner is \
                     configured as {expected}; the session was not used"
                )));
            }
        }
        if let Some(expected) = &expected.organization_id {
            if &organization_id != expected {
                return Err(ClientError::IdentityMismatch(format!(
                    "the server issued a session bound to organization {organization_id}, but \
                     this runner is configured for {expected}; the session was not used"
                )));
            }
        }
        let instant = |key: &str| -> Result<UnixMillis, ClientError> {
            UnixMillis::parse_rfc3339(&text(claims, key)?)
                .map_err(|error| malformed(format!("claims.{key}: {error}")))
        };
        let scopes = claims["scopes"]
            .as_array()
            .map(|scopes| {
                scopes
                    .iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let signing = JobSigning::from_json(&value["jobSigning"])
            .map_err(|error| malformed(error.to_string()))?;
        Ok(Self {
            token,
            runner_id,
            organization_id,
            scopes,
            issued_at: instant("issuedAt")?,
            expires_at: instant("expiresAt")?,
            signing,
        })
    }

    /// The credential to send as `Authorization: Bearer`. Never log it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether to exchange a new session before using this one at `now`.
    pub fn needs_refresh(&self, now: UnixMillis) -> bool {
        self.expires_at.get() - REFRESH_MARGIN_MILLIS <= now.get()
    }

    /// What claims are verified against.
    pub fn binding(&self, served_targets: &[ServedTarget]) -> SessionBinding {
        SessionBinding {
            organization_id: self.organization_id.clone(),
            signing: self.signing.clone(),
            served_targets: served_targets.to_vec(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use edgerunner_protocol::envelope::{CredentialGeneration, MasterSigningSecret};
    use serde_json::json;

    use super::*;

    pub(crate) fn session_json(runner: &str, org: &str, expires_at: &str) -> Value {
        let signing = JobSigning::derive(
            &MasterSigningSecret::new("s".repeat(32)).expect("long enough"),
            &RunnerId::parse(runner).expect("id"),
            CredentialGeneration(1),
        );
        json!({
            "token": "erc_test",
            "claims": {
                "runnerId": runner,
                "organizationId": org,
                "scopes": ["runner:claim"],
                "issuedAt": "2026-11-30T01:00:00.000Z",
                "expiresAt": expires_at,
            },
            "jobSigning": signing.to_json(),
        })
    }

    #[test]
    fn refreshes_thirty_seconds_before_expiry() {
        let value = session_json("run_1", "org_1", "2026-11-30T01:10:00.000Z");
        let session = Session::from_json(&value, &ExpectedBinding::default()).expect("a session");
        let at = |text: &str| UnixMillis::parse_rfc3339(text).expect("instant");
        assert!(!session.needs_refresh(at("2026-11-30T01:09:29.999Z")));
        assert!(session.needs_refresh(at("2026-11-30T01:09:30.000Z")));
        assert!(session.needs_refresh(at("2026-11-30T01:11:00.000Z")));
        assert!(!format!("{session:?}").contains("erc_test"));
    }

    fn expected(runner: Option<&str>, org: Option<&str>) -> ExpectedBinding {
        ExpectedBinding {
            runner_id: runner.map(|id| RunnerId::parse(id).expect("id")),
            organization_id: org.map(|id| OrganizationId::parse(id).expect("id")),
        }
    }

    #[test]
    fn refuses_a_credential_bound_to_another_runner() {
        let value = session_json("run_2", "org_1", "2026-11-30T01:10:00.000Z");
        let error = Session::from_json(&value, &expected(Some("run_1"), Some("org_1")))
            .expect_err("refused");
        assert!(
            matches!(error, ClientError::IdentityMismatch(_)),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains("session for runner run_2, but this runner is configured as run_1"),
            "{error}"
        );
        let mut missing = value.clone();
        missing["jobSigning"] = Value::Null;
        assert!(Session::from_json(&missing, &ExpectedBinding::default()).is_err());
    }

    #[test]
    fn refuses_a_session_bound_to_another_organization() {
        let value = session_json("run_1", "org_2", "2026-11-30T01:10:00.000Z");
        for expectation in [
            expected(Some("run_1"), Some("org_1")),
            expected(None, Some("org_1")),
        ] {
            let error = Session::from_json(&value, &expectation).expect_err("refused");
            assert!(
                matches!(error, ClientError::IdentityMismatch(_)),
                "{error:?}"
            );
            assert!(
                error
                    .to_string()
                    .contains("organization org_2, but this runner is configured for org_1"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_session_matching_what_the_config_knows_is_accepted() {
        let value = session_json("run_1", "org_1", "2026-11-30T01:10:00.000Z");
        for expectation in [
            expected(Some("run_1"), Some("org_1")),
            expected(Some("run_1"), None),
            expected(None, Some("org_1")),
            ExpectedBinding::default(),
        ] {
            let session = Session::from_json(&value, &expectation).expect("accepted");
            assert_eq!(session.runner_id.as_str(), "run_1");
            assert_eq!(session.organization_id.as_str(), "org_1");
        }
    }
}
