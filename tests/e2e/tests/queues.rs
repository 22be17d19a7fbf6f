//! `GET /api/remote-runners/queues`, as an autoscaler reads it: each queue's jobs by state,
//! its oldest queued job, the runners that can serve it by state and the runners it wants,
//! every number checked against the jobs and runners this test made; and the counters of
//! `GET /metrics` against what a job did (tests/metrics parses the whole exposition with the
//! Prometheus project's own parser).

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::capability::Requirements;
use edgerunner_protocol::chunk::ChunkKind;
use edgerunner_protocol::queue::QueueKey;
use serde_json::{json, Value};

async fn queues(bearer: &str) -> Value {
    get("/api/remote-runners/queues", bearer).await.expect(200)
}

/// The queue `id` of the view (panics when it is not listed).
fn queue<'a>(view: &'a Value, id: &str) -> &'a Value {
    view["queues"]
        .as_array()
        .and_then(|all| all.iter().find(|q| q["id"] == id))
        .unwrap_or_else(|| panic!("no queue {id} in {view}"))
}

fn key_of(requirements: &Value) -> QueueKey {
    QueueKey::of(&Requirements::parse(requirements).expect("valid requirements"))
}

#[tokio::test]
async fn each_queue_counts_its_jobs_and_the_runners_that_serve_it() {
    let fixture = StagedPrompt::new(bootstrap_org("queues")).await;
    let plain = requirements("prompt");
    let mut gpu = requirements("prompt");
    gpu["tags"] = json!(["gpu"]);
    let (plain_key, gpu_key) = (key_of(&plain), key_of(&gpu));
    assert_ne!(plain_key.id(), gpu_key.id());

    // Nothing enqueued yet: no queue.
    let empty = queues(fixture.key()).await;
    assert_eq!(empty["queues"], json!([]), "{empty}");
    assert_eq!(empty["capped"], false);

    let mut plain_jobs = Vec::new();
    for n in 0..3 {
        let job = enqueue_job(fixture.key(), &fixture.release, &json!({ "n": n }), &plain).await;
        plain_jobs.push(job);
    }
    enqueue_job(
        fixture.key(),
        &fixture.release,
        &json!({ "gpu": true }),
        &gpu,
    )
    .await;
    // One runner for the plain queue, two jobs at once; a gpu runner that never connected.
    let mut runner = fixture.runner(2).await;
    let (gpu_runner, _) = register_runner(
        fixture.key(),
        &json!({
            "name": "gpu", "runnerKey": unique("gpu"), "capabilities": capabilities(&["prompt"]),
            "tags": ["gpu"],
        }),
    )
    .await;

    let view = queues(fixture.key()).await;
    assert_eq!(view["organizationId"], fixture.org.id.as_str());
    let plain_view = queue(&view, plain_key.id());
    assert_eq!(plain_view["name"], plain_key.name());
    assert_eq!(plain_view["routing"], *plain_key.canonical());
    assert_eq!(
        plain_view["jobs"],
        json!({"queued": 3, "claimed": 0, "running": 0, "cancelRequested": 0})
    );
    // The oldest queued job is the first enqueued.
    let first_at = plain_jobs[0]["createdAt"].as_str().expect("createdAt");
    assert_eq!(plain_view["oldestQueuedAt"], first_at, "{plain_view}");
    assert!(plain_view["oldestQueuedAgeSeconds"]
        .as_i64()
        .is_some_and(|s| s >= 0));
    // The plain runner serves it (idle, just connected); the gpu runner shares no tag with it.
    assert_eq!(
        plain_view["runners"],
        json!({"idle": 1, "busy": 0, "draining": 0, "offline": 0}),
        "{plain_view}"
    );
    assert_eq!(plain_view["slotsPerRunner"], 2);
    assert_eq!(plain_view["suggestedRunners"], 2, "ceil(3 / 2)");

    let gpu_view = queue(&view, gpu_key.id());
    assert_eq!(gpu_view["jobs"]["queued"], 1);
    // Only the gpu runner serves it, and it never connected: offline.
    assert_eq!(
        gpu_view["runners"],
        json!({"idle": 0, "busy": 0, "draining": 0, "offline": 1}),
        "{gpu_view} (gpu runner {})",
        id_of(&gpu_runner)
    );
    assert_eq!(gpu_view["slotsPerRunner"], 1);
    assert_eq!(gpu_view["suggestedRunners"], 1);

    // A claim moves a job from queued to claimed, and the runner from idle to busy.
    let claimed = runner.claim_job().await;
    assert!(
        plain_jobs.iter().any(|j| j["id"] == claimed.job_id()),
        "the plain runner took a plain job"
    );
    let view = queues(fixture.key()).await;
    let plain_view = queue(&view, plain_key.id());
    assert_eq!(
        plain_view["jobs"],
        json!({"queued": 2, "claimed": 1, "running": 0, "cancelRequested": 0})
    );
    assert_eq!(plain_view["runners"]["busy"], 1, "{plain_view}");
    assert_eq!(plain_view["suggestedRunners"], 2, "ceil((2 + 1) / 2)");
    let beat = runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["state"], "running");
    let view = queues(fixture.key()).await;
    assert_eq!(queue(&view, plain_key.id())["jobs"]["running"], 1);
}

