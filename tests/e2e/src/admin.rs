//! The admin API: runner registration, approval and API keys, as an operator's key calls them.

use serde_json::{json, Value};

use crate::*;

/// The smallest valid capability document: the two fields that have no default.
pub fn minimal_capabilities() -> Value {
    json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"] })
}

/// A registration body with a fresh `runnerKey` and the minimal capabilities.
pub fn registration(name: &str) -> Value {
    json!({
        "name": name,
        "runnerKey": unique(name),
        "capabilities": minimal_capabilities(),
    })
}

/// `POST /api/remote-runners` expecting `201`: the runner record and its bootstrap token.
pub async fn register_runner(admin_key: &str, body: &Value) -> (Value, String) {
    let reply = post("/api/remote-runners", Some(admin_key), body).await;
    let answer = reply.expect(201);
    let token = answer["bootstrapToken"]
        .as_str()
        .unwrap_or_else(|| panic!("no bootstrapToken: {reply:?}"))
        .to_owned();
    assert!(
        answer["runner"]["id"].is_string(),
        "no runner.id: {reply:?}"
    );
    (answer["runner"].clone(), token)
}

/// Registers a runner with minimal capabilities; returns its id and bootstrap token.
pub async fn register_simple_runner(org: &Org, name: &str) -> (String, String) {
    let (runner, token) = register_runner(&org.admin_key, &registration(name)).await;
    (id_of(&runner), token)
}

/// The `id` of a JSON record.
pub fn id_of(record: &Value) -> String {
    record["id"]
        .as_str()
        .unwrap_or_else(|| panic!("record without a string id: {record}"))
        .to_owned()
}

pub async fn get_runner(bearer: &str, runner_id: &str) -> Reply {
    get(&format!("/api/remote-runners/{runner_id}"), bearer).await
}

/// `GET /api/remote-runners/{id}` expecting `200`.
pub async fn runner_record(bearer: &str, runner_id: &str) -> Value {
    get_runner(bearer, runner_id).await.expect(200)
}

pub async fn list_runners(bearer: &str) -> Reply {
    get("/api/remote-runners", bearer).await
}

pub async fn patch_runner(bearer: &str, runner_id: &str, body: &Value) -> Reply {
    patch(&format!("/api/remote-runners/{runner_id}"), bearer, body).await
}

/// `PATCH` a runner's status with a reason, expecting success (`200`).
pub async fn set_status(bearer: &str, runner_id: &str, status: &str, reason: &str) {
    let reply = patch_runner(
        bearer,
        runner_id,
        &json!({ "status": status, "reason": reason }),
    )
    .await;
    assert_eq!(reply.status, 200, "PATCH status {status}: {reply:?}");
}

/// Approves a pending key-pair runner, naming the fingerprint the admin compared.
pub async fn approve(bearer: &str, runner_id: &str, fingerprint: &str, reason: &str) {
    let reply = patch_runner(
        bearer,
        runner_id,
        &json!({ "status": "active", "reason": reason, "fingerprint": fingerprint }),
    )
    .await;
    assert_eq!(reply.status, 200, "approve: {reply:?}");
}

pub async fn rotate(bearer: &str, runner_id: &str) -> Reply {
    post(
        &format!("/api/remote-runners/{runner_id}/rotate"),
        Some(bearer),
        &json!({}),
    )
    .await
}

pub async fn runner_events(bearer: &str, runner_id: &str) -> Reply {
    get(&format!("/api/remote-runners/{runner_id}/events"), bearer).await
}

pub async fn create_api_key(admin_key: &str, body: &Value) -> Reply {
    post("/api/developer/api-keys", Some(admin_key), body).await
}

/// Creates an API key expecting `201`; returns the whole answer (with `apiKey`).
pub async fn new_api_key(admin_key: &str, body: &Value) -> Value {
    create_api_key(admin_key, body).await.expect(201)
}
