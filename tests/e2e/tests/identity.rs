//! Runner identity, end to end, against docs/API.md: both identity models through to a working
//! credential, every refusal the contract promises, API keys and their roles, registration,
//! status changes and their audit trail, and runner files.
//!
//! Each test makes its own organization (so the tests are independent and run in parallel),
//! never sleeps (an expiry is moved into the past through D1 instead), and has a control next
//! to each refusal where a refusal alone could pass for the wrong reason.

use std::collections::BTreeSet;

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

fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key:?} in {value}"))
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
    let token = str_field(body, "token");
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

    let issued_text = str_field(claims, "issuedAt");
    let expires_text = str_field(claims, "expiresAt");
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
    let secret = str_field(signing, "secret");
    assert!(!secret.is_empty(), "empty job-signing secret");
    let key_id = str_field(signing, "keyId");
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
    let challenge = str_field(&body, "challenge").to_owned();
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

// =============================================================================================
// Both identity models through to a working credential
// =============================================================================================

#[tokio::test]
async fn bootstrap_token_session_has_the_protocol_shape_and_works_on_self() {
    let org = bootstrap_org("identity-bootstrap-session");
    let (runner_id, token) = register_simple_runner(&org, "bootstrap-session").await;
    assert!(token.starts_with("erb_"), "bootstrap token {token:?}");

    let before = now_ms();
    let reply = session(&runner_id, &token).await;
    let body = reply.expect(200);
    assert_session_shape(&body, &runner_id, &org.id, before);
    let credential = str_field(&body, "token").to_owned();

    let me = runner_self(&credential).await.expect(200);
    assert_runner_shape(&me);
    assert_eq!(me["id"], runner_id.as_str());
    assert_eq!(me["organizationId"], org.id.as_str());
    assert_eq!(me["identityModel"], "bootstrap");
    assert_eq!(me["state"], "active");
    let secret = str_field(&body["jobSigning"], "secret");
    assert_no_secret(
        &runner_self(&credential).await.text,
        &[&token, &credential, secret],
    );

    // The token is reusable: the SDK exchanges it again whenever its credential nears expiry,
    // and the earlier credential keeps working (nothing was rotated).
    let again = session(&runner_id, &token).await.expect(200);
    assert_session_shape(&again, &runner_id, &org.id, before);
    runner_self(str_field(&again, "token")).await.expect(200);
    runner_self(&credential).await.expect(200);
    assert_eq!(
        again["jobSigning"]["keyId"], body["jobSigning"]["keyId"],
        "the job-signing key is the runner's, not the session's, until rotation"
    );
}

#[tokio::test]
async fn keypair_runner_enrolls_waits_for_approval_and_gets_a_working_session() {
    let org = bootstrap_org("identity-keypair");
    let runner = KeyPairRunner::generate();

    // The address comes from the connection (CF-Connecting-IP), never from the body: a body
    // `address` is either ignored or refused.
    let mut body = runner.enrollment(&org.id);
    body["address"] = json!("10.9.8.7");
    let reply = runner.enroll_from("203.0.113.7", &body).await;
    let enrolled = if reply.status == 201 {
        reply.json()["runner"].clone()
    } else {
        assert_eq!(
            reply.status, 422,
            "a body address is ignored (201) or refused (422): {reply:?}"
        );
        let clean = runner.enrollment(&org.id);
        body = clean.clone();
        runner.enroll_from("203.0.113.7", &clean).await.expect(201)["runner"].clone()
    };
    assert_runner_shape(&enrolled);
    let runner_id = id_of(&enrolled);
    assert_eq!(enrolled["address"], "203.0.113.7", "address: {enrolled}");
    assert_eq!(enrolled["identityModel"], "keypair");
    assert_eq!(enrolled["state"], "pending_approval");
    assert_eq!(enrolled["organizationId"], org.id.as_str());
    assert_eq!(enrolled["fingerprint"], runner.fingerprint().as_str());
    assert_eq!(enrolled["publicKey"], runner.public_key().as_str());
    assert_eq!(enrolled["name"], body["name"]);
    assert_eq!(enrolled["product"], "edgerunner-e2e");
    assert_eq!(enrolled["version"], "0.1.0");
    assert_eq!(enrolled["problemTypes"], json!(["e2e/identity"]));
    assert_eq!(enrolled["external"], false);
    assert_eq!(enrolled["machine"], json!({ "cpus": 4, "os": "linux" }));
    assert_eq!(enrolled["tags"], json!([]));
    assert!(
        enrolled["approvedAt"].is_null(),
        "not approved yet: {enrolled}"
    );

    // The admin sees the same fingerprint to compare with the one the runner printed.
    let seen = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(seen["fingerprint"], runner.fingerprint().as_str());
    assert_eq!(seen["address"], "203.0.113.7");
    assert_eq!(seen["state"], "pending_approval");

    // Nothing before approval.
    uniform_challenge_without_session(&runner).await;

    // Approval names the fingerprint compared; without it, or with another, nothing changes,
    // whichever word asks for the approval.
    for status in ["active", "approve", "approved"] {
        patch_runner(
            &org.admin_key,
            &runner_id,
            &json!({ "status": status, "reason": "looks fine" }),
        )
        .await
        .expect_error(422, "FINGERPRINT_REQUIRED");
    }
    patch_runner(
        &org.admin_key,
        &runner_id,
        &json!({ "status": "active", "reason": "looks fine", "fingerprint": KeyPairRunner::generate().fingerprint() }),
    )
    .await
    .expect_error(409, "FINGERPRINT_MISMATCH");
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "pending_approval"
    );
    approve(
        &org.admin_key,
        &runner_id,
        &runner.fingerprint(),
        "fingerprint matches the console",
    )
    .await;
    let approved = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(approved["state"], "active");
    parse_time(str_field(&approved, "approvedAt"));

    // Challenge: single use, 60 s.
    let before = now_ms();
    let reply = runner.challenge().await;
    let challenge = reply.expect(200);
    assert_eq!(
        keys(&challenge),
        set(&["challenge", "expiresAt"]),
        "{reply:?}"
    );
    let expires = parse_time(str_field(&challenge, "expiresAt"));
    assert!(
        expires > now_ms() && expires <= before + 60_000 + SKEW_MS,
        "a challenge lives 60 s: {reply:?}"
    );
    let text = str_field(&challenge, "challenge");
    let reply = runner.session_with(text, &runner.sign(text)).await;
    let body = reply.expect(200);
    assert_session_shape(&body, &runner_id, &org.id, before);

    let me = runner_self(str_field(&body, "token")).await.expect(200);
    assert_eq!(me["id"], runner_id.as_str());
    assert_eq!(me["identityModel"], "keypair");
    assert_eq!(me["fingerprint"], runner.fingerprint().as_str());
    assert_eq!(me["state"], "active");
}

