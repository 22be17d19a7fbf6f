//! The release registry: artifacts, versions, promotions.

use super::*;

#[tokio::test]
async fn artifact_reads_back_with_its_versions_newest_first_and_their_promotions() {
    let org = bootstrap_org("releases-read");
    let key = &org.admin_key;
    let name = unique("summarize");
    let reply = create_artifact(key, "prompt", &name).await;
    let created = reply.expect(201);
    let artifact_id = text(&created, "id");
    assert!(artifact_id.starts_with("art_"), "{reply:?}");
    assert_eq!(created["kind"], "prompt");
    assert_eq!(created["name"], name.as_str());
    let created_at = parse_time(&text(&created, "createdAt"));
    assert!((created_at - now_ms()).abs() < 60_000, "{reply:?}");

    let first_content = json!({ "template": "v1" });
    let second_content = json!({ "template": "v2" });
    let reply = create_version(key, &artifact_id, &first_content).await;
    let first = reply.expect(201);
    assert_eq!(first["artifactId"], artifact_id.as_str(), "{reply:?}");
    assert_eq!(
        first["contentHash"],
        h(&first_content).as_str(),
        "{reply:?}"
    );
    assert!(first["createdAt"].is_string(), "{reply:?}");
    let first_id = first["id"].as_u64().expect("integer version id");
    let second_id = version(key, &artifact_id, &second_content).await;
    assert!(
        second_id > first_id,
        "version ids grow: {first_id} then {second_id}"
    );

    for environment in ["staging", "dev"] {
        promote(key, &first_id.to_string(), &json!(environment))
            .await
            .expect(200);
    }

    let reply = get_artifact(key, &artifact_id).await;
    let read = reply.expect(200);
    assert_eq!(read["id"], artifact_id.as_str());
    assert_eq!(read["kind"], "prompt");
    assert_eq!(read["name"], name.as_str());
    let versions = read["versions"].as_array().expect("versions array");
    let ids: Vec<u64> = versions.iter().filter_map(|v| v["id"].as_u64()).collect();
    assert_eq!(ids, vec![second_id, first_id], "newest first: {reply:?}");
    assert_eq!(versions[0]["promotions"], json!([]), "{reply:?}");
    assert_eq!(
        versions[1]["promotions"],
        json!(["dev", "staging"]),
        "{reply:?}"
    );
    assert_eq!(versions[1]["contentHash"], h(&first_content).as_str());
    assert_eq!(versions[1]["kind"], "prompt");
    assert!(
        versions.iter().all(|v| v.get("content").is_none()),
        "the artifact read carries no content: {reply:?}"
    );

    let reply = get_artifact(key, &format!("{artifact_id}?limit=1")).await;
    let limited = reply.expect(200);
    assert_eq!(limited["versions"].as_array().map(Vec::len), Some(1));
    assert_eq!(limited["versions"][0]["id"], second_id);

    let reply = get_version(key, &first_id.to_string()).await;
    let read = reply.expect(200);
    assert_eq!(read["id"], first_id);
    assert_eq!(read["artifactId"], artifact_id.as_str());
    assert_eq!(read["kind"], "prompt");
    assert_eq!(read["contentHash"], h(&first_content).as_str());
    assert_eq!(read["promotions"], json!(["dev", "staging"]));
    assert_eq!(read["content"], first_content, "admins read the content");
    assert!(read["createdAt"].is_string());
}

#[tokio::test]
async fn duplicate_artifact_is_refused_but_the_name_is_free_for_other_kinds_and_orgs() {
    let org = bootstrap_org("releases-dup");
    let other = bootstrap_org("releases-dup-other");
    let name = unique("grader");
    create_artifact(&org.admin_key, "scorer", &name)
        .await
        .expect(201);
    create_artifact(&org.admin_key, "scorer", &name)
        .await
        .expect_error(409, "ARTIFACT_EXISTS");
    create_artifact(&org.admin_key, "tool", &name)
        .await
        .expect(201);
    create_artifact(&other.admin_key, "scorer", &name)
        .await
        .expect(201);
}

#[tokio::test]
async fn artifact_kind_must_be_an_execution_kind() {
    let org = bootstrap_org("releases-kind");
    let key = &org.admin_key;
    for kind in ["prompt", "scorer", "tool", "workflow", "agent"] {
        create_artifact(key, kind, &unique("kind"))
            .await
            .expect(201);
    }
    for kind in ["model", "Prompt", "", "prompts"] {
        create_artifact(key, kind, &unique("kind"))
            .await
            .expect_error(422, "INVALID_KIND");
    }
    post(
        "/api/releases/artifacts",
        Some(key),
        &json!({ "kind": 3, "name": "x" }),
    )
    .await
    .expect_error(422, "INVALID_KIND");
    post(
        "/api/releases/artifacts",
        Some(key),
        &json!({ "name": "x" }),
    )
    .await
    .expect_error(422, "MISSING_FIELD");
    post(
        "/api/releases/artifacts",
        Some(key),
        &json!({ "kind": "tool" }),
    )
    .await
    .expect_error(422, "MISSING_FIELD");
    post(
        "/api/releases/artifacts",
        Some(key),
        &json!({ "kind": "tool", "name": "x", "latest": true }),
    )
    .await
    .expect_error(422, "UNKNOWN_FIELD");
}

