//! Runner identity, end to end, against docs/API.md: both identity models through to a working
//! credential, every refusal the contract promises, API keys and their roles, registration,
//! status changes and their audit trail, and runner files.
//!
//! Each test makes its own organization (so the tests are independent and run in parallel),
//! never sleeps (an expiry is moved into the past through D1 instead), and has a control next
//! to each refusal where a refusal alone could pass for the wrong reason.

mod api_keys;
mod bootstrap_refusals;
mod files;
mod keypair_refusals;
mod registration;
mod sessions;
mod tenancy;

use std::collections::BTreeSet;

use edgerunner_e2e::jobs::str_of;
use edgerunner_e2e::*;
use edgerunner_protocol::capability::CapabilityDocument;
use edgerunner_protocol::credential::{self, CredentialClaims};
use edgerunner_protocol::envelope::{JobSigningSecret, MasterSigningSecret};
use edgerunner_protocol::stable_json;
use reqwest::Method;
use serde_json::{json, Value};

/// The scopes of every runner credential (PROTOCOL.md, API.md "Sessions").
const RUNNER_SCOPES: [&str; 5] = [
    "runner:claim",
    "runner:heartbeat",
    "runner:stream",
    "runner:complete",
    "runner:self",
];

/// Clock skew tolerated between this process and the server (same machine).
const SKEW_MS: i64 = 5_000;

/// Ten minutes: the longest a runner credential may live.
const MAX_CREDENTIAL_MS: i64 = 10 * 60 * 1000;

/// The fields of the Runner record (API.md "Runner record").
const RUNNER_FIELDS: [&str; 30] = [
    "id",
    "organizationId",
    "identityModel",
    "name",
    "runnerKey",
    "state",
    "actions",
    "stateReason",
    "product",
    "version",
    "fingerprint",
    "publicKey",
    "keyId",
    "address",
    "machine",
    "capabilities",
    "capabilityHash",
    "protocolVersion",
    "problemTypes",
    "external",
    "tags",
    "maxConcurrentJobs",
    "activeClaims",
    "completedJobs",
    "registeredAt",
    "approvedAt",
    "revokedAt",
    "lastSeenAt",
    "lastHeartbeatAt",
    "files",
];

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// A runner record has every documented field.
fn assert_runner_shape(runner: &Value) {
    let present = keys(runner);
    let missing: Vec<_> = RUNNER_FIELDS
        .iter()
        .filter(|field| !present.contains(**field))
        .collect();
    assert!(
        missing.is_empty(),
        "runner record lacks {missing:?}: {runner}"
    );
}

/// Nothing that is, or is the hash of, one of `secrets` appears in `text`.
fn assert_no_secret(text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(
            !text.contains(secret),
            "a secret leaked into an answer: {text}"
        );
        let hash = sha256_hex(secret.as_bytes());
        assert!(
            !text.contains(&hash),
            "the hash of a secret leaked into an answer: {text}"
        );
    }
}

/// The exact session shape of PROTOCOL.md, for `runner_id` in `org_id`, issued after
/// `before_ms`.
fn assert_session_shape(body: &Value, runner_id: &str, org_id: &str, before_ms: i64) {
    assert_eq!(
        keys(body),
        set(&["token", "claims", "jobSigning"]),
        "session answer: {body}"
    );
    let token = str_of(body, "token");
    assert!(token.starts_with("erc_"), "credential {token:?}");

    let claims = &body["claims"];
    assert_eq!(
        keys(claims),
        set(&[
            "runnerId",
            "organizationId",
            "scopes",
            "issuedAt",
            "expiresAt"
        ]),
        "claims: {claims}"
    );
    assert_eq!(claims["runnerId"], runner_id, "claims: {claims}");
    assert_eq!(claims["organizationId"], org_id, "claims: {claims}");
    let scopes: BTreeSet<String> = claims["scopes"]
        .as_array()
        .unwrap_or_else(|| panic!("scopes is not a list: {claims}"))
        .iter()
        .map(|s| s.as_str().expect("scope strings").to_owned())
        .collect();
    assert_eq!(scopes, set(&RUNNER_SCOPES), "claims: {claims}");
    assert_eq!(
        claims["scopes"].as_array().map(Vec::len),
        Some(RUNNER_SCOPES.len()),
        "no duplicate scopes: {claims}"
    );

    let issued_text = str_of(claims, "issuedAt");
    let expires_text = str_of(claims, "expiresAt");
    assert!(
        issued_text.ends_with('Z'),
        "issuedAt {issued_text:?} is UTC with Z"
    );
    assert!(
        expires_text.ends_with('Z'),
        "expiresAt {expires_text:?} is UTC with Z"
    );
    let issued = parse_time(issued_text);
    let expires = parse_time(expires_text);
    let now = now_ms();
    assert!(
        issued >= before_ms - SKEW_MS && issued <= now + SKEW_MS,
        "issuedAt {issued_text} is not now"
    );
    assert!(
        expires > now,
        "expiresAt {expires_text} is not in the future"
    );
    assert!(
        expires <= now + MAX_CREDENTIAL_MS + SKEW_MS,
        "expiresAt {expires_text} is more than ten minutes away"
    );
    assert!(expires > issued, "expires before it is issued: {claims}");

    let signing = &body["jobSigning"];
    assert_eq!(
        keys(signing),
        set(&["algorithm", "keyId", "secret"]),
        "jobSigning: {signing}"
    );
    assert_eq!(signing["algorithm"], "hmac-sha256");
    let secret = str_of(signing, "secret");
    assert!(!secret.is_empty(), "empty job-signing secret");
    let key_id = str_of(signing, "keyId");
    assert!(key_id.starts_with("rk_"), "keyId {key_id:?}");
    let named = JobSigningSecret::new(secret.to_owned()).expect("non-empty secret");
    assert_eq!(
        named.key_id().as_str(),
        key_id,
        "keyId names its secret (rk_ + 16 hex of SHA-256 of the secret)"
    );
}

/// An unused, well-formed challenge (the shape the protocol crate issues).
fn invented_challenge() -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    URL_SAFE_NO_PAD.encode(random_bytes())
}

/// What `/challenge` answers for a key that may not have a session (unknown, waiting for
/// approval, revoked): the same `200 {challenge, expiresAt}` a live runner gets, so a stranger
/// learns nothing from it; the challenge is not stored, so signing it gets the uniform `401`.
async fn uniform_challenge_without_session(runner: &KeyPairRunner) {
    let reply = runner.challenge().await;
    let body = reply.expect(200);
    assert_eq!(
        keys(&body),
        set(&["challenge", "expiresAt"]),
        "the same shape a live runner gets: {reply:?}"
    );
    let challenge = str_of(&body, "challenge").to_owned();
    runner
        .session_with(&challenge, &runner.sign(&challenge))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

/// The `reason`s of a runner's audit events (`{"events": [...]}`).
async fn event_reasons(admin_key: &str, runner_id: &str) -> Vec<String> {
    let reply = runner_events(admin_key, runner_id).await;
    let body = reply.expect(200);
    let events = body["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events list: {reply:?}"));
    events
        .iter()
        .filter_map(|event| event["reason"].as_str().map(str::to_owned))
        .collect()
}
