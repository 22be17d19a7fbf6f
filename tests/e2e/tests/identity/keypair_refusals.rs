//! Refusals of key pairs and challenges.

use super::*;

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