#[tokio::test]
async fn enrollment_refuses_operator_tags_a_known_key_and_an_unknown_organization() {
    let org = bootstrap_org("identity-enroll-refusals");
    let runner = KeyPairRunner::generate();

    // Tags are operator-set only.
    let mut tagged = runner.enrollment(&org.id);
    tagged["tags"] = json!(["gpu"]);
    runner
        .enroll_from("198.51.100.1", &tagged)
        .await
        .expect_error_status(422);

    // The refused enrollment stored nothing: the same key still enrolls.
    let runner_id = runner.enroll(&org).await;
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["tags"],
        json!([])
    );

    // One key is one identity, in this organization or any other.
    runner
        .enroll_from("198.51.100.1", &runner.enrollment(&org.id))
        .await
        .expect_error(409, "FINGERPRINT_TAKEN");
    let other = bootstrap_org("identity-enroll-refusals-other");
    runner
        .enroll_from("198.51.100.1", &runner.enrollment(&other.id))
        .await
        .expect_error(409, "FINGERPRINT_TAKEN");

    // Unknown organization: answered as one that asks for a token is, so that a stranger
    // cannot tell which organizations exist (issue 41).
    let stranger = KeyPairRunner::generate();
    stranger
        .enroll_from(
            "198.51.100.1",
            &stranger.enrollment("org_doesnotexist0000000000"),
        )
        .await
        .expect_error(403, "ENROLLMENT_TOKEN_REQUIRED");
}

// =============================================================================================
// Refusals: bootstrap tokens and credentials
// =============================================================================================

#[tokio::test]
async fn session_refuses_a_wrong_runner_id_or_token() {
    let org = bootstrap_org("identity-wrong-token");
    let (runner_a, token_a) = register_simple_runner(&org, "wrong-token-a").await;
    let (runner_b, token_b) = register_simple_runner(&org, "wrong-token-b").await;

    session(&runner_b, &token_a)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    session(&runner_a, &token_b)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    session("run_doesnotexist", &token_a)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    let forged = format!("erb_{}", sha256_hex(&random_bytes()));
    session(&runner_a, &forged)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    session(&runner_a, "").await.expect_error_status(401);

    // Control: the right pairs work.
    exchange(&runner_a, &token_a).await;
    exchange(&runner_b, &token_b).await;
}

#[tokio::test]
async fn expired_bootstrap_token_is_refused() {
    let org = bootstrap_org("identity-token-ttl");
    let mut body = registration("token-ttl");
    body["bootstrapTokenTtlSeconds"] = json!(3600);
    let (runner, token) = register_runner(&org.admin_key, &body).await;
    let runner_id = id_of(&runner);

    // Valid within its lifetime.
    exchange(&runner_id, &token).await;

    let answer = d1(&format!(
        "UPDATE runners SET bootstrap_token_expires_at = 1 WHERE id = {} RETURNING id",
        sql_text(&runner_id)
    ));
    assert_eq!(
        d1_rows(&answer).len(),
        1,
        "moved the token's expiry: {answer}"
    );

    session(&runner_id, &token)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

#[tokio::test]
async fn rotation_replaces_the_token_and_kills_outstanding_credentials_at_once() {
    let org = bootstrap_org("identity-rotation");
    let (runner_id, old_token) = register_simple_runner(&org, "rotation").await;
    let first = session(&runner_id, &old_token).await.expect(200);
    let old_credential = str_field(&first, "token").to_owned();
    runner_self(&old_credential).await.expect(200);

    let reply = rotate(&org.admin_key, &runner_id).await;
    let rotated = reply.expect(200);
    assert_eq!(id_of(&rotated["runner"]), runner_id);
    let new_token = str_field(&rotated, "bootstrapToken").to_owned();
    assert!(new_token.starts_with("erb_"), "{reply:?}");
    assert_ne!(new_token, old_token);

    // The outstanding credential dies at once, and the old token with it.
    runner_self(&old_credential)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    session(&runner_id, &old_token)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    let second = session(&runner_id, &new_token).await.expect(200);
    runner_self(str_field(&second, "token")).await.expect(200);
    assert_ne!(
        second["jobSigning"]["keyId"], first["jobSigning"]["keyId"],
        "rotation moves the credential generation, so the job-signing key changes"
    );

    // Neither token, nor its hash, is ever shown again.
    let record = get_runner(&org.admin_key, &runner_id).await;
    assert_no_secret(&record.text, &[&old_token, &new_token]);
    assert_no_secret(
        &list_runners(&org.admin_key).await.text,
        &[&old_token, &new_token],
    );
}

#[tokio::test]
async fn expired_credential_is_refused() {
    let org = bootstrap_org("identity-expired-credential");
    let (runner_id, token) = register_simple_runner(&org, "expired-credential").await;
    let credential = exchange(&runner_id, &token).await;
    let claims = credential_claims(&credential);
    assert_eq!(claims.runner_id, runner_id);
    assert_eq!(claims.organization_id, org.id);

    // Control: with the server's secret and the server's claims we mint the server's token, and
    // the same claims in a fresh window are accepted. So the only thing wrong with the expired
    // one below is its expiry.
    assert_eq!(
        mint_credential(&claims),
        credential,
        "credential::issue with the server's secret reproduces the server's credential"
    );
    let now = now_ms();
    let fresh = mint_credential(&CredentialClaims {
        issued_at_ms: now,
        expires_at_ms: now + 60_000,
        ..claims.clone()
    });
    runner_self(&fresh).await.expect(200);

    let expired = mint_credential(&CredentialClaims {
        issued_at_ms: now - MAX_CREDENTIAL_MS,
        expires_at_ms: now - 1_000,
        ..claims.clone()
    });
    runner_self(&expired)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // A tampered credential, and a well-formed one signed with another server's secret.
    let mut tampered = credential.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).expect("ASCII credential");
    runner_self(&tampered)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    let foreign_secret = MasterSigningSecret::new(sha256_hex(&random_bytes())).expect("64 chars");
    let foreign = credential::issue(
        &foreign_secret,
        &CredentialClaims {
            issued_at_ms: now,
            expires_at_ms: now + 60_000,
            ..claims
        },
    )
    .expect("a valid lifetime");
    runner_self(&foreign)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

#[tokio::test]
async fn revoked_runner_is_refused_for_good() {
    let org = bootstrap_org("identity-revoked");
    let (runner_id, token) = register_simple_runner(&org, "revoked").await;
    let credential = exchange(&runner_id, &token).await;
    runner_self(&credential).await.expect(200);

    set_status(
        &org.admin_key,
        &runner_id,
        "revoked",
        "token leaked in a CI log",
    )
    .await;
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "revoked");
    parse_time(str_field(&record, "revokedAt"));

    session(&runner_id, &token)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    runner_self(&credential)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // Permanent: nothing moves out of revoked, and it cannot be rotated back to life.
    for status in ["active", "draining"] {
        patch_runner(
            &org.admin_key,
            &runner_id,
            &json!({ "status": status, "reason": "undo" }),
        )
        .await
        .expect_error(409, "ILLEGAL_RUNNER_TRANSITION");
    }
    rotate(&org.admin_key, &runner_id)
        .await
        .expect_error(409, "RUNNER_REVOKED");
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "revoked");
    assert_eq!(record["actions"], json!([]), "nothing is offered: {record}");
    session(&runner_id, &token)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

