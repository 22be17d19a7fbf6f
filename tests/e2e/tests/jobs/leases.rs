//! Cancellation, heartbeats and their lease bounds, and an expired lease refusing appends and heartbeats before recovery acts.

use super::*;

#[tokio::test]
async fn cancellation_queued_at_once_running_through_the_runner() {
    let f = StagedPrompt::new(org("jobs-cancel").await).await;
    let key = f.key().to_owned();
    let mut runner = f.runner(1).await;

    // A queued job cancels at once and is never dispatched.
    let queued = f.enqueue(&json!({ "case": "queued" })).await;
    let queued_id = str_of(&queued, "id").to_owned();
    // What the job offers is what its object then does: a cancel, until one moves it.
    assert_eq!(queued["terminal"], false, "{queued}");
    assert_eq!(queued["actions"], json!(["cancel"]), "{queued}");
    post(
        &format!("/api/remote-runners/jobs/{queued_id}/cancel"),
        Some(&key),
        &json!({}),
    )
    .await
    .expect_error(422, "REASON_REQUIRED");
    let reader = new_api_key(&key, &json!({ "name": "reader", "scopes": ["runs:read"] })).await;
    cancel_job(str_of(&reader, "apiKey"), &queued_id, "not allowed")
        .await
        .expect_error(403, "FORBIDDEN");
    let cancelled = cancel_job(&key, &queued_id, "superseded by a newer release")
        .await
        .expect(200);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["cancelReason"], "superseded by a newer release");
    assert!(cancelled["finishedAt"].is_string(), "{cancelled}");
    assert_eq!(cancelled["terminal"], true, "{cancelled}");
    // Nothing moves a finished job; an admin may hold it past its retention.
    assert_eq!(cancelled["actions"], json!(["hold"]), "{cancelled}");
    let reply = runner.claim().await;
    assert_eq!(
        reply.status, 204,
        "a cancelled job was dispatched: {reply:?}"
    );
    cancel_job(&key, &queued_id, "again")
        .await
        .expect_error(409, "JOB_FINISHED");

    // A running job: cancel_requested, seen on the next heartbeat.
    f.enqueue(&json!({ "case": "running" })).await;
    let claimed = claim_running(&mut runner).await;
    let job_id = claimed.job_id();
    let reason = "operator stopped the rollout ✋";
    let requested = cancel_job(&key, &job_id, reason).await.expect(200);
    assert_eq!(requested["state"], "cancel_requested", "{requested}");
    assert_eq!(requested["cancelReason"], reason);
    assert_eq!(requested["activeClaimId"], claimed.claim_id().as_str());
    // Cancelling already: a second cancel changes nothing, so none is offered.
    assert_eq!(requested["terminal"], false, "{requested}");
    assert_eq!(requested["actions"], json!([]), "{requested}");
    let again = cancel_job(&key, &job_id, "a second reason")
        .await
        .expect(200);
    assert_eq!(again["state"], "cancel_requested", "{again}");
    assert_eq!(again["cancelReason"], reason, "unchanged: {again}");

    let beat = runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["cancelRequested"], true, "{beat}");
    assert_eq!(beat["cancelReason"], reason, "{beat}");
    assert_eq!(beat["state"], "cancel_requested", "{beat}");

    // The runner stops at a safe boundary and reports `cancelled`.
    let completion = Completion::seal(claimed.fields(
        CompletionStatus::Cancelled,
        None,
        None,
        bare_evidence(&key).await,
    ))
    .to_json();
    let reply = runner.complete(&completion).await;
    let decision = reply.expect(200);
    assert_eq!(decision["decision"], "accepted", "{reply:?}");
    assert_eq!(decision["jobState"], "cancelled", "{reply:?}");
    let done = job(&key, &job_id).await;
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(done["cancelReason"], reason);
    assert!(done["finishedAt"].is_string(), "{done}");
    assert_eq!(done["activeClaimId"], Value::Null);
    assert_eq!(done["terminal"], true, "{done}");
    assert_eq!(done["actions"], json!(["hold"]), "{done}");
    assert_eq!(array_of(&done, "completions")[0]["status"], "cancelled");
    assert_events_ordered(&done);
    let record = runner_record(&key, &runner.id).await;
    assert_eq!(record["activeClaims"], 0, "{record}");

    cancel_job(&key, &job_id, "too late")
        .await
        .expect_error(409, "JOB_FINISHED");
}

