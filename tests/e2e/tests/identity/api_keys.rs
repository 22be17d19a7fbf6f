//! API keys: scopes, roles, expiry and revocation.

use super::*;

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
            "lastUsedAt",
            "revokedAt",
            "expiresAt",
            "apiKey"
        ]),
        "the listed shape with its secret: {reply:?}"
    );
    assert!(created["lastUsedAt"].is_null() && created["revokedAt"].is_null());
    assert_eq!(created["role"], "member", "the default role");
    assert_eq!(created["scopes"], json!(["runs:read"]));
    assert_eq!(created["name"], "dashboard");
    parse_time(str_of(&created, "createdAt"));
    let key = str_of(&created, "apiKey").to_owned();
    assert!(
        key.starts_with("erk_") && key.len() == 68 && is_hex64(&key[4..]),
        "erk_ + 64 hex: {key:?}"
    );
    assert!(key.starts_with(str_of(&created, "prefix")));

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
    let member_key = str_of(&member, "apiKey");
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
    register_runner(str_of(&admin, "apiKey"), &registration("admin-registers")).await;
}

#[tokio::test]
async fn revoked_api_key_stops_working_at_once() {
    let org = bootstrap_org("identity-revoke-key");
    let created = new_api_key(
        &org.admin_key,
        &json!({ "name": "short-lived", "scopes": ["runs:read"] }),
    )
    .await;
    let key = str_of(&created, "apiKey");
    let key_id = id_of(&created);
    list_runners(key).await.expect(200);

    let reply = delete(&format!("/api/developer/api-keys/{key_id}"), &org.admin_key).await;
    let revoked = reply.expect(200);
    assert_eq!(revoked["id"], key_id.as_str(), "{reply:?}");
    parse_time(str_of(&revoked, "revokedAt"));

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
    let key = str_of(&created, "apiKey").to_owned();

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
