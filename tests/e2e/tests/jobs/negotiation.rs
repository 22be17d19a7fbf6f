//! Claim negotiation, never relaxed, and matching that reads the queue index a page at a time.

use super::*;

/// A capability document that satisfies [`negotiation_requirements`] exactly (limits equal).
fn negotiation_capabilities() -> Value {
    json!({
        "executionKinds": ["prompt", "scorer"],
        "runtimes": [RUNTIME, "nodejs20"],
        "limits": limits(100, 1024, 200, 1000),
        "network": {
            "mode": "allowlist",
            "origins": ["https://api.example.com", "https://other.example.com"],
        },
        "streaming": true,
        "cancellation": true,
        "problemTypes": ["e2e/negotiation", "e2e/other"],
        "external": false,
    })
}

fn negotiation_requirements() -> Value {
    json!({
        "executionKind": "scorer",
        "runtime": RUNTIME,
        "limits": limits(100, 1024, 200, 1000),
        "network": { "mode": "allowlist", "origins": ["https://api.example.com"] },
        "streaming": true,
        "cancellation": true,
        "problemType": "e2e/negotiation",
        "external": false,
        "tags": ["gpu"],
    })
}

async fn negotiation_runner(org: &Org, capabilities: Value, tags: &[&str]) -> Runner {
    let runner = Runner::register(org, capabilities, 1).await;
    if !tags.is_empty() {
        let reply = patch_runner(
            &org.admin_key,
            &runner.id,
            &json!({ "tags": tags, "reason": "e2e routing" }),
        )
        .await;
        assert_eq!(reply.status, 200, "PATCH tags: {reply:?}");
    }
    runner
}

