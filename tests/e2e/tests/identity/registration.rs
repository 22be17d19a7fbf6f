//! Registration, and status changes with their audit trail.

use super::*;

#[tokio::test]
async fn registration_shows_the_bootstrap_token_once() {
    let org = bootstrap_org("identity-register");
    let body = registration("register-once");
    let reply = post("/api/remote-runners", Some(&org.admin_key), &body).await;
    let registered = reply.expect(201);
    assert_eq!(
        keys(&registered),
        set(&["runner", "bootstrapToken"]),
        "{reply:?}"
    );
    let token = str_of(&registered, "bootstrapToken").to_owned();
    assert!(token.starts_with("erb_"), "{token:?}");
    let runner = &registered["runner"];
    assert_runner_shape(runner);
    let runner_id = id_of(runner);
    assert_eq!(runner["identityModel"], "bootstrap");
    assert_eq!(runner["state"], "active");
    assert_eq!(runner["organizationId"], org.id.as_str());
    assert_eq!(runner["name"], body["name"]);
    assert_eq!(runner["runnerKey"], body["runnerKey"]);
    assert!(runner["fingerprint"].is_null() && runner["publicKey"].is_null());
    assert_eq!(runner["activeClaims"], 0);
    assert_eq!(runner["completedJobs"], 0);
    assert_eq!(runner["files"], json!([]));
    parse_time(str_of(runner, "registeredAt"));
    // Without the secret in the runner record itself either.
    assert_no_secret(&runner.to_string(), &[&token]);

    let record = get_runner(&org.admin_key, &runner_id).await;
    assert_eq!(record.expect(200)["id"], runner_id.as_str());
    assert_no_secret(&record.text, &[&token]);
    let listed = list_runners(&org.admin_key).await;
    assert!(listed.expect(200)["runners"]
        .as_array()
        .is_some_and(|rs| rs.iter().any(|r| r["id"] == runner_id.as_str())));
    assert_no_secret(&listed.text, &[&token]);

    // The token works, and the credential and signing secret stay out of every record.
    let session_body = session(&runner_id, &token).await.expect(200);
    let credential = str_of(&session_body, "token");
    let secret = str_of(&session_body["jobSigning"], "secret");
    for reply in [
        get_runner(&org.admin_key, &runner_id).await,
        list_runners(&org.admin_key).await,
        runner_self(credential).await,
    ] {
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_no_secret(&reply.text, &[&token, credential, secret]);
    }
}

#[tokio::test]
async fn duplicate_runner_key_is_refused_within_an_organization() {
    let org = bootstrap_org("identity-duplicate-key");
    let body = registration("duplicate");
    register_runner(&org.admin_key, &body).await;
    post("/api/remote-runners", Some(&org.admin_key), &body)
        .await
        .expect_error(409, "RUNNER_KEY_TAKEN");

    // Unique per organization, not globally.
    let other = bootstrap_org("identity-duplicate-key-other");
    register_runner(&other.admin_key, &body).await;
}

#[tokio::test]
async fn invalid_capabilities_are_refused() {
    let org = bootstrap_org("identity-invalid-capabilities");
    let invalid = [
        json!({ "executionKinds": ["teleport"], "runtimes": ["python3.12"] }),
        json!({ "executionKinds": ["prompt"] }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "limits": { "cpuSeconds": -1 } }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "network": { "mode": "everything" } }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "tags": ["gpu"] }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "streaming": "yes" }),
        json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"], "protocolVersion": "2" }),
        json!("fast"),
    ];
    for capabilities in invalid {
        let mut body = registration("invalid-capabilities");
        body["capabilities"] = capabilities.clone();
        let reply = post("/api/remote-runners", Some(&org.admin_key), &body).await;
        assert_eq!(reply.status, 422, "{capabilities} was accepted: {reply:?}");
        reply.expect_error(422, "INVALID_CAPABILITIES");
    }
    let listed = list_runners(&org.admin_key).await.expect(200);
    assert_eq!(listed["runners"], json!([]), "nothing was registered");
}

#[tokio::test]
async fn capability_defaults_are_filled_and_hashed() {
    let org = bootstrap_org("identity-capability-defaults");
    let declared = minimal_capabilities();
    let mut body = registration("capability-defaults");
    body["capabilities"] = declared.clone();
    let (runner, _) = register_runner(&org.admin_key, &body).await;

    let caps = &runner["capabilities"];
    assert_eq!(caps["network"], json!({ "mode": "deny_all" }), "{caps}");
    assert_eq!(caps["streaming"], true, "{caps}");
    assert_eq!(caps["cancellation"], true, "{caps}");
    assert_eq!(
        caps["limits"],
        json!({ "cpuSeconds": 3600, "memoryMb": 65536, "wallSeconds": 86400, "outputBytes": 104857600 }),
        "{caps}"
    );
    assert_eq!(caps["protocolVersion"], "1", "{caps}");
    assert_eq!(caps["executionKinds"], json!(["prompt"]));
    assert_eq!(caps["runtimes"], json!(["python3.12"]));
    assert_eq!(runner["protocolVersion"], "1");
    assert_eq!(runner["maxConcurrentJobs"], 1);
    assert_eq!(runner["external"], false);
    assert_eq!(runner["problemTypes"], json!([]));

    let hash = str_of(&runner, "capabilityHash");
    assert!(is_hex64(hash), "capabilityHash {hash:?}");
    assert_eq!(
        hash,
        stable_json::hash(caps).as_str(),
        "capabilityHash = H(capabilities)"
    );
    let canonical = CapabilityDocument::parse(&declared).expect("a valid declaration");
    assert_eq!(
        caps,
        &canonical.to_value(),
        "the stored document is the canonical one"
    );
    assert_eq!(
        runner_record(&org.admin_key, &id_of(&runner)).await["capabilityHash"],
        hash
    );

    // A fuller declaration: partial limits keep the other defaults; lists are sets.
    let declared = json!({
        "executionKinds": ["scorer", "prompt"],
        "runtimes": ["nodejs20", "python3.12"],
        "limits": { "cpuSeconds": 60 },
        "network": { "mode": "allowlist", "origins": ["https://api.example.com"] },
        "streaming": false,
        "problemTypes": ["math/v1"],
        "external": true,
    });
    let mut body = registration("capability-full");
    body["capabilities"] = declared.clone();
    body["tags"] = json!(["gpu"]);
    let (runner, _) = register_runner(&org.admin_key, &body).await;
    let caps = &runner["capabilities"];
    assert_eq!(
        caps["limits"],
        json!({ "cpuSeconds": 60, "memoryMb": 65536, "wallSeconds": 86400, "outputBytes": 104857600 })
    );
    assert_eq!(caps["streaming"], false);
    assert_eq!(caps["cancellation"], true);
    assert_eq!(runner["external"], true);
    assert_eq!(runner["problemTypes"], json!(["math/v1"]));
    assert_eq!(runner["tags"], json!(["gpu"]));
    assert_eq!(
        str_of(&runner, "capabilityHash"),
        stable_json::hash(caps).as_str()
    );
    assert_eq!(
        caps,
        &CapabilityDocument::parse(&declared)
            .expect("a valid declaration")
            .to_value()
    );
}

