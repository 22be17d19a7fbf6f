//! Work before authentication: a caller without a valid API key costs no lookup when its key
//! cannot be one, no body read, and only a few lookups per network before it is turned away;
//! a runner's ids are checked for their form before any job's object is asked.

use edgerunner_e2e::*;
use reqwest::Method;
use serde_json::json;

/// The deployment's `FAILED_KEYS_PER_MINUTE` (wrangler.toml; the e2e server keeps the default).
const FAILED_KEYS_PER_MINUTE: usize = 30;

/// A well-formed API key nobody was given.
fn unknown_key() -> String {
    let hex: String = random_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("erk_{hex}")
}

/// Tokens that cannot be API keys, though each starts like one.
fn malformed_keys() -> Vec<String> {
    vec![
        "erk_x".to_owned(),
        format!("erk_{}", "a".repeat(63)),
        format!("erk_{}", "a".repeat(65)),
        format!("erk_{}", "A".repeat(64)),
        format!("erk_{}", "g".repeat(64)),
    ]
}

/// A /64 of the documentation range no other test uses, and an address in it.
fn address_in_fresh_64(n: u64) -> (String, String) {
    let b = random_bytes();
    let prefix = format!(
        "2001:db8:{:x}:{:x}",
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]])
    );
    let address = format!("{prefix}::{:x}", n + 1);
    (prefix, address)
}

async fn list_runners_from(address: &str, bearer: &str) -> Reply {
    send(
        "GET /api/remote-runners".to_owned(),
        client()
            .get(url("/api/remote-runners"))
            .header("CF-Connecting-IP", address)
            .bearer_auth(bearer),
    )
    .await
}