#[tokio::test]
async fn a_runs_read_key_reads_the_queues_and_another_organization_sees_none_of_them() {
    let fixture = StagedPrompt::new(bootstrap_org("queues-keys")).await;
    fixture.new_job("visible").await;
    let reader = new_api_key(
        fixture.key(),
        &json!({ "name": "reader", "scopes": ["runs:read"] }),
    )
    .await;
    let reader = reader["apiKey"].as_str().expect("apiKey");
    let view = queues(reader).await;
    assert_eq!(view["queues"].as_array().map(Vec::len), Some(1), "{view}");

    let writer = new_api_key(
        fixture.key(),
        &json!({ "name": "writer", "scopes": ["runs:write"] }),
    )
    .await;
    get(
        "/api/remote-runners/queues",
        writer["apiKey"].as_str().expect("apiKey"),
    )
    .await
    .expect_error(403, "FORBIDDEN");
    get("/api/remote-runners/queues", "erk_not-a-key")
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    let other = bootstrap_org("queues-other");
    let theirs = queues(&other.admin_key).await;
    assert_eq!(theirs["queues"], json!([]), "{theirs}");
}

/// `GET /metrics` as text, with the sample `name` (exactly, labels included) read as a number.
async fn scrape(bearer: &str) -> String {
    let reply = get("/metrics", bearer).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.text
}

fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

