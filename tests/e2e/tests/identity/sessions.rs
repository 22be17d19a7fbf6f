//! Both identity models through to a working credential.

use super::*;

#[tokio::test]
async fn bootstrap_token_session_has_the_protocol_shape_and_works_on_self() {
    let org = bootstrap_org("identity-bootstrap-session");
    let (runner_id, token) = register_simple_runner(&org, "bootstrap-session").await;
    assert!(token.starts_with("erb_"), "bootstrap token {token:?}");

    let before = now_ms();
    let reply = session(&runner_id, &token).await;
    let body = reply.expect(200);
    assert_session_shape(&body, &runner_id, &org.id, before);
    let credential = str_of(&body, "token").to_owned();

    let me = runner_self(&credential).await.expect(200);
    assert_runner_shape(&me);
    assert_eq!(me["id"], runner_id.as_str());
    assert_eq!(me["organizationId"], org.id.as_str());
    assert_eq!(me["identityModel"], "bootstrap");
    assert_eq!(me["state"], "active");
    let secret = str_of(&body["jobSigning"], "secret");
    assert_no_secret(
        &runner_self(&credential).await.text,
        &[&token, &credential, secret],
    );

    // The token is reusable: the SDK exchanges it again whenever its credential nears expiry,
    // and the earlier credential keeps working (nothing was rotated).
    let again = session(&runner_id, &token).await.expect(200);
    assert_session_shape(&again, &runner_id, &org.id, before);
    runner_self(str_of(&again, "token")).await.expect(200);
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
    parse_time(str_of(&approved, "approvedAt"));

    // Challenge: single use, 60 s.
    let before = now_ms();
    let reply = runner.challenge().await;
    let challenge = reply.expect(200);
    assert_eq!(
        keys(&challenge),
        set(&["challenge", "expiresAt"]),
        "{reply:?}"
    );
    let expires = parse_time(str_of(&challenge, "expiresAt"));
    assert!(
        expires > now_ms() && expires <= before + 60_000 + SKEW_MS,
        "a challenge lives 60 s: {reply:?}"
    );
    let text = str_of(&challenge, "challenge");
    let reply = runner.session_with(text, &runner.sign(text)).await;
    let body = reply.expect(200);
    assert_session_shape(&body, &runner_id, &org.id, before);

    let me = runner_self(str_of(&body, "token")).await.expect(200);
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
