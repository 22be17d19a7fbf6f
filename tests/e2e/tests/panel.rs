//! What the admin panel stands on, end to end against docs/API.md: the panel's files and their
//! security headers, the signed-in key's own view, keyset paging of the runners and jobs lists
//! with per-state counts, a runner's claims, the paged read of a job's stream with payloads,
//! and approval that names the fingerprint the admin compared.
//!
//! The panel itself is driven in a real browser by tests/panel (scripts/test runs both).
//! Each test makes its own organization; every loop is bounded.

use std::collections::BTreeSet;

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::ChunkKind;
use reqwest::Method;
use serde_json::{json, Value};

fn header(reply: &Reply, name: &str) -> String {
    reply
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} header: {reply:?}"))
        .to_owned()
}

fn assert_panel_headers(reply: &Reply) {
    let csp = header(reply, "content-security-policy");
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(header(reply, "x-content-type-options"), "nosniff");
    assert_eq!(header(reply, "referrer-policy"), "no-referrer");
    assert_eq!(header(reply, "x-frame-options"), "DENY");
}

#[tokio::test]
async fn the_panel_is_one_page_at_every_route_with_strict_security_headers() {
    let mut pages = Vec::new();
    for path in [
        "/remote-runners",
        "/remote-runners/",
        "/remote-runners/jobs",
        "/remote-runners/jobs/job_0123",
        "/remote-runners/runners/run_0123",
    ] {
        let reply = call(Method::GET, path, None, None).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(reply.content_type().starts_with("text/html"), "{reply:?}");
        assert_panel_headers(&reply);
        pages.push(reply.text);
    }
    assert!(
        pages.windows(2).all(|w| w[0] == w[1]),
        "every route is the same page"
    );
    let page = &pages[0];
    // No inline script or style: the CSP would block them, so the page must not need them.
    assert!(
        page.contains(r#"src="/remote-runners/static/app.js""#),
        "{page}"
    );
    assert!(!page.contains("<style"), "inline style in the page");
    for (at, _) in page.match_indices("<script") {
        let tag = &page[at..at + page[at..].find('>').expect("a closed tag")];
        assert!(tag.contains("src="), "inline script: {tag}");
    }

    let script = call(Method::GET, "/remote-runners/static/app.js", None, None).await;
    assert_eq!(script.status, 200, "{script:?}");
    assert!(script.content_type().contains("javascript"), "{script:?}");
    assert_panel_headers(&script);
    let style = call(Method::GET, "/remote-runners/static/style.css", None, None).await;
    assert_eq!(style.status, 200, "{style:?}");
    assert!(style.content_type().starts_with("text/css"), "{style:?}");

    // Revalidation by ETag answers 304 without a body.
    let etag = header(&script, "etag");
    let again = send(
        "GET app.js if-none-match".into(),
        client()
            .get(url("/remote-runners/static/app.js"))
            .header("if-none-match", &etag),
    )
    .await;
    assert_eq!(again.status, 304, "{again:?}");
    assert!(again.text.is_empty());

    // Only plain file names under static/, and only reads.
    for path in [
        "/remote-runners/static/missing.js",
        "/remote-runners/static/.assetsignore",
        "/remote-runners/static/sub/app.js",
        "/remote-runners/static/%2e%2e%2fwrangler.toml",
    ] {
        let reply = call(Method::GET, path, None, None).await;
        reply.expect_error(404, "NOT_FOUND");
        assert_panel_headers(&reply);
    }
    let post = call(Method::POST, "/remote-runners", None, Some(&json!({}))).await;
    post.expect_error(405, "METHOD_NOT_ALLOWED");

    // The site root leads to the panel; the API is untouched by it.
    let root = send(
        "GET /".into(),
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
            .get(url("/")),
    )
    .await;
    assert_eq!(root.status, 302, "{root:?}");
    assert_eq!(header(&root, "location"), "/remote-runners");
    call(Method::GET, "/api/remote-runners", None, None)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

#[tokio::test]
async fn a_key_sees_its_own_organization_name_role_and_scopes() {
    let org = bootstrap_named_org("Panel Self Org");
    let me = get("/api/developer/api-keys/self", &org.admin_key)
        .await
        .expect(200);
    assert_eq!(me["organization"]["id"], org.id.as_str());
    // bootstrap-admin makes the name unique by a suffix.
    let name = me["organization"]["name"].as_str().expect("name");
    assert!(name.starts_with("Panel Self Org"), "{me}");
    assert_eq!(me["apiKey"]["role"], "admin");
    assert_eq!(
        me["apiKey"]["scopes"],
        json!(["runs:read", "runs:write", "admin:org"])
    );
    assert_eq!(me["apiKey"]["name"], "bootstrap admin");
    assert!(org
        .admin_key
        .starts_with(me["apiKey"]["prefix"].as_str().expect("prefix")));
    assert!(
        !me.to_string().contains(&org.admin_key),
        "the key itself never comes back"
    );

    // A read-only member key sees itself too (the panel hides what it may not do).
    let reader = new_api_key(
        &org.admin_key,
        &json!({ "name": "auditor", "scopes": ["runs:read"] }),
    )
    .await;
    let reader_key = reader["apiKey"].as_str().expect("apiKey");
    let seen = get("/api/developer/api-keys/self", reader_key)
        .await
        .expect(200);
    assert_eq!(seen["apiKey"]["name"], "auditor");
    assert_eq!(seen["apiKey"]["role"], "member");
    assert_eq!(seen["apiKey"]["scopes"], json!(["runs:read"]));

    // Unknown, revoked and runner credentials are refused.
    let zeros = format!("erk_{}", "0".repeat(64));
    get("/api/developer/api-keys/self", &zeros)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    delete(
        &format!(
            "/api/developer/api-keys/{}",
            reader["id"].as_str().expect("id")
        ),
        &org.admin_key,
    )
    .await
    .expect(200);
    get("/api/developer/api-keys/self", reader_key)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}

/// Walks a keyset-paged list to its end; returns the ids in order.
async fn walk(path: &str, key: &str, field: &str, page_size: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut page_path = format!("{path}{separator}limit={page_size}");
        if let Some(c) = &cursor {
            page_path.push_str(&format!("&cursor={c}"));
        }
        let page = get(&page_path, key).await.expect(200);
        let rows = page[field].as_array().expect("rows");
        assert!(rows.len() <= page_size, "{page}");
        ids.extend(
            rows.iter()
                .map(|r| r["id"].as_str().expect("id").to_owned()),
        );
        match page["nextCursor"].as_str() {
            Some(next) => {
                assert_eq!(
                    rows.len(),
                    page_size,
                    "a page before the last is full: {page}"
                );
                cursor = Some(next.to_owned());
            }
            None => return ids,
        }
    }
    panic!("{path}: more than 50 pages");
}

#[tokio::test]
async fn runners_and_jobs_page_by_cursor_and_jobs_count_by_state() {
    let org = bootstrap_org("Panel Paging Org");
    let key = org.admin_key.as_str();
    let mut registered = Vec::new();
    for n in 0..5 {
        let (runner, _) = register_runner(key, &registration(&format!("pager-{n}"))).await;
        registered.push(runner["id"].as_str().expect("id").to_owned());
    }
    let listed = walk("/api/remote-runners", key, "runners", 2).await;
    assert_eq!(listed, registered, "registration order, each runner once");
    // The fleet's counts and capacity, whatever the page: revoked runners hold no capacity.
    set_status(key, &registered[4], "revoked", "retired").await;
    set_status(key, &registered[3], "draining", "kernel upgrade").await;
    let page = get("/api/remote-runners?limit=1", key).await.expect(200);
    assert_eq!(
        page["counts"],
        json!({ "pending_approval": 0, "active": 3, "draining": 1, "lost": 0, "revoked": 1 }),
        "{page}"
    );
    assert_eq!(
        page["capacity"],
        json!({ "inUse": 0, "maximum": 4 }),
        "{page}"
    );
    // The states in the order a client lists them: the API's, not the client's.
    assert_eq!(
        page["states"],
        json!(["pending_approval", "active", "draining", "lost", "revoked"])
    );

    let release = release(key, "prompt", prompt_content(), &["staging"]).await;
    let mut enqueued = Vec::new();
    for n in 0..7 {
        let job = enqueue_job(key, &release, &json!({ "n": n }), &requirements("prompt")).await;
        enqueued.push(job["id"].as_str().expect("id").to_owned());
    }
    // Cancel two, so that there are two states to filter by.
    for id in &enqueued[..2] {
        cancel_job(key, id, "not needed").await.expect(200);
    }
    let newest_first: Vec<String> = enqueued.iter().rev().cloned().collect();
    assert_eq!(
        walk("/api/remote-runners/jobs", key, "jobs", 3).await,
        newest_first
    );
    let queued = walk("/api/remote-runners/jobs?state=queued", key, "jobs", 2).await;
    assert_eq!(queued, newest_first[..5].to_vec());
    let cancelled = walk("/api/remote-runners/jobs?state=cancelled", key, "jobs", 2).await;
    assert_eq!(cancelled, newest_first[5..].to_vec());
    assert!(
        walk("/api/remote-runners/jobs?state=running", key, "jobs", 2)
            .await
            .is_empty()
    );

    let page = get("/api/remote-runners/jobs?limit=1", key)
        .await
        .expect(200);
    let counts = &page["counts"];
    assert_eq!(
        page["states"],
        json!([
            "queued",
            "claimed",
            "running",
            "cancel_requested",
            "succeeded",
            "failed",
            "cancelled",
            "lost"
        ]),
        "the lifecycle's order"
    );
    assert_eq!(counts["queued"], 5, "{page}");
    assert_eq!(counts["cancelled"], 2, "{page}");
    let states: BTreeSet<&str> = counts
        .as_object()
        .expect("counts")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        states,
        BTreeSet::from([
            "queued",
            "claimed",
            "running",
            "cancel_requested",
            "succeeded",
            "failed",
            "cancelled",
            "lost"
        ])
    );
    assert!(
        counts
            .as_object()
            .expect("counts")
            .iter()
            .all(|(s, n)| { ["queued", "cancelled"].contains(&s.as_str()) || n == 0 }),
        "{page}"
    );

    // Another organization's lists are empty; its cursors reveal nothing of ours.
    let other = bootstrap_org("Panel Paging Other");
    let theirs = get("/api/remote-runners/jobs", &other.admin_key)
        .await
        .expect(200);
    assert_eq!(theirs["jobs"], json!([]));
    assert_eq!(theirs["counts"]["queued"], 0);

    // Bad filters and cursors are refused with their own codes.
    get("/api/remote-runners/jobs?state=done", key)
        .await
        .expect_error(422, "INVALID_STATE");
    // Every list's bound, one past it.
    get("/api/remote-runners/jobs?limit=501", key)
        .await
        .expect_error(422, "INVALID_LIMIT");
    get("/api/remote-runners?limit=1001", key)
        .await
        .expect_error(422, "INVALID_LIMIT");
    let long_id = format!("12.{}", "a".repeat(101));
    for bad in ["x", "12", "12.", "-1.job_1", "1.job%201", long_id.as_str()] {
        get(&format!("/api/remote-runners/jobs?cursor={bad}"), key)
            .await
            .expect_error(422, "INVALID_CURSOR");
        get(&format!("/api/remote-runners?cursor={bad}"), key)
            .await
            .expect_error(422, "INVALID_CURSOR");
    }
}

