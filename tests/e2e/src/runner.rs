//! The runner API: bootstrap-token sessions and a self-registering key-pair runner.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use edgerunner_protocol::keypair::RunnerSigningKey;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::*;

/// `POST /api/remote-runners/session` with a bootstrap token.
pub async fn session(runner_id: &str, bootstrap_token: &str) -> Reply {
    post(
        "/api/remote-runners/session",
        None,
        &json!({ "runnerId": runner_id, "bootstrapToken": bootstrap_token }),
    )
    .await
}

/// Exchanges a bootstrap token expecting `200`; returns the credential (`token`).
pub async fn exchange(runner_id: &str, bootstrap_token: &str) -> String {
    let reply = session(runner_id, bootstrap_token).await;
    credential_of(&reply)
}

/// The `token` of a successful session answer.
pub fn credential_of(reply: &Reply) -> String {
    let answer = reply.expect(200);
    answer["token"]
        .as_str()
        .unwrap_or_else(|| panic!("session answer without token: {reply:?}"))
        .to_owned()
}

/// `GET /api/remote-runners/self` with a runner credential.
pub async fn runner_self(credential: &str) -> Reply {
    get("/api/remote-runners/self", credential).await
}

/// A self-registering runner: an ed25519 key pair generated for the test.
pub struct KeyPairRunner {
    key: RunnerSigningKey,
}

impl Default for KeyPairRunner {
    fn default() -> Self {
        Self::generate()
    }
}

impl KeyPairRunner {
    pub fn generate() -> Self {
        Self {
            key: RunnerSigningKey::from_random_bytes(random_bytes()),
        }
    }

    /// Standard padded base64 of the 32 raw public key bytes.
    pub fn public_key(&self) -> String {
        self.key.public_key().to_base64()
    }

    /// `SHA256:` + unpadded base64 of SHA-256 of the raw key, computed here from the spec
    /// (not by the protocol crate), and checked against the crate's.
    pub fn fingerprint(&self) -> String {
        let raw = self.key.public_key();
        let ours = format!(
            "SHA256:{}",
            STANDARD_NO_PAD.encode(Sha256::digest(raw.as_bytes()))
        );
        assert_eq!(ours, raw.fingerprint().as_str());
        ours
    }

    /// Signs `"edgerunner-challenge-v1\n" + fingerprint + "\n" + challenge` as API.md states
    /// it; standard base64 of the 64-byte signature.
    pub fn sign(&self, challenge: &str) -> String {
        self.sign_for(&self.fingerprint(), challenge)
    }

    /// Signs a challenge message naming `fingerprint` (which need not be this key's).
    pub fn sign_for(&self, fingerprint: &str, challenge: &str) -> String {
        let signing = SigningKey::from_bytes(&self.key.to_seed());
        let message = format!("edgerunner-challenge-v1\n{fingerprint}\n{challenge}");
        STANDARD.encode(signing.sign(message.as_bytes()).to_bytes())
    }

    /// Signs `"edgerunner-enroll-v1\n" + organizationId + "\n" + fingerprint` as API.md
    /// states it: the enrollment's proof that this key's holder is enrolling it.
    pub fn sign_enrollment(&self, organization_id: &str) -> String {
        let signing = SigningKey::from_bytes(&self.key.to_seed());
        let message = format!(
            "edgerunner-enroll-v1\n{organization_id}\n{}",
            self.fingerprint()
        );
        STANDARD.encode(signing.sign(message.as_bytes()).to_bytes())
    }

    /// A complete, signed enrollment body for `organization_id`.
    pub fn enrollment(&self, organization_id: &str) -> Value {
        json!({
            "organizationId": organization_id,
            "publicKey": self.public_key(),
            "signature": self.sign_enrollment(organization_id),
            "name": unique("keypair-runner"),
            "product": "edgerunner-e2e",
            "version": "0.1.0",
            "problemTypes": ["e2e/identity"],
            "external": false,
            "capabilities": {
                "executionKinds": ["prompt", "scorer"],
                "runtimes": ["python3.12"],
                "problemTypes": ["e2e/identity"],
                "external": false,
            },
            "machine": { "cpus": 4, "os": "linux" },
        })
    }

    /// `POST /api/remote-runners/enroll`, seen as coming from `address` (`CF-Connecting-IP`).
    pub async fn enroll_from(&self, address: &str, body: &Value) -> Reply {
        let request = client()
            .post(url("/api/remote-runners/enroll"))
            .header("CF-Connecting-IP", address)
            .json(body);
        send("POST /api/remote-runners/enroll".to_owned(), request).await
    }

    /// Enrolls with [`Self::enrollment`] expecting `201`; returns the runner id.
    pub async fn enroll(&self, org: &Org) -> String {
        let reply = self
            .enroll_from(&fresh_address(), &self.enrollment(&org.id))
            .await;
        id_of(&reply.expect(201)["runner"])
    }

    /// Enrolls and has the org's admin approve it; returns the runner id.
    pub async fn enroll_approved(&self, org: &Org) -> String {
        let id = self.enroll(org).await;
        approve(
            &org.admin_key,
            &id,
            &self.fingerprint(),
            "fingerprint checked by e2e",
        )
        .await;
        id
    }

    /// `POST /api/remote-runners/challenge` for this key's fingerprint.
    pub async fn challenge(&self) -> Reply {
        post(
            "/api/remote-runners/challenge",
            None,
            &json!({ "fingerprint": self.fingerprint() }),
        )
        .await
    }

    /// A challenge, expecting `200`.
    pub async fn fresh_challenge(&self) -> String {
        let reply = self.challenge().await;
        reply.expect(200)["challenge"]
            .as_str()
            .unwrap_or_else(|| panic!("challenge answer without challenge: {reply:?}"))
            .to_owned()
    }

    /// `POST /api/remote-runners/session` with this fingerprint and the given answer.
    pub async fn session_with(&self, challenge: &str, signature: &str) -> Reply {
        post(
            "/api/remote-runners/session",
            None,
            &json!({
                "fingerprint": self.fingerprint(),
                "challenge": challenge,
                "signature": signature,
            }),
        )
        .await
    }

    /// Challenge, sign, session: the whole key-pair exchange.
    pub async fn signed_session(&self) -> Reply {
        let challenge = self.fresh_challenge().await;
        self.session_with(&challenge, &self.sign(&challenge)).await
    }
}
