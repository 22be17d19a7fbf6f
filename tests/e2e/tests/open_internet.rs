//! What a stranger on the internet can send, and what it costs us: body caps enforced before
//! buffering, one nesting limit on every JSON route, authentication before parsing, rate limits
//! and caps on the routes that answer without a credential, proof of key possession at
//! enrollment, names without control characters, unknown methods, secrets checked at use, and
//! the cron pass that clears what strangers leave behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use edgerunner_e2e::recovery::fire_cron;
use edgerunner_e2e::*;
use reqwest::Method;
use serde_json::{json, Value};

/// Sends raw HTTP/1.1 bytes (`head`, then each of `body` in turn, ignoring a server that hangs
/// up early, which is what a cap does) and returns the status and the body of the answer.
async fn raw_exchange(head: String, body: Vec<Vec<u8>>) -> (u16, String) {
    let address = base_url().trim_start_matches("http://").to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(&address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        stream.write_all(head.as_bytes()).expect("head");
        for piece in body {
            if stream.write_all(&piece).is_err() {
                break;
            }
        }
        let mut answer = Vec::new();
        // Bounded: the read timeout ends a server that never answers.
        let _ = stream.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
        (status, body)
    })
    .await
    .expect("raw exchange")
}

fn code_in(body: &str) -> String {
    // A chunked answer may wrap the JSON in chunk sizes; find the object itself.
    let start = body.find('{').unwrap_or(0);
    let end = body.rfind('}').map_or(body.len(), |i| i + 1);
    let value: Value = serde_json::from_str(&body[start..end])
        .unwrap_or_else(|e| panic!("answer is not JSON ({e}): {body:?}"));
    value["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_declared_body_over_the_cap_is_refused() {
    // 2 MiB to a route capped at 16 KiB. (The Worker refuses on the declared length alone;
    // `wrangler dev`'s local proxy holds a request until its body has arrived, so locally the
    // body is sent whole. scripts/bench measures what a 90 MB body costs the Worker.)
    let body = format!("{{\"runnerId\":\"{}\"}}", "x".repeat(2 * 1024 * 1024));
    let reply = send_text(Method::POST, "/api/remote-runners/session", None, &body).await;
    reply.expect_error(413, "BODY_TOO_LARGE");
    // Refused on the declared length, not after counting what was read.
    assert!(
        reply
            .text
            .contains(&format!("declares {} bytes", body.len())),
        "{reply:?}"
    );
}

#[tokio::test]
async fn a_body_without_a_length_is_cut_off_at_the_cap() {
    // Chunked, 64 KiB in 8 KiB pieces, to a route capped at 16 KiB.
    let head = "POST /api/remote-runners/session HTTP/1.1\r\nHost: e2e\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        .to_owned();
    let mut pieces = Vec::new();
    let filler = format!("{{\"runnerId\":\"{}", "x".repeat(8 * 1024));
    for _ in 0..8 {
        let data = filler.as_bytes();
        let mut piece = format!("{:x}\r\n", data.len()).into_bytes();
        piece.extend_from_slice(data);
        piece.extend_from_slice(b"\r\n");
        pieces.push(piece);
    }
    pieces.push(b"0\r\n\r\n".to_vec());
    let (status, body) = raw_exchange(head, pieces).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(code_in(&body), "BODY_TOO_LARGE");
    assert!(body.contains("exceeds this route's 16384 bytes"), "{body}");
}

/// `{}` padded with spaces to exactly `len` bytes: valid JSON of any size.
fn padded(len: usize) -> String {
    format!("{{{}}}", " ".repeat(len - 2))
}

#[tokio::test]
async fn every_body_cap_refuses_one_byte_past_it_and_reads_a_body_at_it() {
    let org = bootstrap_org("open-caps");
    let admin = org.admin_key.as_str();
    let (runner_id, token) = register_simple_runner(&org, "caps").await;
    let credential = exchange(&runner_id, &token).await;
    let runner = Some(credential.as_str());
    let caps: Vec<(Method, &str, Option<&str>, usize)> = vec![
        (Method::POST, "/api/remote-runners/session", None, 16 * 1024),
        (
            Method::POST,
            "/api/remote-runners/challenge",
            None,
            16 * 1024,
        ),
        (
            Method::POST,
            "/api/remote-runners/heartbeat",
            runner,
            16 * 1024,
        ),
        (
            Method::POST,
            "/api/remote-runners/jobs/reap",
            Some(admin),
            16 * 1024,
        ),
        (
            Method::PUT,
            "/api/developer/retention",
            Some(admin),
            16 * 1024,
        ),
        (
            Method::POST,
            "/api/developer/retention/run",
            Some(admin),
            16 * 1024,
        ),
        (
            Method::POST,
            "/api/remote-runners/jobs/job_0123456789abcdef01234567/hold",
            Some(admin),
            16 * 1024,
        ),
        (Method::POST, "/api/remote-runners/claim", runner, 64 * 1024),
        (Method::POST, "/api/remote-runners/enroll", None, 128 * 1024),
        (
            Method::POST,
            "/api/remote-runners/jobs",
            Some(admin),
            1024 * 1024,
        ),
        (
            Method::POST,
            "/api/remote-runners/stream",
            runner,
            1024 * 1024,
        ),
        (
            Method::PUT,
            "/api/remote-runners/self/files/caps.txt",
            runner,
            256 * 1024,
        ),
    ];
    for (method, path, bearer, cap) in caps {
        let reply = send_text(method.clone(), path, bearer, &padded(cap + 1)).await;
        assert_eq!(
            reply.status,
            413,
            "{method} {path} at {} bytes: {reply:?}",
            cap + 1
        );
        let code = if path.contains("/files/") {
            "FILE_TOO_LARGE"
        } else {
            "BODY_TOO_LARGE"
        };
        reply.expect_error(413, code);
        if code == "BODY_TOO_LARGE" {
            assert!(
                reply.text.contains(&format!(
                    "declares {} bytes; this route takes at most {cap}",
                    cap + 1
                )),
                "{reply:?}"
            );
        }
        let at_cap = send_text(method.clone(), path, bearer, &padded(cap)).await;
        assert_ne!(at_cap.status, 413, "{method} {path} at its cap: {at_cap:?}");
        assert!(
            at_cap.status < 500,
            "{method} {path} at its cap: {at_cap:?}"
        );
    }
}

/// An array nested exactly `depth` levels deep.
fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

/// `{"jobId": "job_…", "payload": <depth-deep>}`: the deep part where a chunk's payload goes.
fn deep_object(depth: usize) -> String {
    format!(
        r#"{{"jobId":"job_deep","claimId":"clm_deep","payload":{}}}"#,
        nested(depth - 1)
    )
}

async fn send_text(method: Method, path: &str, bearer: Option<&str>, text: &str) -> Reply {
    let mut request = client()
        .request(method.clone(), url(path))
        .header("CF-Connecting-IP", fresh_address())
        .header("content-type", "application/json")
        .body(text.to_owned());
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    send(format!("{method} {path}"), request).await
}

#[tokio::test]
async fn every_json_route_refuses_deep_nesting_with_a_code() {
    let org = bootstrap_org("open-deep");
    let admin = org.admin_key.as_str();
    let (runner_id, token) = register_simple_runner(&org, "deep").await;
    let credential = exchange(&runner_id, &token).await;
    let runner = Some(credential.as_str());
    let routes: Vec<(Method, String, Option<&str>)> = vec![
        (Method::POST, "/api/remote-runners/session".into(), None),
        (Method::POST, "/api/remote-runners/enroll".into(), None),
        (Method::POST, "/api/remote-runners/challenge".into(), None),
        (Method::POST, "/api/remote-runners/claim".into(), runner),
        (Method::POST, "/api/remote-runners/heartbeat".into(), runner),
        (Method::POST, "/api/remote-runners/stream".into(), runner),
        (Method::POST, "/api/remote-runners/complete".into(), runner),
        (Method::POST, "/api/remote-runners/jobs".into(), Some(admin)),
        (
            Method::POST,
            "/api/remote-runners/jobs/reap".into(),
            Some(admin),
        ),
        (
            Method::POST,
            "/api/remote-runners/jobs/job_x/cancel".into(),
            Some(admin),
        ),
        (Method::POST, "/api/remote-runners".into(), Some(admin)),
        (
            Method::PATCH,
            format!("/api/remote-runners/{runner_id}"),
            Some(admin),
        ),
        (
            Method::POST,
            "/api/remote-runners/targets".into(),
            Some(admin),
        ),
        (Method::POST, "/api/developer/api-keys".into(), Some(admin)),
        (Method::POST, "/api/releases/artifacts".into(), Some(admin)),
        (
            Method::POST,
            "/api/releases/artifacts/art_x/versions".into(),
            Some(admin),
        ),
        (
            Method::POST,
            "/api/releases/versions/1/promote".into(),
            Some(admin),
        ),
        (Method::POST, "/api/evidence/runs".into(), Some(admin)),
        (
            Method::POST,
            "/api/evidence/runs/evr_x/test-results".into(),
            Some(admin),
        ),
        (
            Method::POST,
            "/api/evidence/runs/evr_x/cost-records".into(),
            Some(admin),
        ),
        (
            Method::POST,
            "/api/evidence/runs/evr_x/model-calls".into(),
            Some(admin),
        ),
        (
            Method::POST,
            "/api/evidence/runs/evr_x/traces".into(),
            Some(admin),
        ),
        (
            Method::POST,
            format!("/api/remote-runners/{runner_id}/rotate"),
            Some(admin),
        ),
        (
            Method::POST,
            "/api/remote-runners/jobs/job_x/evidence/runs".into(),
            runner,
        ),
        (
            Method::POST,
            "/api/remote-runners/jobs/job_x/evidence/runs/evr_x/test-results".into(),
            runner,
        ),
    ];
    for depth in [127, 128, 1000] {
        for body in [nested(depth), deep_object(depth)] {
            for (method, path, bearer) in &routes {
                let reply = send_text(method.clone(), path, *bearer, &body).await;
                assert!(
                    (400..500).contains(&reply.status),
                    "{depth} deep to {method} {path}: {reply:?}"
                );
                // Routes that read the body before looking anything up name the depth.
                if !path.contains("_x") && !path.ends_with("/1/promote") {
                    reply.expect_error(400, "JSON_TOO_DEEP");
                }
            }
        }
    }
    // One level past the limit is refused; at the limit the body is read.
    send_text(
        Method::POST,
        "/api/remote-runners/heartbeat",
        runner,
        &nested(65),
    )
    .await
    .expect_error(400, "JSON_TOO_DEEP");
    // Nothing deep rotated the runner's token: its credential still exchanges.
    exchange(&runner_id, &token).await;
    // At the limit, a body is read as usual (and refused, if at all, for what it says).
    let ok = nested(64);
    send_text(Method::POST, "/api/remote-runners/heartbeat", runner, &ok)
        .await
        .expect_error(400, "INVALID_BODY");
}

#[tokio::test]
async fn reap_settles_the_credential_before_it_reads_the_body() {
    for body in [r#"{"limit":0}"#, "{", &nested(500)] {
        let reply = send_text(
            Method::POST,
            "/api/remote-runners/jobs/reap",
            Some("not-the-cron-secret-and-not-a-key"),
            body,
        )
        .await;
        reply.expect_error(401, "AUTHENTICATION_FAILED");
    }
}

#[tokio::test]
async fn names_and_keys_with_control_characters_are_422() {
    let org = bootstrap_org("open-names");
    for name in ["\u{0}", "gpu\u{0}box", "two\nlines", "bell\u{7}"] {
        let mut body = registration("ctl");
        body["name"] = json!(name);
        post("/api/remote-runners", Some(&org.admin_key), &body)
            .await
            .expect_error(422, "INVALID_CHARACTERS");
        let mut body = registration("ctl");
        body["runnerKey"] = json!(name);
        post("/api/remote-runners", Some(&org.admin_key), &body)
            .await
            .expect_error(422, "INVALID_CHARACTERS");
        post(
            "/api/developer/api-keys",
            Some(&org.admin_key),
            &json!({ "name": name, "scopes": ["runs:read"] }),
        )
        .await
        .expect_error(422, "INVALID_CHARACTERS");
    }
}

#[tokio::test]
async fn unknown_methods_are_405_with_allow() {
    // On a path the API document has: the methods it lists there. Elsewhere: every method some
    // route answers.
    for (path, expected) in [
        ("/api/remote-runners", "GET, HEAD, POST"),
        ("/api/nothing-here", "GET, HEAD, POST, PUT, PATCH, DELETE"),
    ] {
        for method in ["PROPFIND", "TRACE", "MKCOL"] {
            let method = Method::from_bytes(method.as_bytes()).expect("method");
            let reply = send(
                format!("{method} {path}"),
                client().request(method.clone(), url(path)),
            )
            .await;
            reply.expect_error(405, "METHOD_NOT_ALLOWED");
            let allow = reply.header("allow");
            assert_eq!(allow, expected, "{method} {path}");
        }
    }
}

#[tokio::test]
async fn enrollment_takes_a_proof_that_the_enroller_holds_the_key() {
    let org = bootstrap_org("open-proof");
    let other = bootstrap_org("open-proof-other");
    let runner = KeyPairRunner::generate();
    let address = fresh_address();

    let mut unsigned = runner.enrollment(&org.id);
    unsigned
        .as_object_mut()
        .expect("object")
        .remove("signature");
    runner
        .enroll_from(&address, &unsigned)
        .await
        .expect_error(422, "MISSING_FIELD");

    // A proof for another organization does not enroll into this one.
    let mut elsewhere = runner.enrollment(&org.id);
    elsewhere["signature"] = json!(runner.sign_enrollment(&other.id));
    runner
        .enroll_from(&address, &elsewhere)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // Someone who saw the public key cannot enroll it: their proof is made with their key.
    let thief = KeyPairRunner::generate();
    let mut stolen = runner.enrollment(&org.id);
    stolen["signature"] = json!(thief.sign_enrollment(&org.id));
    thief
        .enroll_from(&address, &stolen)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    let mut long = runner.enrollment(&org.id);
    long["signature"] = json!("A".repeat(257));
    runner
        .enroll_from(&address, &long)
        .await
        .expect_error(422, "INVALID_FIELD");

    let mut garbled = runner.enrollment(&org.id);
    garbled["signature"] = json!("not base64 at all");
    runner
        .enroll_from(&address, &garbled)
        .await
        .expect_error(422, "ENROLLMENT_SIGNATURE_MALFORMED");

    // None of that stored anything: the real proof enrolls.
    runner.enroll(&org).await;
}

#[tokio::test]
async fn enrollment_files_are_capped_at_64_kib_in_all() {
    let org = bootstrap_org("open-enroll-files");
    let runner = KeyPairRunner::generate();
    let mut body = runner.enrollment(&org.id);
    let piece = "x".repeat(20 * 1024);
    body["files"] = json!({ "a.txt": piece, "b.txt": piece, "c.txt": piece, "d.txt": piece });
    runner
        .enroll_from(&fresh_address(), &body)
        .await
        .expect_error(413, "ENROLL_FILES_TOO_LARGE");
    let mut body = runner.enrollment(&org.id);
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("f{i}.txt"), json!("x"))).collect();
    body["files"] = Value::Object(many);
    runner
        .enroll_from(&fresh_address(), &body)
        .await
        .expect_error(413, "ENROLL_FILES_TOO_LARGE");
    let mut body = runner.enrollment(&org.id);
    body["files"] = json!({ "a.txt": "x".repeat(64 * 1024 - 5) });
    runner
        .enroll_from(&fresh_address(), &body)
        .await
        .expect(201);
}