#[tokio::test]
async fn top_level_max_concurrent_jobs_overrides_the_document() {
    let org = bootstrap_org("identity-max-concurrent");
    let mut body = registration("max-concurrent");
    body["capabilities"]["maxConcurrentJobs"] = json!(2);
    body["maxConcurrentJobs"] = json!(3);
    let (runner, _) = register_runner(&org.admin_key, &body).await;
    assert_eq!(runner["maxConcurrentJobs"], 3, "{runner}");
    assert_eq!(
        str_of(&runner, "capabilityHash"),
        stable_json::hash(&runner["capabilities"]).as_str()
    );

    let mut body = registration("max-concurrent-doc");
    body["capabilities"]["maxConcurrentJobs"] = json!(4);
    let (runner, _) = register_runner(&org.admin_key, &body).await;
    assert_eq!(runner["maxConcurrentJobs"], 4, "{runner}");
}

// =============================================================================================
// Status changes and their audit trail
// =============================================================================================

#[tokio::test]
async fn drain_and_reactivate_are_audited_with_their_reasons() {
    let org = bootstrap_org("identity-drain");
    let (runner_id, token) = register_simple_runner(&org, "drain").await;

    set_status(
        &org.admin_key,
        &runner_id,
        "draining",
        "kernel upgrade on host 7",
    )
    .await;
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "draining");
    assert_eq!(record["stateReason"], "kernel upgrade on host 7");
    // Offered: each move the runner machine would make, and the bootstrap token's rotation.
    assert_eq!(
        record["actions"],
        json!(["activate", "rotate", "revoke"]),
        "{record}"
    );

    // A draining runner may still authenticate, and stays draining.
    let credential = exchange(&runner_id, &token).await;
    assert_eq!(
        runner_self(&credential).await.expect(200)["state"],
        "draining"
    );
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "draining"
    );

    set_status(&org.admin_key, &runner_id, "active", "upgrade finished").await;
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active");
    assert_eq!(
        record["actions"],
        json!(["drain", "rotate", "revoke"]),
        "{record}"
    );

    let reply = patch_runner(
        &org.admin_key,
        &runner_id,
        &json!({ "tags": ["gpu", "slow"], "reason": "moved to the GPU pool" }),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let record = runner_record(&org.admin_key, &runner_id).await;
    let tags: BTreeSet<&str> = record["tags"]
        .as_array()
        .unwrap_or_else(|| panic!("tags: {record}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(tags, BTreeSet::from(["gpu", "slow"]), "{record}");
    assert_eq!(record["state"], "active");

    let reasons = event_reasons(&org.admin_key, &runner_id).await;
    for reason in [
        "kernel upgrade on host 7",
        "upgrade finished",
        "moved to the GPU pool",
    ] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no audit event with reason {reason:?}: {reasons:?}"
        );
    }
}

#[tokio::test]
async fn status_change_without_a_reason_is_refused() {
    let org = bootstrap_org("identity-reason-required");
    let (runner_id, _) = register_simple_runner(&org, "reason-required").await;
    for body in [
        json!({ "status": "draining" }),
        json!({ "status": "draining", "reason": "" }),
        json!({ "tags": ["gpu"] }),
    ] {
        patch_runner(&org.admin_key, &runner_id, &body)
            .await
            .expect_error(422, "REASON_REQUIRED");
    }
    let record = runner_record(&org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active");
    assert_eq!(record["tags"], json!([]));
}

#[tokio::test]
async fn lost_runner_comes_back_active_by_exchanging_a_session() {
    let org = bootstrap_org("identity-lost");
    let (runner_id, token) = register_simple_runner(&org, "lost").await;
    let answer = d1(&format!(
        "UPDATE runners SET state = 'lost', state_reason = 'e2e: heartbeats stopped' \
         WHERE id = {} RETURNING id",
        sql_text(&runner_id)
    ));
    assert_eq!(d1_rows(&answer).len(), 1, "{answer}");
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "lost"
    );

    let credential = exchange(&runner_id, &token).await;
    assert_eq!(
        runner_record(&org.admin_key, &runner_id).await["state"],
        "active"
    );
    assert_eq!(
        runner_self(&credential).await.expect(200)["state"],
        "active"
    );
}
