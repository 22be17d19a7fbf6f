//! The cron trigger and the reap endpoint, one bounded pass each.

use super::*;

#[tokio::test]
async fn cron_alone_recovers_an_expired_lease() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-cron")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut a = f.runner(1).await;
    let mut b = f.runner(1).await;

    let passes = global_passes_allowed().await;
    let (claimed_a, lease) = claim_running(&mut a, 60).await;
    // The lease lapses in D1 only: the job's alarm is still a minute away.
    expire(&claimed_a).await;
    fire_cron().await;
    let recovered = job_of(&f, &job_id).await;
    drop(passes);

    let lost = assert_one_loss(
        &recovered,
        &claimed_a,
        &a.id,
        "system:cron",
        "job.requeued",
        "LEASE_LOST_REQUEUED",
    );
    assert!(
        parse_time(str_of(lost, "at")) < lease - SKEW_MS,
        "recovered when the alarm would have, not by cron: {recovered}"
    );
    assert_requeued(&recovered, 1);
    let types = event_types(&recovered);
    assert_eq!(
        types[types.len().saturating_sub(2)..],
        ["job.lease_lost", "job.requeued"],
        "{recovered}"
    );
    assert_runner_lost(&runner_of(&f, &a.id).await);

    // A second runner finishes the job.
    let (claimed_b, _) = claim_running(&mut b, 60).await;
    assert_eq!(claimed_b.job_id(), job_id);
    assert_eq!(claimed_b.attempt().get(), 2);
    assert_ne!(nonce_of(&claimed_b), nonce_of(&claimed_a));
    let mut chain = claimed_b.writer();
    let chunk = chain.next(ChunkKind::Log, json!({ "done": true }), timestamp_now());
    b.stream(&chunk.to_json()).await.expect(200);
    let reply = b
        .complete(&claimed_b.succeeded(chain.final_checksum(), bare_evidence(f.key()).await))
        .await;
    assert_eq!(reply.expect(200)["decision"], "accepted", "{reply:?}");

    let done = job_of(&f, &job_id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["dispatchAttempt"], 2, "{done}");
    let claims = array_of(&done, "claims");
    assert_eq!(claims.len(), 2, "{done}");
    assert_eq!(claims[0]["state"], "lost", "{done}");
    assert_eq!(claims[1]["state"], "released", "{done}");
    assert_eq!(events_of(&done, "job.lease_lost").len(), 1, "{done}");
    let record = runner_of(&f, &b.id).await;
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["completedJobs"], 1, "{record}");
}