#[tokio::test]
async fn claim_negotiation_is_never_relaxed() {
    let org = org("jobs-negotiation").await;
    let key = org.admin_key.clone();
    let release = release(
        &key,
        "scorer",
        json!({ "scorer": "exact-match" }),
        &["staging"],
    )
    .await;
    let other_version = add_version(
        &key,
        "scorer",
        &release.artifact_id,
        json!({ "scorer": "exact-match", "revision": 2 }),
        &["staging"],
    )
    .await;
    let reqs = negotiation_requirements();
    let input = json!({ "expected": "a", "actual": "a" });
    let first = enqueue_job(&key, &release, &input, &reqs).await;
    let second = enqueue_job(&key, &release, &input, &reqs).await;
    let job_ids: BTreeSet<String> = [&first, &second]
        .iter()
        .map(|j| str_of(j, "id").to_owned())
        .collect();

    let edit = |path: &[&str], value: Value| {
        let mut caps = negotiation_capabilities();
        let mut slot = &mut caps;
        for part in path {
            slot = &mut slot[*part];
        }
        *slot = value;
        caps
    };
    let incompatible: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "lacks the kind",
            edit(&["executionKinds"], json!(["prompt", "tool"])),
            vec!["gpu"],
        ),
        (
            "other runtime",
            edit(&["runtimes"], json!(["python3.11"])),
            vec!["gpu"],
        ),
        (
            "lower cpu",
            edit(&["limits", "cpuSeconds"], json!(99)),
            vec!["gpu"],
        ),
        (
            "lower memory",
            edit(&["limits", "memoryMb"], json!(1023)),
            vec!["gpu"],
        ),
        (
            "lower wall",
            edit(&["limits", "wallSeconds"], json!(199)),
            vec!["gpu"],
        ),
        (
            "lower output",
            edit(&["limits", "outputBytes"], json!(999)),
            vec!["gpu"],
        ),
        (
            "deny_all",
            edit(&["network"], json!({ "mode": "deny_all" })),
            vec!["gpu"],
        ),
        (
            "allowlist without the origin",
            edit(
                &["network"],
                json!({ "mode": "allowlist", "origins": ["https://other.example.com"] }),
            ),
            vec!["gpu"],
        ),
        (
            "no streaming",
            edit(&["streaming"], json!(false)),
            vec!["gpu"],
        ),
        (
            "no cancellation",
            edit(&["cancellation"], json!(false)),
            vec!["gpu"],
        ),
        (
            "other problem type",
            edit(&["problemTypes"], json!(["e2e/other"])),
            vec!["gpu"],
        ),
        (
            "no problem type",
            edit(&["problemTypes"], json!([])),
            vec!["gpu"],
        ),
        ("external", edit(&["external"], json!(true)), vec!["gpu"]),
        (
            "no shared tag",
            negotiation_capabilities(),
            vec!["cpu", "arm"],
        ),
        ("default tag only", negotiation_capabilities(), vec![]),
    ];
    for (why, caps, tags) in incompatible {
        let runner = negotiation_runner(&org, caps, &tags).await;
        let reply = runner.claim().await;
        assert_eq!(reply.status, 204, "{why}: {reply:?}");
        let reply = runner
            .claim_with(&json!({ "servedTargets": [release.served_target()] }))
            .await;
        assert_eq!(reply.status, 204, "{why} (serving the version): {reply:?}");
    }

    // A draining runner, otherwise compatible: 503.
    let draining = negotiation_runner(&org, negotiation_capabilities(), &["gpu"]).await;
    set_status(&key, &draining.id, "draining", "e2e drain").await;
    draining
        .claim()
        .await
        .expect_error(503, "RUNNER_NOT_ACTIVE");

    // The compatible runner: not for a version it does not serve; yes for the one it does.
    let mut compatible =
        negotiation_runner(&org, negotiation_capabilities(), &["gpu", "x86"]).await;
    let wrong = json!({ "servedTargets": [other_version.served_target()] });
    let reply = compatible.claim_with(&wrong).await;
    assert_eq!(
        reply.status, 204,
        "served targets exclude the version: {reply:?}"
    );
    let mut stale_hash = release.served_target();
    stale_hash["contentHash"] = json!(other_version.content_hash);
    let reply = compatible
        .claim_with(&json!({ "servedTargets": [stale_hash] }))
        .await;
    assert_eq!(reply.status, 204, "right id, wrong content hash: {reply:?}");
    let targets = [other_version.served_target(), release.served_target()];
    let reply = compatible
        .claim_with(&json!({ "servedTargets": targets }))
        .await;
    let claimed = compatible
        .verify(&reply, &targets)
        .unwrap_or_else(|e| panic!("assignment refused ({e}): {reply:?}"));
    assert!(job_ids.contains(&claimed.job_id()), "{reply:?}");
    assert_eq!(
        claimed.verified.envelope().subject.version_id,
        release.version_id
    );
    assert_eq!(
        claimed.verified.envelope().requirements.as_map()["problemType"],
        "e2e/negotiation"
    );

    // At capacity (1) with a compatible job still queued: 503.
    compatible
        .claim()
        .await
        .expect_error(503, "RUNNER_AT_CAPACITY");
    // ... and the queued job was claimable all along: a second compatible runner takes it.
    let mut another = negotiation_runner(&org, negotiation_capabilities(), &["gpu"]).await;
    let taken = another.claim_job().await;
    assert_ne!(taken.job_id(), claimed.job_id());
    assert!(job_ids.contains(&taken.job_id()));
    let none = another.claim().await;
    assert_eq!(none.status, 503, "at capacity again: {none:?}");
    let reactivated = draining;
    set_status(&key, &reactivated.id, "active", "e2e undrain").await;
    let reply = reactivated.claim().await;
    assert_eq!(reply.status, 204, "nothing left: {reply:?}");
}

// ---------------------------------------------------------------------------------------------
// Matching reads the queue index a page at a time
// ---------------------------------------------------------------------------------------------

/// Forty queued jobs this runner cannot take (each asks for more memory than its ceiling) sit
/// ahead of the one it can: paging through the index range still finds it, and none of the
/// incompatible jobs is claimed on the way.
#[tokio::test]
async fn compatible_job_behind_many_incompatible_ones_is_found() {
    let f = StagedPrompt::new(org("jobs-head-of-line").await).await;
    let mut small = Runner::register(
        &f.org,
        json!({
            "executionKinds": ["prompt"],
            "runtimes": [RUNTIME],
            "limits": { "cpuSeconds": 60, "memoryMb": 1024, "wallSeconds": 120, "outputBytes": 1_048_576 },
        }),
        1,
    )
    .await;
    let mut too_big = requirements("prompt");
    too_big["limits"]["memoryMb"] = json!(4096);
    for i in 0..40 {
        enqueue_job(f.key(), &f.release, &json!({ "big": i }), &too_big).await;
    }
    let fitting = f.enqueue(&json!({ "fits": true })).await;

    let claimed = small.claim_job().await;
    assert_eq!(
        claimed.assignment["claim"]["jobId"], fitting["id"],
        "{:?}",
        claimed.assignment
    );
    // The forty are still queued for a runner that can take them.
    let listed = get("/api/remote-runners/jobs?limit=100", f.key())
        .await
        .expect(200);
    let queued = array_of(&listed, "jobs")
        .iter()
        .filter(|j| j["state"] == "queued")
        .count();
    assert_eq!(queued, 40, "{listed}");
}