// =============================================================================================
// Refusals: key pairs and challenges
// =============================================================================================

#[tokio::test]
async fn revoked_keypair_runner_gets_no_challenge_and_no_session() {
    let org = bootstrap_org("identity-revoked-keypair");
    let runner = KeyPairRunner::generate();
    let runner_id = runner.enroll_approved(&org).await;
    let credential = credential_of(&runner.signed_session().await);
    let outstanding = runner.fresh_challenge().await;

    set_status(&org.admin_key, &runner_id, "revoked", "key leaked").await;

    runner
        .session_with(&outstanding, &runner.sign(&outstanding))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    uniform_challenge_without_session(&runner).await;
    runner_self(&credential)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

#[tokio::test]
async fn unapproved_key_gets_no_challenge_and_no_session() {
    let org = bootstrap_org("identity-unapproved");
    let runner = KeyPairRunner::generate();
    let runner_id = runner.enroll(&org).await;

    uniform_challenge_without_session(&runner).await;
    let invented = invented_challenge();
    runner
        .session_with(&invented, &runner.sign(&invented))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "pending_approval"
    );

    // A fingerprint nobody enrolled gets the same answer, and nothing is stored for it.
    let stranger = KeyPairRunner::generate();
    uniform_challenge_without_session(&stranger).await;
    let stored = d1(&format!(
        "SELECT id FROM runner_challenges WHERE fingerprint = {}",
        sql_text(&stranger.fingerprint())
    ));
    assert!(d1_rows(&stored).is_empty(), "{stored}");

    // Revocation works from pending too; the runner is told nothing more.
    set_status(&org.admin_key, &runner_id, "revoked", "not one of ours").await;
    uniform_challenge_without_session(&runner).await;
    patch_runner(
        &org.admin_key,
        &runner_id,
        &json!({ "status": "active", "reason": "approve after all" }),
    )
    .await
    .expect_error(409, "ILLEGAL_RUNNER_TRANSITION");
}

#[tokio::test]
async fn replayed_challenge_is_refused() {
    let org = bootstrap_org("identity-replay");
    let runner = KeyPairRunner::generate();
    runner.enroll_approved(&org).await;

    let challenge = runner.fresh_challenge().await;
    let signature = runner.sign(&challenge);
    credential_of(&runner.session_with(&challenge, &signature).await);
    runner
        .session_with(&challenge, &signature)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // Control: a new challenge works.
    credential_of(&runner.signed_session().await);
}

#[tokio::test]
async fn concurrent_answers_to_one_challenge_get_exactly_one_session() {
    let org = bootstrap_org("identity-replay-race");
    let runner = KeyPairRunner::generate();
    runner.enroll_approved(&org).await;

    let challenge = runner.fresh_challenge().await;
    let body = json!({
        "fingerprint": runner.fingerprint(),
        "challenge": challenge,
        "signature": runner.sign(&challenge),
    });
    let mut racers = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let body = body.clone();
        racers.spawn(async move { post("/api/remote-runners/session", None, &body).await });
    }
    let mut granted = 0;
    while let Some(reply) = racers.join_next().await {
        let reply = reply.expect("the request task ran");
        match reply.status {
            200 => granted += 1,
            _ => reply.expect_error(401, "AUTHENTICATION_FAILED"),
        }
    }
    assert_eq!(granted, 1, "a challenge is single use, even under a race");
}

#[tokio::test]
async fn expired_challenge_is_refused() {
    let org = bootstrap_org("identity-challenge-ttl");
    let runner = KeyPairRunner::generate();
    let runner_id = runner.enroll_approved(&org).await;

    let challenge = runner.fresh_challenge().await;
    // issued_at moves too: the schema requires expires_at > issued_at.
    let answer = d1(&format!(
        "UPDATE runner_challenges SET issued_at = 0, expires_at = 1 \
         WHERE runner_id = {} AND consumed_at IS NULL RETURNING id",
        sql_text(&runner_id)
    ));
    assert_eq!(d1_rows(&answer).len(), 1, "expired the challenge: {answer}");

    runner
        .session_with(&challenge, &runner.sign(&challenge))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    credential_of(&runner.signed_session().await);
}

#[tokio::test]
async fn bad_signatures_are_refused() {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;

    let org = bootstrap_org("identity-bad-signature");
    let runner = KeyPairRunner::generate();
    runner.enroll_approved(&org).await;
    let impostor = KeyPairRunner::generate();

    // Another key's signature over this runner's exact challenge message.
    let challenge = runner.fresh_challenge().await;
    runner
        .session_with(
            &challenge,
            &impostor.sign_for(&runner.fingerprint(), &challenge),
        )
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // The right key's signature with one bit flipped.
    let challenge = runner.fresh_challenge().await;
    let mut bytes = STANDARD
        .decode(runner.sign(&challenge))
        .expect("our own base64");
    bytes[10] ^= 0x01;
    runner
        .session_with(&challenge, &STANDARD.encode(&bytes))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // The right key, but a message naming another fingerprint.
    let challenge = runner.fresh_challenge().await;
    runner
        .session_with(
            &challenge,
            &runner.sign_for(&impostor.fingerprint(), &challenge),
        )
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // The right key, but the signature of a different challenge.
    let challenge = runner.fresh_challenge().await;
    let other = runner.fresh_challenge().await;
    runner
        .session_with(&challenge, &runner.sign(&other))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // Control: the right key over the right message works.
    let challenge = runner.fresh_challenge().await;
    credential_of(
        &runner
            .session_with(&challenge, &runner.sign(&challenge))
            .await,
    );
}

#[tokio::test]
async fn keypair_runners_cannot_rotate() {
    let org = bootstrap_org("identity-keypair-rotate");
    let runner = KeyPairRunner::generate();
    let runner_id = runner.enroll_approved(&org).await;
    rotate(&org.admin_key, &runner_id)
        .await
        .expect_error(409, "ROTATION_UNSUPPORTED");
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(
        record["actions"],
        json!(["drain", "revoke"]),
        "no rotation is offered: {record}"
    );
    credential_of(&runner.signed_session().await);
}

// =============================================================================================
// Refusals: tenancy and credential kinds
// =============================================================================================