#[tokio::test]
async fn a_key_of_the_wrong_form_is_refused_without_a_lookup_or_a_count() {
    let org = bootstrap_org("attacks-key-form");
    let address = fresh_address();
    // More malformed keys than the failed-key limit, from one address: each is 401, and none
    // was counted (a count needs the lookup that found no key), so the network is not limited.
    for round in 0..=FAILED_KEYS_PER_MINUTE / malformed_keys().len() + 1 {
        for key in malformed_keys() {
            let reply = list_runners_from(&address, &key).await;
            reply.expect_error(401, "AUTHENTICATION_FAILED");
            assert!(
                reply.json()["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("not an API key")),
                "round {round}, {key:?}: {reply:?}"
            );
        }
    }
    // Control: the same address with the org's key is served.
    list_runners_from(&address, &org.admin_key)
        .await
        .expect(200);
}

#[tokio::test]
async fn failed_keys_from_one_network_are_limited_while_another_network_is_not() {
    let org = bootstrap_org("attacks-key-limit");
    let (network, _) = address_in_fresh_64(0);
    let mut refused = 0;
    let mut limited = None;
    // Each guess from another address of the same /64.
    for n in 0..(FAILED_KEYS_PER_MINUTE as u64 + 5) {
        let address = format!("{network}:{:x}::{:x}", n + 1, n * 7 + 3);
        let reply = list_runners_from(&address, &unknown_key()).await;
        if reply.status == 429 {
            limited = Some(reply);
            break;
        }
        reply.expect_error(401, "AUTHENTICATION_FAILED");
        refused += 1;
    }
    assert_eq!(refused, FAILED_KEYS_PER_MINUTE, "the limit's worth of 401s");
    let limited = limited.expect("the network is limited past FAILED_KEYS_PER_MINUTE");
    limited.expect_error(429, "RATE_LIMITED");
    let retry_after: u64 = limited
        .header("retry-after")
        .parse()
        .unwrap_or_else(|e| panic!("Retry-After is seconds ({e}): {limited:?}"));
    assert!((1..=60).contains(&retry_after), "{limited:?}");
    // The network is turned away until the window ends, whatever key it presents.
    list_runners_from(&format!("{network}::beef"), &org.admin_key)
        .await
        .expect_error(429, "RATE_LIMITED");

    // Control: another network still gets its 401 for a bad key, and is served with a good one.
    let (_, elsewhere) = address_in_fresh_64(1);
    list_runners_from(&elsewhere, &unknown_key())
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    list_runners_from(&elsewhere, &org.admin_key)
        .await
        .expect(200);
}

async fn enqueue_from(address: &str, bearer: Option<&str>, body: Vec<u8>) -> Reply {
    let mut request = client()
        .post(url("/api/remote-runners/jobs"))
        .header("CF-Connecting-IP", address)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    send("POST /api/remote-runners/jobs".to_owned(), request).await
}

// Whether the body was read cannot be observed robustly from outside: workerd answers only
// once the request body has arrived, whatever the Worker did with it (an answer to a request
// whose body is withheld never comes). So this asserts what a caller can see: the key is
// settled before anything about the body is (its size, its JSON), for every key that cannot
// be one, and none of those counts against the network.
#[tokio::test]
async fn a_megabyte_enqueue_without_a_usable_key_is_refused_for_the_key_not_the_body() {
    let address = fresh_address();
    let megabyte = vec![b' '; 1024 * 1024];
    let over_cap = vec![b' '; 1024 * 1024 + 1];
    let not_json = b"{ not json".to_vec();
    let mut keys: Vec<Option<String>> = malformed_keys().into_iter().map(Some).collect();
    keys.push(None);
    for key in &keys {
        for body in [&megabyte, &over_cap, &not_json] {
            enqueue_from(&address, key.as_deref(), body.clone())
                .await
                .expect_error(401, "AUTHENTICATION_FAILED");
        }
    }
    // Control: with the org's key, from the same address (not limited by any of the above),
    // the same bodies are refused for what they are.
    let org = bootstrap_org("attacks-key-body");
    let key = Some(org.admin_key.as_str());
    enqueue_from(&address, key, over_cap)
        .await
        .expect_error(413, "BODY_TOO_LARGE");
    enqueue_from(&address, key, not_json)
        .await
        .expect_error(400, "INVALID_JSON");
}

#[tokio::test]
async fn a_runner_naming_a_malformed_job_or_claim_id_is_refused_at_the_edge() {
    let org = bootstrap_org("attacks-job-ids");
    let (runner_id, token) = register_simple_runner(&org, "ids").await;
    let credential = exchange(&runner_id, &token).await;
    let bearer = Some(credential.as_str());
    for claim in ["garbage", "job_../x-a1", "job_a b-a1", "job_x-a0", "x-a1"] {
        for (path, body) in [
            (
                "/api/remote-runners/heartbeat",
                json!({ "claimId": claim, "extendSeconds": 60 }),
            ),
            (
                "/api/remote-runners/release",
                json!({ "claimId": claim, "reason": "attack" }),
            ),
        ] {
            call(Method::POST, path, bearer, Some(&body))
                .await
                .expect_error(422, "CLAIM_ID_MALFORMED");
        }
    }
    for job in [
        "x",
        "job_",
        "job_../../x",
        "job_é",
        &format!("job_{}", "a".repeat(65)),
    ] {
        for path in ["/api/remote-runners/stream", "/api/remote-runners/complete"] {
            call(Method::POST, path, bearer, Some(&json!({ "jobId": job })))
                .await
                .expect_error(422, "JOB_ID_MALFORMED");
        }
    }
    // Control: ids of the right form reach the job's object, which knows no such job.
    let job = "job_0123456789abcdef01234567";
    call(
        Method::POST,
        "/api/remote-runners/heartbeat",
        bearer,
        Some(&json!({ "claimId": format!("{job}-a1"), "extendSeconds": 60 })),
    )
    .await
    .expect_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn an_api_key_made_without_a_lifetime_stops_working_after_90_days() {
    let org = bootstrap_org("attack-key-expiry");
    let made = post(
        "/api/developer/api-keys",
        Some(&org.admin_key),
        &json!({ "name": "ci", "scopes": ["runs:read"] }),
    )
    .await
    .expect(201);
    let key = made["apiKey"].as_str().expect("the key").to_owned();
    let id = made["id"].as_str().expect("an id").to_owned();
    // Its lifetime is in the answer: 90 days, unless expiresInDays says otherwise.
    assert!(made["expiresAt"].is_string(), "no expiresAt in {made}");
    let stored = d1(&format!(
        "SELECT expires_at - created_at AS ttl FROM api_keys WHERE id = {}",
        sql_text(&id)
    ));
    assert_eq!(d1_rows(&stored)[0]["ttl"], 90 * 86_400_000_i64, "{stored}");
    get("/api/remote-runners", &key).await.expect(200);
    // 91 days on (the stored times moved back: the clock cannot be moved forward here).
    d1(&format!(
        "UPDATE api_keys SET created_at = created_at - {day91}, expires_at = expires_at - {day91} \
         WHERE id = {}",
        sql_text(&id),
        day91 = 91 * 86_400_000_i64
    ));
    get("/api/remote-runners", &key)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    // The list says when each key ends; a lifetime outside 1-365 days is refused by name.
    let listed = get("/api/developer/api-keys", &org.admin_key)
        .await
        .expect(200);
    assert!(listed.to_string().contains("expiresAt"), "{listed}");
    for bad in [json!(0), json!(366), json!("30"), json!(1.5)] {
        post(
            "/api/developer/api-keys",
            Some(&org.admin_key),
            &json!({ "name": "ci", "scopes": ["runs:read"], "expiresInDays": bad }),
        )
        .await
        .expect_error(422, "INVALID_EXPIRES_IN");
    }
    let year = post(
        "/api/developer/api-keys",
        Some(&org.admin_key),
        &json!({ "name": "ci", "scopes": ["runs:read"], "expiresInDays": 365 }),
    )
    .await
    .expect(201);
    get("/api/remote-runners", year["apiKey"].as_str().expect("key"))
        .await
        .expect(200);
}
