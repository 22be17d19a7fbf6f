//! The service answers as the spine promises: health, and JSON errors for unknown routes.

use edgerunner_e2e::{client, url};
use serde_json::{json, Value};

#[tokio::test]
async fn healthz_answers_ok() {
    let res = client().get(url("/healthz")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body, json!({ "status": "ok" }));
}

#[tokio::test]
async fn unknown_route_is_a_json_404() {
    let res = client().get(url("/no/such/route")).send().await.unwrap();
    assert_eq!(res.status(), 404);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "NOT_FOUND");
    assert!(body["error"]["message"].is_string());
}

/// The benchmark floor (`bench-floor` feature, scripts/bench only) is not in the production
/// build that scripts/test serves: its route is an unknown route like any other.
#[tokio::test]
async fn bench_floor_route_is_absent_from_the_production_build() {
    let res = client()
        .post(url("/__bench/floor"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "NOT_FOUND");
}