#[tokio::test]
async fn another_organizations_runner_does_not_exist() {
    let org_a = bootstrap_org("identity-tenant-a");
    let org_b = bootstrap_org("identity-tenant-b");
    let (runner_id, token) = register_simple_runner(&org_a, "tenant-a").await;
    let pending = KeyPairRunner::generate();
    let pending_id = pending.enroll(&org_a).await;

    let b = &org_b.admin_key;
    for id in [&runner_id, &pending_id] {
        get_runner(b, id).await.expect_error(404, "NOT_FOUND");
        for status in ["active", "draining", "revoked"] {
            patch_runner(b, id, &json!({ "status": status, "reason": "not mine" }))
                .await
                .expect_error(404, "NOT_FOUND");
        }
        patch_runner(b, id, &json!({ "tags": ["mine"], "reason": "not mine" }))
            .await
            .expect_error(404, "NOT_FOUND");
        rotate(b, id).await.expect_error(404, "NOT_FOUND");
        runner_events(b, id).await.expect_error(404, "NOT_FOUND");
        get(&format!("/api/remote-runners/{id}/files/lscpu.txt"), b)
            .await
            .expect_error(404, "NOT_FOUND");
    }
    // Exactly as if it did not exist.
    get_runner(b, "run_doesnotexist")
        .await
        .expect_error(404, "NOT_FOUND");

    let listed = list_runners(b).await.expect(200);
    let ids: Vec<&str> = listed["runners"]
        .as_array()
        .unwrap_or_else(|| panic!("no runners list: {listed}"))
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert!(
        !ids.contains(&runner_id.as_str()) && !ids.contains(&pending_id.as_str()),
        "org B lists org A's runners: {listed}"
    );

    // B's attempts changed nothing.
    let a = &org_a.admin_key;
    let record = runner_record(a, &runner_id).await;
    assert_eq!(record["state"], "active");
    assert_eq!(record["tags"], json!([]));
    assert_eq!(
        runner_record(a, &pending_id).await["state"],
        "pending_approval"
    );
    exchange(&runner_id, &token).await;
    uniform_challenge_without_session(&pending).await;
}

#[tokio::test]
async fn another_organizations_api_keys_do_not_exist() {
    let org_a = bootstrap_org("identity-key-tenant-a");
    let org_b = bootstrap_org("identity-key-tenant-b");
    let created = new_api_key(
        &org_a.admin_key,
        &json!({ "name": "a-reader", "scopes": ["runs:read"] }),
    )
    .await;
    let key = str_field(&created, "apiKey");
    let key_id = id_of(&created);

    delete(
        &format!("/api/developer/api-keys/{key_id}"),
        &org_b.admin_key,
    )
    .await
    .expect_error(404, "NOT_FOUND");
    let listed = get("/api/developer/api-keys", &org_b.admin_key)
        .await
        .expect(200);
    assert!(
        listed["apiKeys"]
            .as_array()
            .is_some_and(|ks| ks.iter().all(|k| k["id"] != key_id.as_str())),
        "org B lists org A's key: {listed}"
    );
    // Still alive, and it sees only its own organization.
    let (runner_a, _) = register_simple_runner(&org_a, "key-tenant-a").await;
    let (runner_b, _) = register_simple_runner(&org_b, "key-tenant-b").await;
    let seen = list_runners(key).await.expect(200);
    let ids: Vec<&str> = seen["runners"]
        .as_array()
        .unwrap_or_else(|| panic!("no runners list: {seen}"))
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, [runner_a.as_str()], "{seen}");
    get_runner(key, &runner_b)
        .await
        .expect_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn api_key_is_refused_on_runner_endpoints() {
    let org = bootstrap_org("identity-key-on-runner-route");
    runner_self(&org.admin_key)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    put_raw(
        "/api/remote-runners/self/files/runner.log",
        &org.admin_key,
        b"hello".to_vec(),
    )
    .await
    .expect_error(401, "AUTHENTICATION_FAILED");
    call(Method::GET, "/api/remote-runners/self", None, None)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

#[tokio::test]
async fn runner_credential_is_refused_on_admin_endpoints() {
    let org = bootstrap_org("identity-credential-on-admin-route");
    let (runner_id, token) = register_simple_runner(&org, "credential-on-admin").await;
    let credential = exchange(&runner_id, &token).await;

    let refused = [
        list_runners(&credential).await,
        get_runner(&credential, &runner_id).await,
        runner_events(&credential, &runner_id).await,
        get(
            &format!("/api/remote-runners/{runner_id}/files/runner.log"),
            &credential,
        )
        .await,
        post(
            "/api/remote-runners",
            Some(&credential),
            &registration("credential-registers"),
        )
        .await,
        patch_runner(
            &credential,
            &runner_id,
            &json!({ "status": "draining", "reason": "self" }),
        )
        .await,
        rotate(&credential, &runner_id).await,
        get("/api/developer/api-keys", &credential).await,
        create_api_key(
            &credential,
            &json!({ "name": "x", "scopes": ["runs:read"] }),
        )
        .await,
        // Nor is a bootstrap token an API key.
        list_runners(&token).await,
    ];
    for reply in &refused {
        reply.expect_error(401, "AUTHENTICATION_FAILED");
    }
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "active"
    );
    call(Method::GET, "/api/remote-runners", None, None)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

#[tokio::test]
async fn short_signing_secret_refuses_sessions_with_503() {
    let base = required_env("SHORT_SECRET_BASE_URL");
    let state = required_env("SHORT_SECRET_STATE_DIR");
    let org = bootstrap_org_in(&state, "identity-short-secret");
    let reply = call_at(
        &base,
        Method::POST,
        "/api/remote-runners",
        Some(&org.admin_key),
        Some(&registration("short-secret")),
    )
    .await;
    let registered = reply.expect(201);
    let runner_id = id_of(&registered["runner"]);
    let token = str_field(&registered, "bootstrapToken");

    let reply = call_at(
        &base,
        Method::POST,
        "/api/remote-runners/session",
        None,
        Some(&json!({ "runnerId": runner_id, "bootstrapToken": token })),
    )
    .await;
    reply.expect_error(503, "SIGNING_SECRET_TOO_SHORT");
    assert!(!reply.text.contains("erc_"), "no credential: {reply:?}");
}

// =============================================================================================
// API keys
// =============================================================================================

#[tokio::test]
async fn member_key_with_runs_read_lists_runners_but_cannot_register() {
    let org = bootstrap_org("identity-member-read");
    let (runner_id, _) = register_simple_runner(&org, "member-read").await;

    let reply = create_api_key(
        &org.admin_key,
        &json!({ "name": "dashboard", "scopes": ["runs:read"] }),
    )
    .await;
    let created = reply.expect(201);
    assert_eq!(
        keys(&created),
        set(&[
            "id",
            "name",
            "prefix",
            "scopes",
            "role",
            "createdAt",
            "expiresAt",
            "apiKey"
        ]),
        "{reply:?}"
    );
    assert_eq!(created["role"], "member", "the default role");
    assert_eq!(created["scopes"], json!(["runs:read"]));
    assert_eq!(created["name"], "dashboard");
    parse_time(str_field(&created, "createdAt"));
    let key = str_field(&created, "apiKey").to_owned();
    assert!(
        key.starts_with("erk_") && key.len() == 68 && is_hex64(&key[4..]),
        "erk_ + 64 hex: {key:?}"
    );
    assert!(key.starts_with(str_field(&created, "prefix")));

    let listed = list_runners(&key).await.expect(200);
    assert!(
        listed["runners"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|r| r["id"] == runner_id.as_str())),
        "the member sees the org's runner: {listed}"
    );
    runner_record(&key, &runner_id).await;

    post(
        "/api/remote-runners",
        Some(&key),
        &registration("member-registers"),
    )
    .await
    .expect_error(403, "FORBIDDEN");
    patch_runner(
        &key,
        &runner_id,
        &json!({ "status": "draining", "reason": "member" }),
    )
    .await
    .expect_error(403, "FORBIDDEN");
    rotate(&key, &runner_id)
        .await
        .expect_error(403, "FORBIDDEN");
    create_api_key(
        &key,
        &json!({ "name": "escalate", "scopes": ["admin:org"] }),
    )
    .await
    .expect_error(403, "FORBIDDEN");
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "active"
    );
}