// ---------------------------------------------------------------------------------------------
// Heartbeats
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn heartbeat_lease_bounds_and_ownership() {
    let f = StagedPrompt::new(org("jobs-heartbeat").await).await;
    let mut runner = f.runner(1).await;
    let other = f.runner(1).await;
    f.enqueue(&json!({ "case": "heartbeat" })).await;
    let claimed = runner.claim_job().await;
    let claim_id = claimed.claim_id();

    for extend in [5, 500, 14, 121, 0, -60] {
        runner
            .heartbeat(&claim_id, extend)
            .await
            .expect_error(422, "INVALID_LEASE");
    }
    assert_eq!(
        job(f.key(), &claimed.job_id()).await["state"],
        "claimed",
        "a refused heartbeat started the job"
    );

    for extend in [15, 120] {
        let before = now_ms();
        let beat = runner.heartbeat(&claim_id, extend).await.expect(200);
        let lease = parse_time(str_of(&beat, "leaseExpiresAt"));
        let want = extend * 1000;
        assert!(
            (before + want - SKEW_MS..=now_ms() + want + SKEW_MS).contains(&lease),
            "extendSeconds {extend}: {beat}"
        );
        assert_eq!(beat["state"], "running");
        let stored = job(f.key(), &claimed.job_id()).await;
        assert_eq!(
            parse_time(str_of(&stored, "leaseExpiresAt")),
            lease,
            "{stored}"
        );
    }

    other
        .heartbeat(&claim_id, 60)
        .await
        .expect_error(404, "NOT_FOUND");
    // Not a claim id the server issues: refused at the edge, no job's object is asked.
    runner
        .heartbeat("clm_does_not_exist", 60)
        .await
        .expect_error(422, "CLAIM_ID_MALFORMED");
    post(
        "/api/remote-runners/heartbeat",
        Some(f.key()),
        &json!({ "claimId": claim_id, "extendSeconds": 60 }),
    )
    .await
    .expect_error(401, "AUTHENTICATION_FAILED");

    // A released claim takes no heartbeat.
    let decision = runner
        .complete(&claimed.succeeded(None, bare_evidence(f.key()).await))
        .await
        .expect(200);
    assert_eq!(decision["decision"], "accepted");
    runner
        .heartbeat(&claim_id, 60)
        .await
        .expect_error(409, "CLAIM_NOT_ACTIVE");
}

// ---------------------------------------------------------------------------------------------
// An expired lease refuses appends and heartbeats (before recovery has acted)
// ---------------------------------------------------------------------------------------------

/// Between a lease's expiry and its recovery the claim still exists, but it no longer covers
/// work: a chunk is refused with STREAM_LEASE_EXPIRED and a heartbeat with LEASE_EXPIRED, and
/// neither stores anything. (The lease is moved into the past in D1; the job's alarm stays a
/// minute away and nothing in this test binary fires cron, so recovery cannot intervene.)
#[tokio::test]
async fn an_expired_lease_refuses_appends_and_heartbeats() {
    let f = StagedPrompt::new(org("jobs-lease-expired").await).await;
    let job = f.enqueue(&json!({ "lease": "expires" })).await;
    let mut runner = f.runner(1).await;
    let claimed = claim_running(&mut runner).await;
    let identity = claimed.identity();
    let chunk = next_chunk(
        &ChainHead::empty(),
        &identity,
        json!({ "before": "expiry" }),
    );
    expect_chunk_accepted(
        &runner.stream(&chunk).await,
        0,
        &Sha256Hex::parse(str_of(&chunk, "checksum")).unwrap(),
    );

    edgerunner_e2e::recovery::set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() - 1_000);
    let first = Sha256Hex::parse(str_of(&chunk, "checksum")).unwrap();
    let head = ChainHead::restore(1, vec![first]).expect("a one-chunk head");
    let late = next_chunk(&head, &identity, json!({ "after": "expiry" }));
    expect_chunk_error(&runner.stream(&late).await, &ChunkError::LeaseExpired);
    runner
        .heartbeat(&claimed.claim_id(), 60)
        .await
        .expect_error(409, "LEASE_EXPIRED");

    let shown = get_job(f.key(), str_of(&job, "id")).await.expect(200);
    assert_eq!(
        array_of(&shown, "stream").len(),
        1,
        "the late chunk was stored: {shown}"
    );
    assert_eq!(shown["state"], "running", "{shown}");
}
