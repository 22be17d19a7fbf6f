//! Refusals of bootstrap tokens and runner credentials.

use super::*;

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
    let old_credential = str_of(&first, "token").to_owned();
    runner_self(&old_credential).await.expect(200);

    let reply = rotate(&org.admin_key, &runner_id).await;
    let rotated = reply.expect(200);
    assert_eq!(id_of(&rotated["runner"]), runner_id);
    let new_token = str_of(&rotated, "bootstrapToken").to_owned();
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
    runner_self(str_of(&second, "token")).await.expect(200);
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
    parse_time(str_of(&record, "revokedAt"));

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