#[tokio::test]
async fn member_key_with_admin_scope_still_needs_the_admin_role() {
    let org = bootstrap_org("identity-member-admin-scope");
    let member = new_api_key(
        &org.admin_key,
        &json!({ "name": "member with admin scope", "scopes": ["runs:read", "admin:org"], "role": "member" }),
    )
    .await;
    let member_key = str_field(&member, "apiKey");
    assert_eq!(member["role"], "member");
    list_runners(member_key).await.expect(200);
    post(
        "/api/remote-runners",
        Some(member_key),
        &registration("member-admin-registers"),
    )
    .await
    .expect_error(403, "FORBIDDEN");
    create_api_key(member_key, &json!({ "name": "x", "scopes": ["runs:read"] }))
        .await
        .expect_error(403, "FORBIDDEN");

    // Control: the same scopes with the admin role may register.
    let admin = new_api_key(
        &org.admin_key,
        &json!({ "name": "second admin", "scopes": ["runs:read", "admin:org"], "role": "admin" }),
    )
    .await;
    assert_eq!(admin["role"], "admin");
    register_runner(
        str_field(&admin, "apiKey"),
        &registration("admin-registers"),
    )
    .await;
}

#[tokio::test]
async fn revoked_api_key_stops_working_at_once() {
    let org = bootstrap_org("identity-revoke-key");
    let created = new_api_key(
        &org.admin_key,
        &json!({ "name": "short-lived", "scopes": ["runs:read"] }),
    )
    .await;
    let key = str_field(&created, "apiKey");
    let key_id = id_of(&created);
    list_runners(key).await.expect(200);

    let reply = delete(&format!("/api/developer/api-keys/{key_id}"), &org.admin_key).await;
    let revoked = reply.expect(200);
    assert_eq!(revoked["id"], key_id.as_str(), "{reply:?}");
    parse_time(str_field(&revoked, "revokedAt"));

    list_runners(key)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    let listed = get("/api/developer/api-keys", &org.admin_key)
        .await
        .expect(200);
    let entry = listed["apiKeys"]
        .as_array()
        .and_then(|ks| ks.iter().find(|k| k["id"] == key_id.as_str()))
        .unwrap_or_else(|| panic!("the revoked key is still listed: {listed}"));
    assert!(entry["revokedAt"].is_string(), "{entry}");
    // The admin key is untouched.
    list_runners(&org.admin_key).await.expect(200);
}

#[tokio::test]
async fn unknown_scope_is_refused() {
    let org = bootstrap_org("identity-unknown-scope");
    create_api_key(
        &org.admin_key,
        &json!({ "name": "bad", "scopes": ["runs:read", "runs:everything"] }),
    )
    .await
    .expect_error(422, "INVALID_SCOPES");
    let listed = get("/api/developer/api-keys", &org.admin_key)
        .await
        .expect(200);
    assert!(
        listed["apiKeys"]
            .as_array()
            .is_some_and(|ks| ks.iter().all(|k| k["name"] != "bad")),
        "a refused key was stored: {listed}"
    );
}

#[tokio::test]
async fn api_key_list_never_shows_a_key_or_its_hash() {
    let org = bootstrap_org("identity-key-list");
    let created = new_api_key(
        &org.admin_key,
        &json!({ "name": "ci", "scopes": ["runs:read", "runs:write"] }),
    )
    .await;
    let key = str_field(&created, "apiKey").to_owned();

    let reply = get("/api/developer/api-keys", &org.admin_key).await;
    let listed = reply.expect(200);
    assert_no_secret(&reply.text, &[&key, &org.admin_key]);
    let entries = listed["apiKeys"]
        .as_array()
        .unwrap_or_else(|| panic!("no apiKeys list: {reply:?}"));
    assert!(entries.len() >= 2, "the bootstrap key and ours: {reply:?}");
    for entry in entries {
        assert_eq!(
            keys(entry),
            set(&[
                "id",
                "name",
                "prefix",
                "scopes",
                "role",
                "createdAt",
                "lastUsedAt",
                "revokedAt",
                "expiresAt"
            ]),
            "{entry}"
        );
    }
    let ours = entries
        .iter()
        .find(|k| k["id"] == created["id"])
        .unwrap_or_else(|| panic!("our key is not listed: {reply:?}"));
    assert_eq!(ours["name"], "ci");
    assert_eq!(ours["role"], "member");
    assert_eq!(ours["scopes"], json!(["runs:read", "runs:write"]));
    assert_eq!(ours["prefix"], created["prefix"]);
    assert!(ours["revokedAt"].is_null());
}

// =============================================================================================
// Registration
// =============================================================================================