// ---------------------------------------------------------------------------------------------
// The reap endpoint
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn reap_endpoint_is_bounded_and_reports_what_remains() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-reap")).await).await;
    let other = d1_write(|| bootstrap_org("recovery-reap-other")).await;
    let key_body = |role: &str, scopes: &[&str]| json!({ "name": unique("reap-key"), "scopes": scopes, "role": role });
    let member = new_api_key(
        f.key(),
        &key_body("member", &["runs:read", "runs:write", "admin:org"]),
    )
    .await;
    let member = str_of(&member, "apiKey").to_owned();
    let without_admin_scope =
        new_api_key(f.key(), &key_body("admin", &["runs:read", "runs:write"])).await;
    let without_admin_scope = str_of(&without_admin_scope, "apiKey").to_owned();
    let mut job_ids = Vec::new();
    for _ in 0..4 {
        job_ids.push(f.new_job("recovery").await);
    }
    let mut runner = f.runner(4).await;

    // Exact counts: no global pass may touch this organization's leases meanwhile.
    let exclusive = no_global_passes().await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let (claimed, _) = claim_running(&mut runner, 60).await;
        held.push(claimed);
    }
    held.sort_by_key(|c| {
        job_ids
            .iter()
            .position(|id| *id == c.job_id())
            .expect("a claimed job is one of ours")
    });
    let ids: Vec<(String, String)> = held.iter().map(|c| (c.job_id(), c.claim_id())).collect();
    let now = now_ms();
    // Three leases lapsed, oldest first; the fourth is alive.
    d1_write(|| {
        set_leases(&[
            (&ids[0].0, &ids[0].1, now - 30_000),
            (&ids[1].0, &ids[1].1, now - 20_000),
            (&ids[2].0, &ids[2].1, now - 10_000),
        ])
    })
    .await;

    // Refusals reap nothing.
    reap(Some(&member), &json!({}))
        .await
        .expect_error(403, "FORBIDDEN");
    reap(Some(&without_admin_scope), &json!({}))
        .await
        .expect_error(403, "FORBIDDEN");
    reap(Some("not-the-cron-secret"), &json!({}))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    let wrong_secret = format!("{}x", cron_secret());
    reap(Some(&wrong_secret), &json!({}))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    reap(None, &json!({}))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    reap(Some(&runner.token), &json!({}))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    for limit in [json!(0), json!(501), json!(-1), json!("2"), json!(1.5)] {
        reap(Some(f.key()), &json!({ "limit": limit }))
            .await
            .expect_error(422, "INVALID_LIMIT");
    }
    // Another organization's admin: a pass over its own (empty) organization.
    expect_report(
        &reap(Some(&other.admin_key), &json!({ "limit": 500 })).await,
        0,
        0,
        0,
        false,
    );
    for (job_id, _) in &ids {
        let view = job_of(&f, job_id).await;
        assert_eq!(view["state"], "running", "a refused reap changed {view}");
    }

    // Two of three, then the rest.
    expect_report(
        &reap(Some(f.key()), &json!({ "limit": 2 })).await,
        2,
        2,
        0,
        true,
    );
    let mut actors = Vec::new();
    for (i, claimed) in held.iter().enumerate() {
        let view = job_of(&f, &claimed.job_id()).await;
        if i < 2 {
            assert_requeued(&view, 1);
            let actor = str_of(single_event(&view, "job.lease_lost"), "actor").to_owned();
            assert!(actor.starts_with("api_key:"), "{view}");
            assert_one_loss(
                &view,
                claimed,
                &runner.id,
                &actor,
                "job.requeued",
                "LEASE_LOST_REQUEUED",
            );
            actors.push(actor);
        } else {
            assert_eq!(view["state"], "running", "oldest expiry first: {view}");
            assert!(events_of(&view, "job.lease_lost").is_empty(), "{view}");
        }
    }
    assert_eq!(actors[0], actors[1]);
    // The actor is the admin's own key.
    let keys = get("/api/developer/api-keys", f.key()).await.expect(200);
    let admin_key_id = array_of(&keys, "apiKeys")
        .iter()
        .find(|k| f.key().starts_with(str_of(k, "prefix")))
        .map(|k| str_of(k, "id").to_owned())
        .unwrap_or_else(|| panic!("the admin key is not listed: {keys}"));
    assert_eq!(actors[0], format!("api_key:{admin_key_id}"));
    expect_report(
        &reap(Some(f.key()), &json!({ "limit": 2 })).await,
        1,
        1,
        0,
        false,
    );
    assert_requeued(&job_of(&f, &ids[2].0).await, 1);
    expect_report(&reap(Some(f.key()), &json!({})).await, 0, 0, 0, false);
    let live = job_of(&f, &ids[3].0).await;
    assert_eq!(live["state"], "running", "a live lease was reaped: {live}");
    let record = runner_of(&f, &runner.id).await;
    assert_eq!(record["state"], "lost", "{record}");
    assert_eq!(record["activeClaims"], 1, "{record}");

    // CRON_SECRET: a pass over every organization (other tests' leases may be in it too).
    d1_write(|| set_lease(&ids[3].0, &ids[3].1, now_ms() - 1_000)).await;
    let reply = reap(Some(&cron_secret()), &json!({ "limit": 500 })).await;
    let report = reply.expect(200);
    let count = |key: &str| {
        report[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no count {key}: {reply:?}"))
    };
    assert!(count("examined") >= 1, "{reply:?}");
    assert!(count("requeued") >= 1, "{reply:?}");
    assert_eq!(count("failed"), 0, "{reply:?}");
    assert_eq!(
        count("examined"),
        count("requeued") + count("ended") + count("unchanged") + count("failed"),
        "{reply:?}"
    );
    assert_eq!(report["more"], false, "{reply:?}");
    let view = job_of(&f, &ids[3].0).await;
    drop(exclusive);
    assert_requeued(&view, 1);
    assert_one_loss(
        &view,
        &held[3],
        &runner.id,
        "system:cron-secret",
        "job.requeued",
        "LEASE_LOST_REQUEUED",
    );
    assert_runner_lost(&runner_of(&f, &runner.id).await);
    // Every lease was lost exactly once.
    for (job_id, _) in &ids {
        let view = job_of(&f, job_id).await;
        assert_eq!(events_of(&view, "job.lease_lost").len(), 1, "{view}");
        assert_eq!(events_of(&view, "job.requeued").len(), 1, "{view}");
    }
}
