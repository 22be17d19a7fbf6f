//! The release registry, executable targets and evidence, end to end against docs/API.md
//! ("Release registry", "Executable targets", "Evidence"): every endpoint's happy path, and the
//! refusals the contract promises — missing scope `403`, another organization's rows `404`,
//! bad kinds and environments `422`, duplicates `409` — plus the two immutability promises: a
//! version's content hash never changes, and promoting twice is one promotion.
//!
//! Each test makes its own organization, so tests are independent and run in parallel.

mod registry;
mod targets;

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
