//! Runner files.

use super::*;

#[tokio::test]
async fn runner_files_from_enrollment_and_upload_are_served_to_the_organization() {
    let org = bootstrap_org("identity-files");
    let runner = KeyPairRunner::generate();
    let lscpu = "Architecture: x86_64\nCPU(s): 4\nModel name: e2e ünïcode\n";
    let mut body = runner.enrollment(&org.id);
    body["files"] = json!({ "lscpu.txt": lscpu });
    let runner_id = id_of(&runner.enroll_from("198.51.100.9", &body).await.expect(201)["runner"]);

    let record = runner_record(&org.admin_key, &runner_id).await;
    let files = record["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files list: {record}"));
    assert_eq!(files.len(), 1, "{record}");
    assert_eq!(
        keys(&files[0]),
        set(&["name", "size", "contentHash", "uploadedAt"])
    );
    assert_eq!(files[0]["name"], "lscpu.txt");
    assert_eq!(files[0]["size"], lscpu.len());
    assert!(is_hex64(str_of(&files[0], "contentHash")));
    parse_time(str_of(&files[0], "uploadedAt"));

    let reply = get(
        &format!("/api/remote-runners/{runner_id}/files/lscpu.txt"),
        &org.admin_key,
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.content_type().starts_with("text/plain"), "{reply:?}");
    assert_eq!(reply.text, lscpu);

    // Upload from the runner itself, with its credential.
    approve(
        &org.admin_key,
        &runner_id,
        &runner.fingerprint(),
        "approved for files",
    )
    .await;
    let credential = credential_of(&runner.signed_session().await);
    let log = "runner started\nclaimed nothing\n";
    let reply = put_raw(
        "/api/remote-runners/self/files/runner.log",
        &credential,
        log.as_bytes().to_vec(),
    )
    .await;
    assert!(matches!(reply.status, 200 | 201), "{reply:?}");
    let uploaded = reply.json();
    assert_eq!(
        keys(&uploaded),
        set(&["name", "size", "contentHash", "uploadedAt"]),
        "{reply:?}"
    );
    assert_eq!(uploaded["name"], "runner.log");
    assert_eq!(uploaded["size"], log.len());
    let first_hash = str_of(&uploaded, "contentHash").to_owned();
    assert!(is_hex64(&first_hash));
    assert_eq!(
        first_hash,
        sha256_hex(log.as_bytes()),
        "contentHash is the SHA-256 of the file's bytes"
    );

    // Any runs:read key of the organization may read it.
    let reader = new_api_key(
        &org.admin_key,
        &json!({ "name": "reader", "scopes": ["runs:read"] }),
    )
    .await;
    let reply = get(
        &format!("/api/remote-runners/{runner_id}/files/runner.log"),
        str_of(&reader, "apiKey"),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.text, log);

    // An upload replaces the file of that name.
    let log2 = "runner restarted\n";
    let reply = put_raw(
        "/api/remote-runners/self/files/runner.log",
        &credential,
        log2.as_bytes().to_vec(),
    )
    .await;
    assert!(matches!(reply.status, 200 | 201), "{reply:?}");
    assert_ne!(str_of(&reply.json(), "contentHash"), first_hash);
    let reply = get(
        &format!("/api/remote-runners/{runner_id}/files/runner.log"),
        &org.admin_key,
    )
    .await;
    assert_eq!(reply.text, log2, "{reply:?}");
    let record = runner_record(&org.admin_key, &runner_id).await;
    let names: Vec<&str> = record["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files list: {record}"))
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["lscpu.txt", "runner.log"], "{record}");

    get(
        &format!("/api/remote-runners/{runner_id}/files/missing.txt"),
        &org.admin_key,
    )
    .await
    .expect_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn enrollment_files_are_checked_like_uploads() {
    let org = bootstrap_org("identity-enroll-files");
    let runner = KeyPairRunner::generate();
    let big = "a".repeat(256 * 1024 + 1);
    for files in [
        json!({ "bad name.txt": "x" }),
        json!({ "../lscpu.txt": "x" }),
        json!({ "lscpu.txt": big }),
    ] {
        let mut body = runner.enrollment(&org.id);
        body["files"] = files.clone();
        let reply = runner.enroll_from("198.51.100.30", &body).await;
        assert!(
            matches!(reply.status, 413 | 422),
            "enrollment files {} accepted: {reply:?}",
            &files.to_string()[..40.min(files.to_string().len())]
        );
        reply.expect_error_status(reply.status);
    }
    // Nothing of the refused enrollments was stored: the key still enrolls, without files.
    let runner_id = runner.enroll(&org).await;
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["files"],
        json!([])
    );
}

