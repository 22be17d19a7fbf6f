//! The server's log, as an operator searches it: one JSON line per request, naming its route
//! as the API document does, its status, the caller's organization, its duration and its
//! request id (which the answer carries in `x-request-id`), and never a secret the request
//! carried. (`scripts/test` also reads every server log of the whole run for any secret:
//! `tests/logs/scan_secrets.py`.)

use edgerunner_e2e::*;
use serde_json::Value;

/// The server's output (scripts/lib.sh `start_local_server` writes it there).
fn server_log() -> String {
    std::fs::read_to_string(format!("{}/wrangler-dev.log", state_dir())).unwrap_or_default()
}

/// The request line of `request_id`, once the server has written it (its output reaches the
/// file a little after the answer; at most 10 s).
async fn request_line(request_id: &str) -> Value {
    for _ in 0..100 {
        let found = server_log().lines().find_map(|line| {
            let start = line.find("{\"event\":\"request\"")?;
            let value: Value = serde_json::from_str(&line[start..]).ok()?;
            (value["requestId"] == request_id).then_some(value)
        });
        if let Some(line) = found {
            return line;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("no request line for {request_id} in the server's log");
}

fn request_id(reply: &Reply) -> String {
    reply
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no x-request-id on the answer: {:?}", reply.headers))
        .to_owned()
}

#[tokio::test]
async fn each_request_writes_one_line_with_its_route_status_and_organization_and_no_secret() {
    let org = bootstrap_org("logs");
    // An admin's request for a job that is not there: the route has no id in it.
    let missing = get(
        "/api/remote-runners/jobs/job_000000000000000000000000",
        &org.admin_key,
    )
    .await;
    assert_eq!(missing.status, 404, "{}", missing.text);
    let line = request_line(&request_id(&missing)).await;
    assert_eq!(line["route"], "/api/remote-runners/jobs/{id}", "{line}");
    assert_eq!(line["method"], "GET", "{line}");
    assert_eq!(line["status"], 404, "{line}");
    assert_eq!(line["organizationId"], org.id.as_str(), "{line}");
    assert!(
        line["durationMs"].as_i64().is_some_and(|ms| ms >= 0),
        "{line}"
    );

    // A runner's request: its organization, from its credential.
    let (runner, token) = register_runner(&org.admin_key, &registration("logs")).await;
    let credential = exchange(&id_of(&runner), &token).await;
    let me = get("/api/remote-runners/self", &credential).await;
    assert_eq!(me.status, 200, "{}", me.text);
    let line = request_line(&request_id(&me)).await;
    assert_eq!(line["route"], "/api/remote-runners/self", "{line}");
    assert_eq!(line["organizationId"], org.id.as_str(), "{line}");

    // A caller that did not authenticate: no organization, and each answer its own id.
    let refused = get("/api/remote-runners/self", "erc_not-a-credential").await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    assert_ne!(request_id(&refused), request_id(&me));
    let line = request_line(&request_id(&refused)).await;
    assert_eq!(line["status"], 401, "{line}");
    assert!(line["organizationId"].is_null(), "{line}");

    // None of the secrets these requests carried is anywhere in the server's log.
    let log = server_log();
    for (what, secret) in [
        ("the admin key", &org.admin_key),
        ("the bootstrap token", &token),
        ("the runner credential", &credential),
    ] {
        assert!(
            !log.contains(secret.as_str()),
            "{what} is in the server's log"
        );
    }
}