#[tokio::test]
async fn registration_shows_the_bootstrap_token_once() {
    let org = bootstrap_org("identity-register");
    let body = registration("register-once");
    let reply = post("/api/remote-runners", Some(&org.admin_key), &body).await;
    let registered = reply.expect(201);
    assert_eq!(
        keys(&registered),
        set(&["runner", "bootstrapToken"]),
        "{reply:?}"
    );
    let token = str_field(&registered, "bootstrapToken").to_owned();
    assert!(token.starts_with("erb_"), "{token:?}");
    let runner = &registered["runner"];
    assert_runner_shape(runner);
    let runner_id = id_of(runner);
    assert_eq!(runner["identityModel"], "bootstrap");
    assert_eq!(runner["state"], "active");
    assert_eq!(runner["organizationId"], org.id.as_str());
    assert_eq!(runner["name"], body["name"]);
    assert_eq!(runner["runnerKey"], body["runnerKey"]);
    assert!(runner["fingerprint"].is_null() && runner["publicKey"].is_null());
    assert_eq!(runner["activeClaims"], 0);
    assert_eq!(runner["completedJobs"], 0);
    assert_eq!(runner["files"], json!([]));
    parse_time(str_field(runner, "registeredAt"));
    // Without the secret in the runner record itself either.
    assert_no_secret(&runner.to_string(), &[&token]);

    let record = get_runner(&org.admin_key, &runner_id).await;
    assert_eq!(record.expect(200)["id"], runner_id.as_str());
    assert_no_secret(&record.text, &[&token]);
    let listed = list_runners(&org.admin_key).await;
    assert!(listed.expect(200)["runners"]
        .as_array()
        .is_some_and(|rs| rs.iter().any(|r| r["id"] == runner_id.as_str())));
    assert_no_secret(&listed.text, &[&token]);

    // The token works, and the credential and signing secret stay out of every record.
    let session_body = session(&runner_id, &token).await.expect(200);
    let credential = str_field(&session_body, "token");
    let secret = str_field(&session_body["jobSigning"], "secret");
    for reply in [
        get_runner(&org.admin_key, &runner_id).await,
        list_runners(&org.admin_key).await,
        runner_self(credential).await,
    ] {
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_no_secret(&reply.text, &[&token, credential, secret]);
    }
}

#[tokio::test]
async fn duplicate_runner_key_is_refused_within_an_organization() {
    let org = bootstrap_org("identity-duplicate-key");
    let body = registration("duplicate");
    register_runner(&org.admin_key, &body).await;
    post("/api/remote-runners", Some(&org.admin_key), &body)
        .await
        .expect_error(409, "RUNNER_KEY_TAKEN");

    // Unique per organization, not globally.
    let other = bootstrap_org("identity-duplicate-key-other");
    register_runner(&other.admin_key, &body).await;
}

#[tokio::test]
async fn invalid_capabilities_are_refused() {
    let org = bootstrap_org("identity-invalid-capabilities");
    let invalid = [
        json!({ "executionKinds": ["teleport"], "runtimes": ["python3.12"] }),
        json!({ "executionKinds": ["prompt"] }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "limits": { "cpuSeconds": -1 } }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "network": { "mode": "everything" } }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "tags": ["gpu"] }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "streaming": "yes" }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "protocolVersion": "2" }),
        json!("fast"),
    ];
    for capabilities in invalid {
        let mut body = registration("invalid-capabilities");
        body["capabilities"] = capabilities.clone();
        let reply = post("/api/remote-runners", Some(&org.admin_key), &body).await;
        assert_eq!(reply.status, 422, "{capabilities} was accepted: {reply:?}");
        reply.expect_error(422, "INVALID_CAPABILITIES");
    }
    let listed = list_runners(&org.admin_key).await.expect(200);
    assert_eq!(listed["runners"], json!([]), "nothing was registered");
}

#[tokio::test]
async fn capability_defaults_are_filled_and_hashed() {
    let org = bootstrap_org("identity-capability-defaults");
    let declared = minimal_capabilities();
    let mut body = registration("capability-defaults");
    body["capabilities"] = declared.clone();
    let (runner, _) = register_runner(&org.admin_key, &body).await;

    let caps = &runner["capabilities"];
    assert_eq!(caps["network"], json!({ "mode": "deny_all" }), "{caps}");
    assert_eq!(caps["streaming"], true, "{caps}");
    assert_eq!(caps["cancellation"], true, "{caps}");
    assert_eq!(
        caps["limits"],
        json!({ "cpuSeconds": 3600, "memoryMb": 65536, "wallSeconds": 86400, "outputBytes": 104857600 }),
        "{caps}"
    );
    assert_eq!(caps["protocolVersion"], "1", "{caps}");
    assert_eq!(caps["executionKinds"], json!(["prompt"]));
    assert_eq!(caps["runtimes"], json!(["python3.12"]));
    assert_eq!(runner["protocolVersion"], "1");
    assert_eq!(runner["maxConcurrentJobs"], 1);
    assert_eq!(runner["external"], false);
    assert_eq!(runner["problemTypes"], json!([]));

    let hash = str_field(&runner, "capabilityHash");
    assert!(is_hex64(hash), "capabilityHash {hash:?}");
    assert_eq!(
        hash,
        stable_json::hash(caps).as_str(),
        "capabilityHash = H(capabilities)"
    );
    let canonical = CapabilityDocument::parse(&declared).expect("a valid declaration");
    assert_eq!(
        caps,
        &canonical.to_value(),
        "the stored document is the canonical one"
    );
    assert_eq!(
        runner_record(&org.admin_key, &id_of(&runner)).await["capabilityHash"],
        hash
    );

    // A fuller declaration: partial limits keep the other defaults; lists are sets.
    let declared = json!({
        "executionKinds": ["scorer", "prompt"],
        "runtimes": ["nodejs20", "python3.12"],
        "limits": { "cpuSeconds": 60 },
        "network": { "mode": "allowlist", "origins": ["https://api.example.com"] },
        "streaming": false,
        "problemTypes": ["math/v1"],
        "external": true,
    });
    let mut body = registration("capability-full");
    body["capabilities"] = declared.clone();
    body["tags"] = json!(["gpu"]);
    let (runner, _) = register_runner(&org.admin_key, &body).await;
    let caps = &runner["capabilities"];
    assert_eq!(
        caps["limits"],
        json!({ "cpuSeconds": 60, "memoryMb": 65536, "wallSeconds": 86400, "outputBytes": 104857600 })
    );
    assert_eq!(caps["streaming"], false);
    assert_eq!(caps["cancellation"], true);
    assert_eq!(runner["external"], true);
    assert_eq!(runner["problemTypes"], json!(["math/v1"]));
    assert_eq!(runner["tags"], json!(["gpu"]));
    assert_eq!(
        str_field(&runner, "capabilityHash"),
        stable_json::hash(caps).as_str()
    );
    assert_eq!(
        caps,
        &CapabilityDocument::parse(&declared)
            .expect("a valid declaration")
            .to_value()
    );
}

#[tokio::test]
async fn top_level_max_concurrent_jobs_overrides_the_document() {
    let org = bootstrap_org("identity-max-concurrent");
    let mut body = registration("max-concurrent");
    body["capabilities"]["maxConcurrentJobs"] = json!(2);
    body["maxConcurrentJobs"] = json!(3);
    let (runner, _) = register_runner(&org.admin_key, &body).await;
    assert_eq!(runner["maxConcurrentJobs"], 3, "{runner}");
    assert_eq!(
        str_field(&runner, "capabilityHash"),
        stable_json::hash(&runner["capabilities"]).as_str()
    );

    let mut body = registration("max-concurrent-doc");
    body["capabilities"]["maxConcurrentJobs"] = json!(4);
    let (runner, _) = register_runner(&org.admin_key, &body).await;
    assert_eq!(runner["maxConcurrentJobs"], 4, "{runner}");
}

