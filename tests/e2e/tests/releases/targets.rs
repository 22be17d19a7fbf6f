//! Executable targets and evidence.

use super::*;

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
        ("cost-records", json!({ "amountMicros": 10, "category": 3 })),
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