#[tokio::test]
async fn a_jobs_stream_reads_in_pages_with_payloads_and_a_runners_claims_are_listed() {
    let org = bootstrap_org("Panel Stream Org");
    let key = org.admin_key.as_str();
    let release = release(key, "prompt", prompt_content(), &["staging"]).await;
    let job = enqueue_job(key, &release, &json!({ "q": 1 }), &requirements("prompt")).await;
    let job_id = job["id"].as_str().expect("id").to_owned();
    let mut runner = Runner::simple(&org, &["prompt"], 1).await;
    let claimed = runner.claim_job().await;
    assert_eq!(claimed.job_id(), job_id);

    let stream_path = format!("/api/remote-runners/jobs/{job_id}/stream");
    let empty = get(&stream_path, key).await.expect(200);
    assert_eq!(empty["chunks"], json!([]), "{empty}");
    assert_eq!(empty["more"], false);
    assert_eq!(empty["cursor"], "0.-1");

    let mut writer = claimed.writer();
    let mut sent = Vec::new();
    for n in 0..5 {
        let (kind, payload) = if n == 3 {
            (
                ChunkKind::Trajectory,
                lexical(r#"{"step": 3, "score": 0.70}"#),
            )
        } else {
            (
                ChunkKind::Log,
                json!({ "lines": [{ "stream": if n % 2 == 0 { "stdout" } else { "stderr" }, "line": format!("line {n} ✓") }] }),
            )
        };
        let chunk = writer.next(kind, payload.clone(), timestamp_now());
        runner.stream(&chunk.to_json()).await.expect(200);
        sent.push((chunk, payload));
    }

    // All at once.
    let whole = get(&stream_path, key).await.expect(200);
    let chunks = whole["chunks"].as_array().expect("chunks");
    assert_eq!(chunks.len(), 5, "{whole}");
    assert_eq!(whole["more"], false);
    assert_eq!(whole["cursor"], "1.4");
    for (got, (chunk, payload)) in chunks.iter().zip(&sent) {
        let expected = chunk.to_json();
        for field in [
            "sequence",
            "kind",
            "previousChecksum",
            "payloadHash",
            "checksum",
            "emittedAt",
            "claimId",
        ] {
            assert_eq!(got[field], expected[field], "{field}: {got}");
        }
        assert_eq!(got["dispatchAttempt"], 1);
        // The payload as sent, number lexemes and all (its hash is what the chain binds).
        assert_eq!(&got["payload"], payload, "{got}");
        assert_eq!(
            h(&got["payload"]),
            got["payloadHash"].as_str().expect("hash")
        );
        assert!(got["receivedAt"].is_string());
    }

    // Page by page, following the cursor, as a reader following the log does.
    let mut seen = Vec::new();
    let mut after = "0.-1".to_owned();
    for _ in 0..10 {
        let page = get(&format!("{stream_path}?limit=2&after={after}"), key)
            .await
            .expect(200);
        let rows = page["chunks"].as_array().expect("chunks");
        seen.extend(rows.iter().map(|c| c["sequence"].as_u64().expect("seq")));
        after = page["cursor"].as_str().expect("cursor").to_owned();
        if page["more"] == false {
            break;
        }
    }
    assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    // Nothing new after the head: the same cursor comes back.
    let idle = get(&format!("{stream_path}?after=1.4"), key)
        .await
        .expect(200);
    assert_eq!(
        (idle["chunks"].clone(), idle["cursor"].clone()),
        (json!([]), json!("1.4"))
    );
    // One attempt only.
    let first = get(&format!("{stream_path}?attempt=1"), key)
        .await
        .expect(200);
    assert_eq!(first["chunks"].as_array().map(Vec::len), Some(5));
    let second = get(&format!("{stream_path}?attempt=2"), key)
        .await
        .expect(200);
    assert_eq!(second["chunks"], json!([]));

    for bad in ["1", "a.b", "9.0", "1.-2", "-1.0", "+1.0", "01.0"] {
        get(&format!("{stream_path}?after={bad}"), key)
            .await
            .expect_error(422, "INVALID_CURSOR");
    }
    get(&format!("{stream_path}?attempt=9"), key)
        .await
        .expect_error(422, "INVALID_ATTEMPT");
    get(&format!("{stream_path}?limit=501"), key)
        .await
        .expect_error(422, "INVALID_LIMIT");
    let other = bootstrap_org("Panel Stream Other");
    get(&stream_path, &other.admin_key)
        .await
        .expect_error(404, "NOT_FOUND");
    get(&stream_path, &runner.token)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // The runner's claims, newest first, with the job they hold.
    let claims = get(&format!("/api/remote-runners/{}/claims", runner.id), key)
        .await
        .expect(200);
    let rows = claims["claims"].as_array().expect("claims");
    assert_eq!(rows.len(), 1, "{claims}");
    assert_eq!(rows[0]["jobId"], job_id.as_str());
    assert_eq!(rows[0]["id"], claimed.claim_id().as_str());
    assert_eq!(rows[0]["state"], "active");
    assert_eq!(
        rows[0]["held"], true,
        "the claim holds its job: the API says so"
    );
    assert_eq!(rows[0]["dispatchAttempt"], 1);
    for limit in ["0", "501"] {
        get(
            &format!("/api/remote-runners/{}/claims?limit={limit}", runner.id),
            key,
        )
        .await
        .expect_error(422, "INVALID_LIMIT");
    }
    get(
        &format!("/api/remote-runners/{}/claims", runner.id),
        &other.admin_key,
    )
    .await
    .expect_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn approval_that_names_a_fingerprint_must_name_the_runners_own() {
    let org = bootstrap_org("Panel Approval Org");
    let key = org.admin_key.as_str();
    let runner = KeyPairRunner::generate();
    let id = runner.enroll(&org).await;
    let path = format!("/api/remote-runners/{id}");

    let wrong = KeyPairRunner::generate().fingerprint();
    patch(
        &path,
        key,
        &json!({ "status": "active", "reason": "compared", "fingerprint": wrong }),
    )
    .await
    .expect_error(409, "FINGERPRINT_MISMATCH");
    assert_eq!(
        get(&path, key).await.expect(200)["state"],
        "pending_approval"
    );

    let approved = patch(
        &path,
        key,
        &json!({ "status": "active", "reason": "compared with the runner's print-out", "fingerprint": runner.fingerprint() }),
    )
    .await
    .expect(200);
    assert_eq!(approved["state"], "active", "{approved}");
    let events = runner_events(key, &id).await.expect(200);
    let approval: &Value = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["type"] == "runner.approved")
        .unwrap_or_else(|| panic!("no approval event: {events}"));
    assert_eq!(approval["reason"], "compared with the runner's print-out");
    assert_eq!(
        approval["detail"]["fingerprintConfirmed"],
        runner.fingerprint()
    );
}

/// What the register dialog offers comes from the API: the protocol's execution kinds and the
/// default limits a registration may only narrow, the same a registration without limits gets.
#[tokio::test]
async fn a_registration_may_declare_what_the_api_says() {
    let org = bootstrap_org("Panel Registration Org");
    let key = org.admin_key.as_str();
    let offered = get("/api/remote-runners/registration", key)
        .await
        .expect(200);
    assert_eq!(
        offered["executionKinds"],
        json!(["prompt", "scorer", "tool", "workflow", "agent"])
    );
    let (runner, _) = register_runner(
        key,
        &json!({
            "name": "defaults", "runnerKey": unique("defaults"),
            "capabilities": {"executionKinds": ["prompt"], "runtimes": ["python3.12"]},
        }),
    )
    .await;
    assert_eq!(
        runner["capabilities"]["limits"], offered["defaultLimits"],
        "a registration that declares no limits gets the default ones: {runner}"
    );
    get("/api/remote-runners/registration", "erk_nonsense")
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}