// =============================================================================================
// Status changes and their audit trail
// =============================================================================================

#[tokio::test]
async fn drain_and_reactivate_are_audited_with_their_reasons() {
    let org = bootstrap_org("identity-drain");
    let (runner_id, token) = register_simple_runner(&org, "drain").await;

    set_status(
        &org.admin_key,
        &runner_id,
        "draining",
        "kernel upgrade on host 7",
    )
    .await;
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "draining");
    assert_eq!(record["stateReason"], "kernel upgrade on host 7");
    // Offered: each move the runner machine would make, and the bootstrap token's rotation.
    assert_eq!(
        record["actions"],
        json!(["activate", "rotate", "revoke"]),
        "{record}"
    );

    // A draining runner may still authenticate, and stays draining.
    let credential = exchange(&runner_id, &token).await;
    assert_eq!(
        runner_self(&credential).await.expect(200)["state"],
        "draining"
    );
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "draining"
    );

    set_status(&org.admin_key, &runner_id, "active", "upgrade finished").await;
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active");
    assert_eq!(
        record["actions"],
        json!(["drain", "rotate", "revoke"]),
        "{record}"
    );

    let reply = patch_runner(
        &org.admin_key,
        &runner_id,
        &json!({ "tags": ["gpu", "slow"], "reason": "moved to the GPU pool" }),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let record = runner_record(&org.admin_key, &runner_id).await;
    let tags: BTreeSet<&str> = record["tags"]
        .as_array()
        .unwrap_or_else(|| panic!("tags: {record}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(tags, BTreeSet::from(["gpu", "slow"]), "{record}");
    assert_eq!(record["state"], "active");

    let reasons = event_reasons(&org.admin_key, &runner_id).await;
    for reason in [
        "kernel upgrade on host 7",
        "upgrade finished",
        "moved to the GPU pool",
    ] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no audit event with reason {reason:?}: {reasons:?}"
        );
    }
}

#[tokio::test]
async fn status_change_without_a_reason_is_refused() {
    let org = bootstrap_org("identity-reason-required");
    let (runner_id, _) = register_simple_runner(&org, "reason-required").await;
    for body in [
        json!({ "status": "draining" }),
        json!({ "status": "draining", "reason": "" }),
        json!({ "tags": ["gpu"] }),
    ] {
        patch_runner(&org.admin_key, &runner_id, &body)
            .await
            .expect_error(422, "REASON_REQUIRED");
    }
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active");
    assert_eq!(record["tags"], json!([]));
}

#[tokio::test]
async fn lost_runner_comes_back_active_by_exchanging_a_session() {
    let org = bootstrap_org("identity-lost");
    let (runner_id, token) = register_simple_runner(&org, "lost").await;
    let answer = d1(&format!(
        "UPDATE runners SET state = 'lost', state_reason = 'e2e: heartbeats stopped' \
         WHERE id = {} RETURNING id",
        sql_text(&runner_id)
    ));
    assert_eq!(d1_rows(&answer).len(), 1, "{answer}");
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "lost"
    );

    let credential = exchange(&runner_id, &token).await;
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "active"
    );
    assert_eq!(
        runner_self(&credential).await.expect(200)["state"],
        "active"
    );
}

// =============================================================================================
// Runner files
// =============================================================================================

#[tokio::test]
async fn runner_files_from_enrollment_and_upload_are_served_to_the_organization() {
    let org = bootstrap_org("identity-files");
    let runner = KeyPairRunner::generate();
    let lscpu = "Architecture: x86_64\nCPU(s): 4\nModel name: e2e ünïcode\n";
    let mut body = runner.enrollment(&org.id);
    body["files"] = json!({ "lscpu.txt": lscpu });
    let runner_id = id_of(&runner.enroll_from("198.51.100.9", &body).await.expect(201)["runner"]);

    let record = runner_record(&org.admin_key, &runner_id).await;
    let files = record["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files list: {record}"));
    assert_eq!(files.len(), 1, "{record}");
    assert_eq!(
        keys(&files[0]),
        set(&["name", "size", "contentHash", "uploadedAt"])
    );
    assert_eq!(files[0]["name"], "lscpu.txt");
    assert_eq!(files[0]["size"], lscpu.len());
    assert!(is_hex64(str_field(&files[0], "contentHash")));
    parse_time(str_field(&files[0], "uploadedAt"));

    let reply = get(
        &format!("/api/remote-runners/{runner_id}/files/lscpu.txt"),
        &org.admin_key,
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.content_type().starts_with("text/plain"), "{reply:?}");
    assert_eq!(reply.text, lscpu);

    // Upload from the runner itself, with its credential.
    approve(
        &org.admin_key,
        &runner_id,
        &runner.fingerprint(),
        "approved for files",
    )
    .await;
    let credential = credential_of(&runner.signed_session().await);
    let log = "runner started\nclaimed nothing\n";
    let reply = put_raw(
        "/api/remote-runners/self/files/runner.log",
        &credential,
        log.as_bytes().to_vec(),
    )
    .await;
    assert!(matches!(reply.status, 200 | 201), "{reply:?}");
    let uploaded = reply.json();
    assert_eq!(
        keys(&uploaded),
        set(&["name", "size", "contentHash", "uploadedAt"]),
        "{reply:?}"
    );
    assert_eq!(uploaded["name"], "runner.log");
    assert_eq!(uploaded["size"], log.len());
    let first_hash = str_field(&uploaded, "contentHash").to_owned();
    assert!(is_hex64(&first_hash));
    assert_eq!(
        first_hash,
        sha256_hex(log.as_bytes()),
        "contentHash is the SHA-256 of the file's bytes"
    );

    // Any runs:read key of the organization may read it.
    let reader = new_api_key(
        &org.admin_key,
        &json!({ "name": "reader", "scopes": ["runs:read"] }),
    )
    .await;
    let reply = get(
        &format!("/api/remote-runners/{runner_id}/files/runner.log"),
        str_field(&reader, "apiKey"),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.text, log);

    // An upload replaces the file of that name.
    let log2 = "runner restarted\n";
    let reply = put_raw(
        "/api/remote-runners/self/files/runner.log",
        &credential,
        log2.as_bytes().to_vec(),
    )
    .await;
    assert!(matches!(reply.status, 200 | 201), "{reply:?}");
    assert_ne!(str_field(&reply.json(), "contentHash"), first_hash);
    let reply = get(
        &format!("/api/remote-runners/{runner_id}/files/runner.log"),
        &org.admin_key,
    )
    .await;
    assert_eq!(reply.text, log2, "{reply:?}");
    let record = runner_record(&org.admin_key, &runner_id).await;
    let names: Vec<&str> = record["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files list: {record}"))
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["lscpu.txt", "runner.log"], "{record}");

    get(
        &format!("/api/remote-runners/{runner_id}/files/missing.txt"),
        &org.admin_key,
    )
    .await
    .expect_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn enrollment_files_are_checked_like_uploads() {
    let org = bootstrap_org("identity-enroll-files");
    let runner = KeyPairRunner::generate();
    let big = "a".repeat(256 * 1024 + 1);
    for files in [
        json!({ "bad name.txt": "x" }),
        json!({ "../lscpu.txt": "x" }),
        json!({ "lscpu.txt": big }),
    ] {
        let mut body = runner.enrollment(&org.id);
        body["files"] = files.clone();
        let reply = runner.enroll_from("198.51.100.30", &body).await;
        assert!(
            matches!(reply.status, 413 | 422),
            "enrollment files {} accepted: {reply:?}",
            &files.to_string()[..40.min(files.to_string().len())]
        );
        reply.expect_error_status(reply.status);
    }
    // Nothing of the refused enrollments was stored: the key still enrolls, without files.
    let runner_id = runner.enroll(&org).await;
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["files"],
        json!([])
    );
}