#[tokio::test]
async fn an_enrollment_flood_from_one_address_meets_429_with_retry_after() {
    let org = bootstrap_org("open-enroll-flood");
    // Token-less enrollments from one network stop at its share of pending ones (5) before the
    // rate limit: these carry an enrollment token, so only the rate limit can refuse them.
    let token = post(
        "/api/developer/enrollment-tokens",
        Some(&org.admin_key),
        &json!({ "maxUses": 20 }),
    )
    .await
    .expect(201)["enrollmentToken"]
        .as_str()
        .expect("enrollmentToken")
        .to_owned();
    let address = fresh_address();
    let mut accepted = 0;
    let mut refused = None;
    // Bounded: the limit is 10 a minute; 15 tries must meet it.
    for _ in 0..15 {
        let runner = KeyPairRunner::generate();
        let mut body = runner.enrollment(&org.id);
        body["enrollmentToken"] = json!(token);
        let reply = runner.enroll_from(&address, &body).await;
        match reply.status {
            201 => accepted += 1,
            429 => {
                refused = Some(reply);
                break;
            }
            _ => panic!("unexpected: {reply:?}"),
        }
    }
    assert_eq!(accepted, 10, "the default ENROLL_PER_MINUTE");
    let refused = refused.expect("the 11th enrollment was refused");
    refused.expect_error(429, "RATE_LIMITED");
    let retry: u64 = refused
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry), "{retry}");
    // Another address is not affected.
    let runner = KeyPairRunner::generate();
    runner
        .enroll_from(&fresh_address(), &runner.enrollment(&org.id))
        .await
        .expect(201);
}

