//! The release registry, executable targets and evidence, end to end against docs/API.md
//! ("Release registry", "Executable targets", "Evidence"): every endpoint's happy path, and the
//! refusals the contract promises — missing scope `403`, another organization's rows `404`,
//! bad kinds and environments `422`, duplicates `409` — plus the two immutability promises: a
//! version's content hash never changes, and promoting twice is one promotion.
//!
//! Each test makes its own organization, so tests are independent and run in parallel.

use edgerunner_e2e::*;
use edgerunner_protocol::capability::Requirements;
use edgerunner_protocol::stable_json;
use reqwest::Method;
use serde_json::{json, Value};

/// A JSON value parsed from text, keeping number lexemes as written (`json!` would route them
/// through `f64`).
fn lexical(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"))
}

fn h(value: &Value) -> String {
    stable_json::hash(value).as_str().to_owned()
}

fn text(value: &Value, key: &str) -> String {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key:?} in {value}"))
        .to_owned()
}

/// A key of `org` with exactly `scopes`.
async fn key_with(org: &Org, scopes: &[&str]) -> String {
    let created = new_api_key(
        &org.admin_key,
        &json!({ "name": unique("scoped"), "scopes": scopes }),
    )
    .await;
    text(&created, "apiKey")
}

/// A POST whose body is sent exactly as `body` is written.
async fn post_text(path: &str, bearer: &str, body: &str) -> Reply {
    let request = client()
        .post(url(path))
        .bearer_auth(bearer)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_owned());
    send(format!("POST {path}"), request).await
}

// ---------------------------------------------------------------------------------------------
// Release registry helpers
// ---------------------------------------------------------------------------------------------

async fn create_artifact(bearer: &str, kind: &str, name: &str) -> Reply {
    post(
        "/api/releases/artifacts",
        Some(bearer),
        &json!({ "kind": kind, "name": name }),
    )
    .await
}

/// A new artifact of `kind`, expecting `201`; its id.
async fn artifact(bearer: &str, kind: &str) -> String {
    let reply = create_artifact(bearer, kind, &unique("artifact")).await;
    text(&reply.expect(201), "id")
}

async fn create_version(bearer: &str, artifact_id: &str, content: &Value) -> Reply {
    post(
        &format!("/api/releases/artifacts/{artifact_id}/versions"),
        Some(bearer),
        &json!({ "content": content }),
    )
    .await
}