#[tokio::test]
async fn version_content_hash_is_h_of_the_lexemes_sent_and_never_changes() {
    let org = bootstrap_org("releases-hash");
    let key = &org.admin_key;
    let artifact_id = artifact(key, "agent").await;
    // Lexemes a float round trip would change (`1e-07` → `1e-7`, `1.0` → `1`, lost digits),
    // non-ASCII text, and keys out of order.
    let content_text = r#"{"z": 1.0, "tiny": 1e-07, "big": 123456789012345678901234567890, "text": "Réponds ✨", "nested": {"b": [1.50, -0.0], "a": null}}"#;
    let content = lexical(content_text);
    let expected = h(&content);
    let reply = post_text(
        &format!("/api/releases/artifacts/{artifact_id}/versions"),
        key,
        &format!(r#"{{"content": {content_text}}}"#),
    )
    .await;
    let created = reply.expect(201);
    assert_eq!(created["contentHash"], expected.as_str(), "{reply:?}");
    let id = created["id"].as_u64().expect("integer id").to_string();

    // The stored content is the value as sent: same canonical text, same hash.
    let read = get_version(key, &id).await.expect(200);
    assert_eq!(
        stable_json::stable_json(&read["content"]),
        stable_json::stable_json(&content),
        "content lexemes survive storage"
    );
    assert_eq!(h(&read["content"]), expected);
    assert_eq!(read["contentHash"], expected.as_str());

    // Promotions, a second version with the same content and one with other content leave
    // the version exactly as it was.
    promote(key, &id, &json!("dev")).await.expect(200);
    let same = version(key, &artifact_id, &content).await;
    assert_ne!(same.to_string(), id, "a new version is a new id");
    version(key, &artifact_id, &json!({ "other": true })).await;
    let again = get_version(key, &id).await.expect(200);
    assert_eq!(again["contentHash"], expected.as_str());
    assert_eq!(
        stable_json::stable_json(&again["content"]),
        stable_json::stable_json(&content)
    );
    assert_eq!(again["createdAt"], read["createdAt"]);

    // There is no way to change a version through the API: the path answers GET (and HEAD).
    for method in [Method::PUT, Method::PATCH, Method::DELETE] {
        let path = format!("/api/releases/versions/{id}");
        let body = json!({ "content": { "replaced": true } });
        let reply = call(method, &path, Some(key), Some(&body)).await;
        reply.expect_error(405, "METHOD_NOT_ALLOWED");
        assert_eq!(reply.headers["allow"], "GET, HEAD", "{reply:?}");
    }
    // The database holds that same hash (and a schema trigger refuses any UPDATE of the row).
    let stored = d1_rows(&d1(&format!(
        "SELECT content_hash FROM release_versions WHERE id = {id}"
    )));
    assert_eq!(stored[0]["content_hash"], expected.as_str());

    // Content must be present (null counts as absent).
    create_version(key, &artifact_id, &Value::Null)
        .await
        .expect_error(422, "MISSING_FIELD");
    post(
        &format!("/api/releases/artifacts/{artifact_id}/versions"),
        Some(key),
        &json!({ "content": 1, "hash": "x" }),
    )
    .await
    .expect_error(422, "UNKNOWN_FIELD");
}

#[tokio::test]
async fn promoting_twice_is_one_promotion_with_the_first_time() {
    let org = bootstrap_org("releases-promote");
    let key = &org.admin_key;
    let artifact_id = artifact(key, "workflow").await;
    let id = version(key, &artifact_id, &json!({ "steps": [] })).await;

    let reply = promote(key, &id.to_string(), &json!("prod")).await;
    let first = reply.expect(200);
    assert_eq!(first["versionId"], id, "{reply:?}");
    assert_eq!(first["environment"], "prod", "{reply:?}");
    let promoted_at = text(&first, "promotedAt");
    assert!((parse_time(&promoted_at) - now_ms()).abs() < 60_000);

    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let reply = promote(key, &id.to_string(), &json!("prod")).await;
    let second = reply.expect(200);
    assert_eq!(
        second, first,
        "the second promotion answers the first: {reply:?}"
    );
    assert_eq!(
        promotion_events(&org, id),
        1,
        "one audit event for one promotion"
    );

    promote(key, &id.to_string(), &json!("dev"))
        .await
        .expect(200);
    assert_eq!(promotion_events(&org, id), 2);
    let read = get_version(key, &id.to_string()).await.expect(200);
    assert_eq!(read["promotions"], json!(["dev", "prod"]));
}

#[tokio::test]
async fn environment_must_be_dev_staging_or_prod() {
    let org = bootstrap_org("releases-env");
    let key = &org.admin_key;
    let artifact_id = artifact(key, "tool").await;
    let id = version(key, &artifact_id, &json!({ "entry": "main" }))
        .await
        .to_string();
    for environment in [
        json!("production"),
        json!("Prod"),
        json!("latest"),
        json!(""),
        json!(5),
    ] {
        promote(key, &id, &environment)
            .await
            .expect_error(422, "INVALID_ENVIRONMENT");
    }
    post(
        &format!("/api/releases/versions/{id}/promote"),
        Some(key),
        &json!({}),
    )
    .await
    .expect_error(422, "MISSING_FIELD");
    let read = get_version(key, &id).await.expect(200);
    assert_eq!(read["promotions"], json!([]), "no refused promotion stuck");
    for environment in ["dev", "staging", "prod"] {
        promote(key, &id, &json!(environment)).await.expect(200);
    }
}

#[tokio::test]
async fn another_organizations_releases_do_not_exist() {
    let owner = bootstrap_org("releases-owner");
    let intruder = bootstrap_org("releases-intruder");
    let artifact_id = artifact(&owner.admin_key, "prompt").await;
    let id = version(&owner.admin_key, &artifact_id, &json!({ "t": 1 }))
        .await
        .to_string();
    let key = &intruder.admin_key;

    get_artifact(key, &artifact_id)
        .await
        .expect_error(404, "NOT_FOUND");
    create_version(key, &artifact_id, &json!({ "t": 2 }))
        .await
        .expect_error(404, "NOT_FOUND");
    get_version(key, &id).await.expect_error(404, "NOT_FOUND");
    promote(key, &id, &json!("prod"))
        .await
        .expect_error(404, "NOT_FOUND");

    // Nothing the intruder tried changed the owner's rows.
    let read = get_artifact(&owner.admin_key, &artifact_id)
        .await
        .expect(200);
    assert_eq!(read["versions"].as_array().map(Vec::len), Some(1));
    assert_eq!(read["versions"][0]["promotions"], json!([]));

    // Ids that name nothing at all.
    for missing in ["0", "-1", "abc", "999999999999"] {
        get_version(key, missing)
            .await
            .expect_error(404, "NOT_FOUND");
        promote(key, missing, &json!("dev"))
            .await
            .expect_error(404, "NOT_FOUND");
    }
    get_artifact(key, "art_000000000000000000000000")
        .await
        .expect_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn release_scopes_are_enforced() {
    let org = bootstrap_org("releases-scopes");
    let reader = key_with(&org, &["runs:read"]).await;
    let writer = key_with(&org, &["runs:write"]).await;
    let artifact_id = artifact(&org.admin_key, "scorer").await;
    let id = version(&org.admin_key, &artifact_id, &json!({ "s": 1 }))
        .await
        .to_string();

    // runs:read reads but cannot create or promote.
    create_artifact(&reader, "scorer", &unique("r"))
        .await
        .expect_error(403, "FORBIDDEN");
    create_version(&reader, &artifact_id, &json!({ "s": 2 }))
        .await
        .expect_error(403, "FORBIDDEN");
    promote(&reader, &id, &json!("dev"))
        .await
        .expect_error(403, "FORBIDDEN");
    get_artifact(&reader, &artifact_id).await.expect(200);
    get_version(&reader, &id).await.expect(200);

    // runs:write creates and promotes but cannot read.
    let written = text(
        &create_artifact(&writer, "scorer", &unique("w"))
            .await
            .expect(201),
        "id",
    );
    let written_version = version(&writer, &written, &json!({ "s": 3 })).await;
    promote(&writer, &written_version.to_string(), &json!("dev"))
        .await
        .expect(200);
    get_artifact(&writer, &written)
        .await
        .expect_error(403, "FORBIDDEN");
    get_version(&writer, &id)
        .await
        .expect_error(403, "FORBIDDEN");

    // No credential, or a runner-shaped one, is not an API key at all.
    call(
        Method::GET,
        &format!("/api/releases/versions/{id}"),
        None,
        None,
    )
    .await
    .expect_error(401, "AUTHENTICATION_FAILED");
    get_version("erc_not-a-key", &id)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}