#[tokio::test]
async fn pending_enrollments_stop_at_100_per_organization() {
    let org = bootstrap_org("open-pending-cap");
    let mut first = None;
    for _ in 0..100 {
        let runner = KeyPairRunner::generate();
        let id = runner.enroll(&org).await;
        first.get_or_insert((id, runner));
    }
    let late = KeyPairRunner::generate();
    late.enroll_from(&fresh_address(), &late.enrollment(&org.id))
        .await
        .expect_error(429, "PENDING_ENROLLMENTS_AT_CAP");
    // Another organization is not affected.
    let other = bootstrap_org("open-pending-cap-other");
    late.enroll(&other).await;
    // Approving one makes room for one more.
    let (id, runner) = first.expect("100 enrolled");
    approve(&org.admin_key, &id, &runner.fingerprint(), "capacity test").await;
    KeyPairRunner::generate().enroll(&org).await;
}

#[tokio::test]
async fn challenges_and_failed_sessions_are_limited_per_address() {
    let org = bootstrap_org("open-session-limits");
    let (runner_id, token) = register_simple_runner(&org, "limits").await;
    let address = fresh_address();
    let from = |body: Value| {
        let address = address.clone();
        async move {
            send(
                "POST /api/remote-runners/session".to_owned(),
                client()
                    .post(url("/api/remote-runners/session"))
                    .header("CF-Connecting-IP", address)
                    .json(&body),
            )
            .await
        }
    };
    // 20 wrong guesses a minute are answered as wrong guesses...
    for _ in 0..20 {
        from(json!({ "runnerId": runner_id, "bootstrapToken": "guess" }))
            .await
            .expect_error(401, "AUTHENTICATION_FAILED");
    }
    // ...then the address is turned away, even with the right token.
    let reply = from(json!({ "runnerId": runner_id, "bootstrapToken": token })).await;
    reply.expect_error(429, "RATE_LIMITED");
    assert!(reply.headers.get("retry-after").is_some(), "{reply:?}");
    // The runner itself, from its own address, is not.
    exchange(&runner_id, &token).await;

    // Challenges: 60 a minute from one address.
    let stranger = KeyPairRunner::generate();
    let challenge_address = fresh_address();
    let mut answered = 0;
    for _ in 0..70 {
        let reply = send(
            "POST /api/remote-runners/challenge".to_owned(),
            client()
                .post(url("/api/remote-runners/challenge"))
                .header("CF-Connecting-IP", &challenge_address)
                .json(&json!({ "fingerprint": stranger.fingerprint() })),
        )
        .await;
        if reply.status == 429 {
            reply.expect_error(429, "RATE_LIMITED");
            break;
        }
        // An unknown fingerprint gets the answer every fingerprint gets.
        reply.expect(200);
        answered += 1;
    }
    assert_eq!(answered, 60, "the default CHALLENGES_PER_MINUTE");
}