#[tokio::test]
async fn runner_file_uploads_are_capped_at_256_kib() {
    let org = bootstrap_org("identity-file-cap");
    let (runner_id, token) = register_simple_runner(&org, "file-cap").await;
    let credential = exchange(&runner_id, &token).await;

    let limit = 256 * 1024;
    let reply = put_raw(
        "/api/remote-runners/self/files/limit.log",
        &credential,
        vec![b'a'; limit],
    )
    .await;
    assert!(
        matches!(reply.status, 200 | 201),
        "exactly 256 KiB is allowed: {reply:?}"
    );
    assert_eq!(reply.json()["size"], limit);

    let reply = put_raw(
        "/api/remote-runners/self/files/over.log",
        &credential,
        vec![b'a'; limit + 1],
    )
    .await;
    assert!(
        matches!(reply.status, 413 | 422),
        "one byte over 256 KiB is refused: {reply:?}"
    );
    reply.expect_error_status(reply.status);
    get(
        &format!("/api/remote-runners/{runner_id}/files/over.log"),
        &org.admin_key,
    )
    .await
    .expect_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn bad_runner_file_names_are_refused() {
    let org = bootstrap_org("identity-file-names");
    let (runner_id, token) = register_simple_runner(&org, "file-names").await;
    let credential = exchange(&runner_id, &token).await;
    for name in [
        "bad%20name.log",
        "bad$name.log",
        "tilde~.log",
        "semi;colon.txt",
    ] {
        put_raw(
            &format!("/api/remote-runners/self/files/{name}"),
            &credential,
            b"x".to_vec(),
        )
        .await
        .expect_error_status(422);
    }
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["files"], json!([]), "{record}");

    // Control: a good name with every allowed character class.
    let reply = put_raw(
        "/api/remote-runners/self/files/Good_name-1.2.txt",
        &credential,
        b"x".to_vec(),
    )
    .await;
    assert!(matches!(reply.status, 200 | 201), "{reply:?}");
}

#[tokio::test]
async fn a_runners_events_page_newest_first_and_every_event_is_reachable() {
    let org = bootstrap_org("identity-events-page");
    let (runner_id, _) = register_simple_runner(&org, "events").await;
    // 1,100 audit events, more than one page may hold (1,000), written as an operator would.
    d1(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1100) \
         INSERT INTO job_events (organization_id, runner_id, actor, type, reason, at) \
         SELECT {}, {}, 'api_key:e2e', 'runner.tags_changed', 'change ' || i, {} + i FROM n",
        sql_text(&org.id),
        sql_text(&runner_id),
        now_ms()
    ));
    let total = 1100 + 1; // and the registration's own event
    let mut ids: Vec<i64> = Vec::new();
    let mut cursor: Option<String> = None;
    // At most 3 pages of 500 hold them all; a list that never ends fails the loop's bound.
    for page_number in 0..4 {
        let path = match &cursor {
            None => format!("/api/remote-runners/{runner_id}/events?limit=500"),
            Some(c) => format!("/api/remote-runners/{runner_id}/events?limit=500&cursor={c}"),
        };
        let page = get(&path, &org.admin_key).await.expect(200);
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if page_number == 0 {
            // Newest first: the last change is the first row.
            assert_eq!(events[0]["reason"], "change 1100", "{}", events[0]);
        }
        ids.extend(
            events
                .iter()
                .map(|e| e["id"].as_i64().expect("an integer id")),
        );
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(ids.len(), total, "every event once");
    assert!(
        ids.windows(2).all(|w| w[0] > w[1]),
        "newest first, no repeat"
    );
    // A cursor this list did not write is refused with a code.
    get(
        &format!("/api/remote-runners/{runner_id}/events?cursor=not-a-cursor"),
        &org.admin_key,
    )
    .await
    .expect_error(422, "INVALID_CURSOR");
}

#[tokio::test]
async fn a_bootstrap_token_registered_without_a_lifetime_expires_in_90_days() {
    let org = bootstrap_org("identity-bootstrap-expiry");
    let (runner_id, token) = register_simple_runner(&org, "expiring").await;
    // The token's lifetime is on the record: 90 days from now (to the minute).
    let record = runner_record(&org.admin_key, &runner_id).await;
    let expires = record["bootstrapTokenExpiresAt"]
        .as_str()
        .unwrap_or_else(|| panic!("no bootstrapTokenExpiresAt in {record}"))
        .to_owned();
    let stored = d1(&format!(
        "SELECT bootstrap_token_expires_at - registered_at AS ttl FROM runners WHERE id = {}",
        sql_text(&runner_id)
    ));
    assert_eq!(
        d1_rows(&stored)[0]["ttl"],
        90 * 86_400_000_i64,
        "{stored} ({expires})"
    );
    exchange(&runner_id, &token).await;
    // 91 days on (the stored times moved back, as the clock cannot be moved forward here), the
    // token no longer exchanges: the one answer for every refusal.
    d1(&format!(
        "UPDATE runners SET bootstrap_token_expires_at = bootstrap_token_expires_at - {} \
         WHERE id = {}",
        91 * 86_400_000_i64,
        sql_text(&runner_id)
    ));
    session(&runner_id, &token)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    // Rotation gives the new token a fresh 90 days.
    let rotated = post(
        &format!("/api/remote-runners/{runner_id}/rotate"),
        Some(&org.admin_key),
        &json!({}),
    )
    .await
    .expect(200);
    let fresh = rotated["bootstrapToken"].as_str().expect("a new token");
    assert!(
        rotated["runner"]["bootstrapTokenExpiresAt"].is_string(),
        "{rotated}"
    );
    exchange(&runner_id, fresh).await;
}