#[tokio::test]
async fn the_counters_count_what_the_jobs_did_as_the_server_records_it() {
    let f = StagedPrompt::new(bootstrap_org("metrics-counters")).await;
    let before = scrape(f.key()).await;
    for name in [
        "edgerunner_claims_granted_total",
        "edgerunner_stream_bytes_total",
        "edgerunner_leases_lost_total",
        r#"edgerunner_completions_total{outcome="succeeded"}"#,
    ] {
        assert_eq!(sample(&before, name), 0.0, "{name} of a new organization");
    }
    // One job claimed, streamed and completed; its completion sent twice (a duplicate).
    let (runner, claimed) = f.claimed_job(1).await;
    let mut writer = claimed.writer();
    for n in 0..3 {
        let chunk = writer.next(
            ChunkKind::Log,
            json!({ "line": n, "text": "x".repeat(100 * n) }),
            timestamp_now(),
        );
        runner.stream(&chunk.to_json()).await.expect(200);
    }
    let completion = claimed.succeeded(writer.final_checksum(), bare_evidence(f.key()).await);
    runner.complete(&completion).await.expect(200);
    let again = runner.complete(&completion).await.expect(200);
    assert_eq!(again["decision"], "duplicate", "{again}");

    let after = scrape(f.key()).await;
    assert_eq!(sample(&after, "edgerunner_claims_granted_total"), 1.0);
    assert_eq!(
        sample(
            &after,
            r#"edgerunner_completions_total{outcome="succeeded"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(
            &after,
            r#"edgerunner_completions_total{outcome="duplicate"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(&after, r#"edgerunner_completions_total{outcome="failed"}"#),
        0.0
    );
    assert_eq!(sample(&after, "edgerunner_leases_lost_total"), 0.0);
    // The stream's bytes, as the job's own record counts them.
    let detail = job(f.key(), &claimed.job_id()).await;
    let recorded = detail["streamTotals"][0]["payloadBytes"]
        .as_f64()
        .unwrap_or_else(|| panic!("no stream total in {detail}"));
    assert!(recorded > 300.0, "{detail}");
    assert_eq!(sample(&after, "edgerunner_stream_bytes_total"), recorded);
    // Another organization's counters are its own.
    let other = bootstrap_org("metrics-other");
    assert_eq!(
        sample(
            &scrape(&other.admin_key).await,
            "edgerunner_claims_granted_total"
        ),
        0.0
    );
}

/// Jobs are named by what they run: the artifact's name beside its id in the enqueue's answer,
/// its replay, the list, the detail, a cancel's answer and the runner's claim history; never
/// in the custody bundle, which names the artifact by id.
#[tokio::test]
async fn a_job_names_the_artifact_it_runs_wherever_an_admin_reads_it() {
    let org = bootstrap_org("named-jobs");
    let name = unique("capitals");
    let artifact = create_artifact(&org.admin_key, "prompt", &name)
        .await
        .expect(201);
    let release = add_version(
        &org.admin_key,
        "prompt",
        artifact["id"].as_str().expect("an artifact id"),
        prompt_content(),
        &["staging"],
    )
    .await;
    let named = |job: &Value| {
        assert_eq!(job["subject"]["artifactName"], name.as_str(), "{job}");
        assert_eq!(job["subject"]["artifactId"], release.artifact_id.as_str());
        assert_eq!(job["subject"]["versionId"], release.version_id);
    };
    let body = enqueue_body(
        &unique("named"),
        &release,
        "staging",
        &json!({"n": 1}),
        &requirements("prompt"),
    );
    let enqueued = enqueue(&org.admin_key, &body).await.expect(201);
    named(&enqueued);
    named(&enqueue(&org.admin_key, &body).await.expect(200));
    let id = enqueued["id"].as_str().expect("an id").to_owned();
    let listed = get("/api/remote-runners/jobs", &org.admin_key)
        .await
        .expect(200);
    named(&listed["jobs"][0]);
    let queued = get("/api/remote-runners/jobs?state=queued", &org.admin_key)
        .await
        .expect(200);
    named(&queued["jobs"][0]);

    // A runner takes it: its claim history says what the job runs.
    let mut runner = Runner::simple(&org, &["prompt"], 1).await;
    let claimed = runner.claim_job().await;
    assert_eq!(claimed.job_id(), id);
    let claims = get(
        &format!("/api/remote-runners/{}/claims", runner.id),
        &org.admin_key,
    )
    .await
    .expect(200);
    assert_eq!(
        claims["claims"][0]["artifactName"],
        name.as_str(),
        "{claims}"
    );
    assert_eq!(claims["claims"][0]["versionId"], release.version_id);
    named(&job(&org.admin_key, &id).await);
    named(
        &cancel_job(&org.admin_key, &id, "named, then cancelled")
            .await
            .expect(200),
    );

    // The custody bundle names the artifact by id only.
    let sealed: Value =
        serde_json::from_str(&edgerunner_e2e::archive::bundle(&org.admin_key, &id).await)
            .expect("a JSON bundle");
    assert_eq!(
        sealed["job"]["subject"]["artifactId"],
        release.artifact_id.as_str(),
        "{sealed}"
    );
    assert!(
        sealed["job"]["subject"].get("artifactName").is_none(),
        "{sealed}"
    );
}

/// `GET /api/remote-runners/queues/history`: a day of five-minute buckets as the cron pass
/// sampled them, every number checked against what this test did between two passes (no other
/// test of this suite fires the cron; the two passes may fall in one bucket or in two).
#[tokio::test]
async fn the_history_holds_what_each_cron_sample_saw() {
    let f = StagedPrompt::new(bootstrap_org("history")).await;
    let empty = get("/api/remote-runners/queues/history", f.key())
        .await
        .expect(200);
    let buckets = empty["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 288, "a day of five-minute buckets");
    assert_eq!(empty["bucketSeconds"], 300);
    assert!(
        buckets
            .iter()
            .all(|b| b["samples"] == 0 && b["finished"] == 0),
        "a new organization has no history: {}",
        buckets[287]
    );

    // A runner of two slots online, three jobs, one claimed: 2 queued, 1 held, 1 of 2 busy.
    let mut runner = f.runner(2).await;
    for n in 0..3 {
        f.enqueue(&json!({ "n": n })).await;
    }
    let claimed = runner.claim_job().await;
    edgerunner_e2e::recovery::fire_cron().await;
    // It completes: 2 queued, none held, none busy; one finished.
    let completion = claimed.succeeded(None, bare_evidence(f.key()).await);
    runner.complete(&completion).await.expect(200);
    edgerunner_e2e::recovery::fire_cron().await;

    let history = get("/api/remote-runners/queues/history", f.key())
        .await
        .expect(200);
    let sampled: Vec<&Value> = history["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .filter(|b| b["samples"] != 0)
        .collect();
    let sum = |field: &str| {
        sampled
            .iter()
            .filter_map(|b| b[field].as_i64())
            .sum::<i64>()
    };
    let max = |field: &str| sampled.iter().filter_map(|b| b[field].as_i64()).max();
    assert_eq!(sum("samples"), 2, "{sampled:?}");
    assert_eq!(sum("finished"), 1, "{sampled:?}");
    assert_eq!(max("queued"), Some(2));
    assert_eq!(max("running"), Some(1));
    let utilization: Vec<&Value> = sampled.iter().map(|b| &b["utilization"]).collect();
    match sampled.len() {
        // One bucket: 1 busy of 2, then 0 of 2.
        1 => assert_eq!(utilization, [&json!(0.25)]),
        // Two: each its own sample.
        _ => assert_eq!(utilization, [&json!(0.5), &json!(0.0)]),
    }
    // The last bucket is the current one.
    let last = history["buckets"][287]["at"].as_str().expect("at");
    let generated = history["generatedAt"].as_str().expect("generatedAt");
    assert!(last <= generated && generated < history["to"].as_str().expect("to"));
}