/// A new version of `artifact_id`, expecting `201`; its integer id.
async fn version(bearer: &str, artifact_id: &str, content: &Value) -> u64 {
    let reply = create_version(bearer, artifact_id, content).await;
    reply.expect(201)["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("version id is not an integer: {reply:?}"))
}

async fn promote(bearer: &str, version_id: &str, environment: &Value) -> Reply {
    post(
        &format!("/api/releases/versions/{version_id}/promote"),
        Some(bearer),
        &json!({ "environment": environment }),
    )
    .await
}

async fn get_version(bearer: &str, version_id: &str) -> Reply {
    get(&format!("/api/releases/versions/{version_id}"), bearer).await
}

async fn get_artifact(bearer: &str, artifact_id: &str) -> Reply {
    get(&format!("/api/releases/artifacts/{artifact_id}"), bearer).await
}

/// How many `release.promoted` audit events name `version_id`.
fn promotion_events(org: &Org, version_id: u64) -> usize {
    let answer = d1(&format!(
        "SELECT detail FROM job_events WHERE organization_id = {} AND type = 'release.promoted'",
        sql_text(&org.id)
    ));
    d1_rows(&answer)
        .iter()
        .filter(|row| {
            let detail: Value = serde_json::from_str(row["detail"].as_str().unwrap_or("null"))
                .unwrap_or(Value::Null);
            detail["versionId"].as_u64() == Some(version_id)
        })
        .count()
}

// ---------------------------------------------------------------------------------------------
// Release registry
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Executable targets
// ---------------------------------------------------------------------------------------------

fn target_requirements() -> Value {
    json!({
        "executionKind": "scorer",
        "runtime": "python3.12",
        "limits": { "cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1048576 },
        "streaming": true,
        "tags": ["gpu", "default"],
    })
}

fn target_body(key: &str, evaluation_id: Option<&str>, version_id: Option<u64>) -> Value {
    let mut body = json!({
        "key": key,
        "repository": "https://git.example.com/evals/graders.git",
        "entrypoint": "graders/exact_match.py:main",
        "requirements": target_requirements(),
    });
    if let Some(evaluation_id) = evaluation_id {
        body["evaluationId"] = json!(evaluation_id);
    }
    if let Some(version_id) = version_id {
        body["versionId"] = json!(version_id);
    }
    body
}

async fn create_target(bearer: &str, body: &Value) -> Reply {
    post("/api/remote-runners/targets", Some(bearer), body).await
}

async fn list_targets(bearer: &str, query: &str) -> Reply {
    get(&format!("/api/remote-runners/targets{query}"), bearer).await
}

fn target_keys(reply: &Reply) -> Vec<String> {
    reply.expect(200)["targets"]
        .as_array()
        .unwrap_or_else(|| panic!("no targets array: {reply:?}"))
        .iter()
        .map(|t| text(t, "key"))
        .collect()
}

#[tokio::test]
async fn target_stores_canonical_requirements_and_binds_the_version_hash() {
    let org = bootstrap_org("targets-create");
    let key = &org.admin_key;
    let artifact_id = artifact(key, "scorer").await;
    let content = json!({ "grader": "exact_match" });
    let version_id = version(key, &artifact_id, &content).await;
    let evaluation = unique("eval");

    let target_key = unique("exact-match");
    let reply = create_target(
        key,
        &target_body(&target_key, Some(&evaluation), Some(version_id)),
    )
    .await;
    let target = reply.expect(201);
    assert!(text(&target, "id").starts_with("tgt_"), "{reply:?}");
    assert_eq!(target["key"], target_key.as_str());
    assert_eq!(
        target["repository"],
        "https://git.example.com/evals/graders.git"
    );
    assert_eq!(target["entrypoint"], "graders/exact_match.py:main");
    assert_eq!(target["evaluationId"], evaluation.as_str());
    assert_eq!(target["versionId"], version_id);
    assert_eq!(target["contentHash"], h(&content).as_str(), "{reply:?}");
    let canonical = Requirements::parse(&target_requirements())
        .expect("fixture requirements parse")
        .to_value();
    assert_eq!(target["requirements"], canonical, "{reply:?}");
    assert_eq!(
        target["requirements"]["network"],
        json!({ "mode": "deny_all" })
    );
    assert_eq!(target["requirements"]["tags"], json!(["default", "gpu"]));
    assert!(target["createdAt"].is_string() && target["updatedAt"].is_string());

    // Without a version, no hash.
    let reply = create_target(key, &target_body(&unique("unbound"), None, None)).await;
    let unbound = reply.expect(201);
    assert_eq!(unbound["versionId"], Value::Null);
    assert_eq!(unbound["contentHash"], Value::Null);
    assert_eq!(unbound["evaluationId"], Value::Null);
}

#[tokio::test]
async fn target_refusals() {
    let org = bootstrap_org("targets-refuse");
    let other = bootstrap_org("targets-refuse-other");
    let key = &org.admin_key;
    let target_key = unique("dup");
    create_target(key, &target_body(&target_key, None, None))
        .await
        .expect(201);
    create_target(key, &target_body(&target_key, Some("e"), None))
        .await
        .expect_error(409, "TARGET_EXISTS");
    // Keys are per organization.
    create_target(&other.admin_key, &target_body(&target_key, None, None))
        .await
        .expect(201);

    let mut bad = target_body(&unique("bad"), None, None);
    bad["requirements"]["executionKind"] = json!("model");
    create_target(key, &bad)
        .await
        .expect_error(422, "INVALID_REQUIREMENTS");
    let mut bad = target_body(&unique("bad"), None, None);
    bad["requirements"]["limits"] = json!({ "cpuSeconds": 1 });
    create_target(key, &bad)
        .await
        .expect_error(422, "INVALID_REQUIREMENTS");
    let mut bad = target_body(&unique("bad"), None, None);
    bad.as_object_mut().expect("object").remove("requirements");
    create_target(key, &bad)
        .await
        .expect_error(422, "MISSING_FIELD");
    let mut bad = target_body(&unique("bad"), None, None);
    bad.as_object_mut().expect("object").remove("entrypoint");
    create_target(key, &bad)
        .await
        .expect_error(422, "MISSING_FIELD");
    let mut bad = target_body(&unique("bad"), None, None);
    bad["versionId"] = json!("1");
    create_target(key, &bad)
        .await
        .expect_error(422, "INVALID_FIELD");
    let mut bad = target_body(&unique("bad"), None, None);
    bad["contentHash"] = json!("0".repeat(64));
    create_target(key, &bad)
        .await
        .expect_error(422, "UNKNOWN_FIELD");

    // Another organization's version does not exist for binding.
    let foreign_artifact = artifact(&other.admin_key, "scorer").await;
    let foreign_version = version(&other.admin_key, &foreign_artifact, &json!({ "x": 1 })).await;
    create_target(
        key,
        &target_body(&unique("foreign"), None, Some(foreign_version)),
    )
    .await
    .expect_error(404, "NOT_FOUND");

    // Scopes: runs:write creates, runs:read lists.
    let reader = key_with(&org, &["runs:read"]).await;
    let writer = key_with(&org, &["runs:write"]).await;
    create_target(&reader, &target_body(&unique("r"), None, None))
        .await
        .expect_error(403, "FORBIDDEN");
    create_target(&writer, &target_body(&unique("w"), None, None))
        .await
        .expect(201);
    list_targets(&writer, "")
        .await
        .expect_error(403, "FORBIDDEN");
    list_targets(&reader, "").await.expect(200);
}

#[tokio::test]
async fn targets_list_newest_first_by_evaluation_within_the_organization() {
    let org = bootstrap_org("targets-list");
    let other = bootstrap_org("targets-list-other");
    let key = &org.admin_key;
    let evaluation = unique("eval");
    let mut created = Vec::new();
    for _ in 0..3 {
        let target_key = unique("t");
        create_target(key, &target_body(&target_key, Some(&evaluation), None))
            .await
            .expect(201);
        created.push(target_key);
        // Distinct creation times, so "newest first" is observable.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let elsewhere = unique("elsewhere");
    create_target(key, &target_body(&elsewhere, Some("another-eval"), None))
        .await
        .expect(201);
    create_target(
        &other.admin_key,
        &target_body(&unique("other-org"), Some(&evaluation), None),
    )
    .await
    .expect(201);

    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    let query = format!("?evaluationId={evaluation}");
    assert_eq!(target_keys(&list_targets(key, &query).await), newest_first);
    let query = format!("?evaluationId={evaluation}&limit=2");
    assert_eq!(
        target_keys(&list_targets(key, &query).await),
        newest_first[..2].to_vec()
    );
    let all = target_keys(&list_targets(key, "").await);
    assert_eq!(all.len(), 4, "the organization's targets only: {all:?}");
    assert_eq!(all[0], elsewhere);
    list_targets(key, "?limit=0")
        .await
        .expect_error(422, "INVALID_LIMIT");
    assert!(target_keys(&list_targets(key, "?evaluationId=nothing-here").await).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Evidence
// ---------------------------------------------------------------------------------------------

async fn create_run(bearer: &str, body: &Value) -> Reply {
    post("/api/evidence/runs", Some(bearer), body).await
}

async fn run_id(bearer: &str) -> String {
    text(
        &create_run(bearer, &json!({ "name": "nightly" }))
            .await
            .expect(201),
        "id",
    )
}

async fn add_row(bearer: &str, run_id: &str, kind: &str, body: &Value) -> Reply {
    post(
        &format!("/api/evidence/runs/{run_id}/{kind}"),
        Some(bearer),
        body,
    )
    .await
}

async fn get_run(bearer: &str, run_id: &str) -> Reply {
    get(&format!("/api/evidence/runs/{run_id}"), bearer).await
}

#[tokio::test]
async fn evidence_rows_are_recorded_under_their_run_and_read_back_unattached() {
    let org = bootstrap_org("evidence-create");
    let key = &org.admin_key;
    let reply = create_run(key, &json!({ "name": "nightly", "evaluationId": "eval-7" })).await;
    let run = reply.expect(201);
    let run_id = text(&run, "id");
    assert!(run_id.starts_with("evr_"), "{reply:?}");
    assert_eq!(run["name"], "nightly");
    assert_eq!(run["evaluationId"], "eval-7");
    assert_eq!(run["status"], "running");
    assert_eq!(run["attachedTo"], Value::Null);
    let bare = create_run(key, &json!({})).await.expect(201);
    assert_eq!(bare["name"], Value::Null);

    let rows = [
        (
            "test-results",
            json!({ "name": "exact match", "passed": true, "score": 0.75 }),
            "tst_",
        ),
        (
            "test-results",
            json!({ "name": "refusal", "passed": false }),
            "tst_",
        ),
        (
            "cost-records",
            json!({ "amountMicros": 1250, "provider": "openai" }),
            "cst_",
        ),
        (
            "cost-records",
            json!({ "amountMicros": 0, "currency": "EUR", "category": "sandbox" }),
            "cst_",
        ),
        (
            "model-calls",
            json!({ "model": "gpt-4o", "inputTokens": 12, "outputTokens": 34 }),
            "mdl_",
        ),
        ("traces", json!({ "name": "root" }), "trc_"),
    ];
    let mut ids = Vec::new();
    for (kind, body, prefix) in &rows {
        let reply = add_row(key, &run_id, kind, body).await;
        let row = reply.expect(201);
        let id = text(&row, "id");
        assert!(id.starts_with(prefix), "{reply:?}");
        assert_eq!(row["evaluationRunId"], run_id.as_str(), "{reply:?}");
        assert_eq!(row["attachedTo"], Value::Null, "{reply:?}");
        ids.push(id);
    }

    let reply = get_run(key, &run_id).await;
    let read = reply.expect(200);
    assert_eq!(read["id"], run_id.as_str());
    assert_eq!(read["name"], "nightly");
    assert_eq!(read["attachedTo"], Value::Null);
    let tests = read["testResults"].as_array().expect("testResults");
    assert_eq!(tests.len(), 2, "{reply:?}");
    assert_eq!(tests[0]["id"], ids[0].as_str());
    assert_eq!(tests[0]["passed"], true);
    assert_eq!(tests[0]["status"], "passed");
    assert_eq!(tests[0]["score"].as_f64(), Some(0.75));
    assert_eq!(tests[1]["passed"], false);
    assert_eq!(tests[1]["status"], "failed");
    assert_eq!(tests[1]["score"], Value::Null);
    let costs = read["costRecords"].as_array().expect("costRecords");
    assert_eq!(costs.len(), 2);
    assert_eq!(costs[0]["amountMicros"], 1250);
    assert_eq!(costs[0]["currency"], "USD");
    assert_eq!(costs[0]["provider"], "openai");
    assert_eq!(costs[0]["category"], "other");
    assert_eq!(costs[1]["currency"], "EUR");
    assert_eq!(costs[1]["category"], "sandbox");
    let calls = read["modelCalls"].as_array().expect("modelCalls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["model"], "gpt-4o");
    assert_eq!(calls[0]["inputTokens"], 12);
    assert_eq!(calls[0]["outputTokens"], 34);
    assert_eq!(calls[0]["status"], "succeeded");
    let traces = read["traces"].as_array().expect("traces");
    assert_eq!(traces.len(), 1);
    assert_eq!(traces[0]["name"], "root");
    for row in tests.iter().chain(costs).chain(calls).chain(traces) {
        assert_eq!(
            row["attachedTo"],
            Value::Null,
            "nothing is attached yet: {row}"
        );
    }
}

#[tokio::test]
async fn evidence_refusals() {
    let org = bootstrap_org("evidence-refuse");
    let other = bootstrap_org("evidence-refuse-other");
    let key = &org.admin_key;
    let run = run_id(key).await;

    let invalid = [
        ("test-results", json!({ "name": "x", "passed": "yes" })),
        (
            "test-results",
            json!({ "name": "x", "passed": true, "score": "high" }),
        ),
        (
            "test-results",
            json!({ "name": "x", "passed": true, "status": "failed" }),
        ),
        ("cost-records", json!({ "amountMicros": -1 })),
        ("cost-records", json!({ "amountMicros": 1.5 })),
        (
            "cost-records",
            json!({ "amountMicros": 10, "currency": "usd" }),
        ),
        (
            "cost-records",
            json!({ "amountMicros": 10, "category": "food" }),
        ),
        ("model-calls", json!({ "model": "m", "inputTokens": -3 })),
    ];
    for (kind, body) in &invalid {
        add_row(key, &run, kind, body)
            .await
            .expect_error(422, "INVALID_FIELD");
    }
    let missing = [
        ("test-results", json!({ "passed": true })),
        ("test-results", json!({ "name": "x" })),
        ("cost-records", json!({ "currency": "USD" })),
        ("model-calls", json!({ "inputTokens": 3 })),
    ];
    for (kind, body) in &missing {
        add_row(key, &run, kind, body)
            .await
            .expect_error(422, "MISSING_FIELD");
    }
    add_row(key, &run, "traces", &json!({ "name": "t", "owner": "me" }))
        .await
        .expect_error(422, "UNKNOWN_FIELD");
    let read = get_run(key, &run).await.expect(200);
    for list in ["testResults", "costRecords", "modelCalls", "traces"] {
        assert_eq!(read[list], json!([]), "a refused row left nothing: {read}");
    }

    // Another organization's run does not exist: not to read, not to add to.
    let intruder = &other.admin_key;
    get_run(intruder, &run).await.expect_error(404, "NOT_FOUND");
    let valid = [
        ("test-results", json!({ "name": "x", "passed": true })),
        ("cost-records", json!({ "amountMicros": 1 })),
        ("model-calls", json!({ "model": "m" })),
        ("traces", json!({})),
    ];
    for (kind, body) in &valid {
        add_row(intruder, &run, kind, body)
            .await
            .expect_error(404, "NOT_FOUND");
        add_row(key, "evr_000000000000000000000000", kind, body)
            .await
            .expect_error(404, "NOT_FOUND");
    }
    let read = get_run(key, &run).await.expect(200);
    for list in ["testResults", "costRecords", "modelCalls", "traces"] {
        assert_eq!(read[list], json!([]), "the intruder added nothing: {read}");
    }

    // Scopes: runs:write records, runs:read reads.
    let reader = key_with(&org, &["runs:read"]).await;
    let writer = key_with(&org, &["runs:write"]).await;
    create_run(&reader, &json!({}))
        .await
        .expect_error(403, "FORBIDDEN");
    for (kind, body) in &valid {
        add_row(&reader, &run, kind, body)
            .await
            .expect_error(403, "FORBIDDEN");
        add_row(&writer, &run, kind, body).await.expect(201);
    }
    get_run(&writer, &run).await.expect_error(403, "FORBIDDEN");
    let read = get_run(&reader, &run).await.expect(200);
    assert_eq!(read["testResults"].as_array().map(Vec::len), Some(1));
}