#[tokio::test]
async fn the_cron_pass_deletes_old_enrollments_and_spent_challenges() {
    let org = bootstrap_org("open-purge");
    let stale = KeyPairRunner::generate();
    let mut body = stale.enrollment(&org.id);
    body["files"] = json!({ "lscpu.txt": "x86_64" });
    let stale_id = id_of(&stale.enroll_from(&fresh_address(), &body).await.expect(201)["runner"]);
    let fresh = KeyPairRunner::generate();
    let fresh_id = fresh.enroll(&org).await;
    // A day and a minute old (the default PENDING_ENROLLMENT_MAX_AGE_HOURS is 24).
    let day = 24 * 3_600_000_i64 + 60_000;
    d1(&format!(
        "UPDATE runners SET registered_at = registered_at - {day} WHERE id = {}",
        sql_text(&stale_id)
    ));
    // A spent challenge of an approved runner.
    let approved = KeyPairRunner::generate();
    let approved_id = approved.enroll_approved(&org).await;
    approved.fresh_challenge().await;
    d1(&format!(
        "UPDATE runner_challenges SET issued_at = issued_at - 120000, expires_at = expires_at - 120000 WHERE runner_id = {}",
        sql_text(&approved_id)
    ));
    // An approved runner registered long ago is not an expired enrollment.
    d1(&format!(
        "UPDATE runners SET registered_at = registered_at - {day} WHERE id = {}",
        sql_text(&approved_id)
    ));

    fire_cron().await;

    // Deleted with its files and events (issue 41; attacks
    // an_enrollment_nobody_approved_in_a_day_is_deleted_and_its_key_may_enroll_again).
    get_runner(&org.admin_key, &stale_id)
        .await
        .expect_error(404, "NOT_FOUND");
    assert_eq!(
        runner_record(&org.admin_key, &fresh_id).await["state"],
        "pending_approval"
    );
    assert_eq!(
        runner_record(&org.admin_key, &approved_id).await["state"],
        "active"
    );
    let left = d1(&format!(
        "SELECT count(*) AS n FROM runner_challenges WHERE runner_id = {}",
        sql_text(&approved_id)
    ));
    assert_eq!(d1_rows(&left)[0]["n"], 0, "{left}");
}

#[tokio::test]
async fn a_short_cron_secret_is_refused_by_name() {
    // The second server's CRON_SECRET is one character (scripts/test).
    let base = required_env("SHORT_SECRET_BASE_URL");
    let reply = call_at(
        &base,
        Method::POST,
        "/api/remote-runners/jobs/reap",
        Some("x"),
        Some(&json!({})),
    )
    .await;
    reply.expect_error(503, "CRON_SECRET_TOO_SHORT");
    assert!(reply.text.contains("CRON_SECRET"), "{reply:?}");
}