#[tokio::test]
async fn runner_file_uploads_are_capped_at_256_kib() {
    let org = bootstrap_org("identity-file-cap");
    let (runner_id, token) = register_simple_runner(&org, "file-cap").await;
    let credential = exchange(&runner_id, &token).await;

    let limit = 256 * 1024;
    let reply = put_raw(
        "/api/remote-runners/self/files/limit.log",
        &credential,
        vec![b'a'; limit],
    )
    .await;
    assert!(
        matches!(reply.status, 200 | 201),
        "exactly 256 KiB is allowed: {reply:?}"
    );
    assert_eq!(reply.json()["size"], limit);

    let reply = put_raw(
        "/api/remote-runners/self/files/over.log",
        &credential,
        vec![b'a'; limit + 1],
    )
    .await;
    assert!(
        matches!(reply.status, 413 | 422),
        "one byte over 256 KiB is refused: {reply:?}"
    );
    reply.expect_error_status(reply.status);
    get(
        &format!("/api/remote-runners/{runner_id}/files/over.log"),
        &org.admin_key,
    )
    .await
    .expect_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn bad_runner_file_names_are_refused() {
    let org = bootstrap_org("identity-file-names");
    let (runner_id, token) = register_simple_runner(&org, "file-names").await;
    let credential = exchange(&runner_id, &token).await;
    for name in [
        "bad%20name.log",
        "bad$name.log",
        "tilde~.log",
        "semi;colon.txt",
    ] {
        put_raw(
            &format!("/api/remote-runners/self/files/{name}"),
            &credential,
            b"x".to_vec(),
        )
        .await
        .expect_error_status(422);
    }
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["files"], json!([]), "{record}");

    // Control: a good name with every allowed character class.
    let reply = put_raw(
        "/api/remote-runners/self/files/Good_name-1.2.txt",
        &credential,
        b"x".to_vec(),
    )
    .await;
    assert!(matches!(reply.status, 200 | 201), "{reply:?}");
}

#[tokio::test]
async fn a_runners_events_page_newest_first_and_every_event_is_reachable() {
    let org = bootstrap_org("identity-events-page");
    let (runner_id, _) = register_simple_runner(&org, "events").await;
    // 1,100 audit events, more than one page may hold (1,000), written as an operator would.
    d1(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1100) \
         INSERT INTO job_events (organization_id, runner_id, actor, type, reason, at) \
         SELECT {}, {}, 'api_key:e2e', 'runner.tags_changed', 'change ' || i, {} + i FROM n",
        sql_text(&org.id),
        sql_text(&runner_id),
        now_ms()
    ));
    let total = 1100 + 1; // and the registration's own event
    let mut ids: Vec<i64> = Vec::new();
    let mut cursor: Option<String> = None;
    // At most 3 pages of 500 hold them all; a list that never ends fails the loop's bound.
    for page_number in 0..4 {
        let path = match &cursor {
            None => format!("/api/remote-runners/{runner_id}/events?limit=500"),
            Some(c) => format!("/api/remote-runners/{runner_id}/events?limit=500&cursor={c}"),
        };
        let page = get(&path, &org.admin_key).await.expect(200);
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if page_number == 0 {
            // Newest first: the last change is the first row.
            assert_eq!(events[0]["reason"], "change 1100", "{}", events[0]);
        }
        ids.extend(
            events
                .iter()
                .map(|e| e["id"].as_i64().expect("an integer id")),
        );
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(ids.len(), total, "every event once");
    assert!(
        ids.windows(2).all(|w| w[0] > w[1]),
        "newest first, no repeat"
    );
    // A cursor this list did not write is refused with a code.
    get(
        &format!("/api/remote-runners/{runner_id}/events?cursor=not-a-cursor"),
        &org.admin_key,
    )
    .await
    .expect_error(422, "INVALID_CURSOR");
}

#[tokio::test]
async fn a_bootstrap_token_registered_without_a_lifetime_expires_in_90_days() {
    let org = bootstrap_org("identity-bootstrap-expiry");
    let (runner_id, token) = register_simple_runner(&org, "expiring").await;
    // The token's lifetime is on the record: 90 days from now (to the minute).
    let record = runner_record(&org.admin_key, &runner_id).await;
    let expires = record["bootstrapTokenExpiresAt"]
        .as_str()
        .unwrap_or_else(|| panic!("no bootstrapTokenExpiresAt in {record}"))
        .to_owned();
    let stored = d1(&format!(
        "SELECT bootstrap_token_expires_at - registered_at AS ttl FROM runners WHERE id = {}",
        sql_text(&runner_id)
    ));
    assert_eq!(
        d1_rows(&stored)[0]["ttl"],
        90 * 86_400_000_i64,
        "{stored} ({expires})"
    );
    exchange(&runner_id, &token).await;
    // 91 days on (the stored times moved back, as the clock cannot be moved forward here), the
    // token no longer exchanges: the one answer for every refusal.
    d1(&format!(
        "UPDATE runners SET bootstrap_token_expires_at = bootstrap_token_expires_at - {} \
         WHERE id = {}",
        91 * 86_400_000_i64,
        sql_text(&runner_id)
    ));
    session(&runner_id, &token)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    // Rotation gives the new token a fresh 90 days.
    let rotated = post(
        &format!("/api/remote-runners/{runner_id}/rotate"),
        Some(&org.admin_key),
        &json!({}),
    )
    .await
    .expect(200);
    let fresh = rotated["bootstrapToken"].as_str().expect("a new token");
    assert!(
        rotated["runner"]["bootstrapTokenExpiresAt"].is_string(),
        "{rotated}"
    );
    exchange(&runner_id, fresh).await;
}
