//! Refusals across organizations and credential kinds.

use super::*;

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
    let key = str_of(&created, "apiKey");
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
    let token = str_of(&registered, "bootstrapToken");

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
