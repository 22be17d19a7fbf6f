//! A job object's own alarm at its lease expiry.

use super::*;

#[tokio::test]
async fn alarm_requeues_a_silent_runners_job_at_lease_expiry() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-alarm")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut a = f.runner(1).await;
    let mut b = f.runner(1).await;

    // Nothing but the alarm may recover this lease.
    let exclusive = no_global_passes().await;
    let (claimed_a, _) = claim_running(&mut a, 40).await;
    // A second beat at once: the alarm the first one set is at or before the new lease and
    // more than 30 s ahead, so the object leaves it there. It fires just before the lease ends,
    // finds the lease alive and re-arms at it; the loss comes at the lease, not before.
    let beat = a.heartbeat(&claimed_a.claim_id(), 40).await.expect(200);
    let lease = parse_time(str_of(&beat, "leaseExpiresAt"));
    assert_eq!(claimed_a.job_id(), job_id);
    assert_eq!(claimed_a.attempt().get(), 1);
    let mut chain_a = claimed_a.writer();
    let chunk = chain_a.next(ChunkKind::Log, json!({ "step": 1 }), timestamp_now());
    a.stream(&chunk.to_json()).await.expect(200);

    // A goes silent. Poll until the job is back in the queue.
    let deadline = lease + RECOVERY_GRACE_MS;
    let mut polls = 0;
    let mut quiet_window = None;
    let recovered = loop {
        if quiet_window.is_none() && now_ms() >= lease - 5_000 {
            quiet_window = Some(quiet().await);
        }
        let view = job_of(&f, &job_id).await;
        let now = now_ms();
        match str_of(&view, "state") {
            "queued" => break view,
            "running" => assert!(
                now < deadline,
                "not recovered {RECOVERY_GRACE_MS} ms after the lease lapsed: {view}"
            ),
            _ => panic!("a silent runner's job went neither back to the queue nor stayed: {view}"),
        }
        polls += 1;
        tokio::time::sleep(POLL).await;
    };
    drop(quiet_window);
    assert!(
        polls > 0,
        "the job was recovered before its lease could lapse"
    );

    let lost = assert_one_loss(
        &recovered,
        &claimed_a,
        &a.id,
        "system:alarm",
        "job.requeued",
        "LEASE_LOST_REQUEUED",
    );
    drop(exclusive);
    let lost_at = parse_time(str_of(lost, "at"));
    assert!(
        lost_at >= lease,
        "recovered before the lease lapsed ({lost_at} < {lease}): {recovered}"
    );
    assert!(lost_at < deadline, "{recovered}");
    assert_eq!(
        single_event(&recovered, "job.requeued")["detail"]["nextAttempt"],
        2,
        "{recovered}"
    );
    assert_requeued(&recovered, 1);
    assert_runner_lost(&runner_of(&f, &a.id).await);

    // B takes attempt 2 with a fresh nonce; A's old credential is dead (generation moved).
    let claimed_b = b.claim_job().await;
    assert_eq!(claimed_b.job_id(), job_id);
    assert_eq!(claimed_b.attempt().get(), 2, "{:?}", claimed_b.assignment);
    assert_eq!(claimed_b.assignment["claim"]["dispatchAttempt"], 2);
    assert_ne!(claimed_b.claim_id(), claimed_a.claim_id());
    assert_ne!(
        nonce_of(&claimed_b),
        nonce_of(&claimed_a),
        "attempt 2 reuses the nonce of attempt 1"
    );
    let beat = b.heartbeat(&claimed_b.claim_id(), 60).await.expect(200);
    assert_eq!(beat["state"], "running", "{beat}");
    let mut chain_b = claimed_b.writer();
    for step in 0..2 {
        let chunk = chain_b.next(ChunkKind::Log, json!({ "b": step }), timestamp_now());
        b.stream(&chunk.to_json()).await.expect(200);
    }

    let late_chunk = chain_a.next(ChunkKind::Log, json!({ "step": 2 }), timestamp_now());
    a.heartbeat(&claimed_a.claim_id(), 15)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    a.stream(&late_chunk.to_json())
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    a.claim().await.expect_error(401, "AUTHENTICATION_FAILED");

    // A fresh session: A is alive and active again, but its attempt is over.
    a.token = exchange(&a.id, &a.bootstrap_token).await;
    let record = runner_of(&f, &a.id).await;
    assert_eq!(record["state"], "active", "{record}");
    assert_eq!(record["activeClaims"], 0, "{record}");
    let nothing = a.claim().await;
    assert_eq!(nothing.status, 204, "B holds the only job: {nothing:?}");
    a.heartbeat(&claimed_a.claim_id(), 15)
        .await
        .expect_error(409, "CLAIM_NOT_ACTIVE");
    a.stream(&late_chunk.to_json())
        .await
        .expect_error(409, "STREAM_IDENTITY_CHANGED");

    // B completes; then A's late completion is stored as stale and changes nothing.
    let evidence = full_evidence(f.key()).await;
    let reply = b
        .complete(&claimed_b.succeeded(chain_b.final_checksum(), evidence))
        .await;
    let accepted = reply.expect(200);
    assert_eq!(accepted["decision"], "accepted", "{reply:?}");
    assert_eq!(accepted["jobState"], "succeeded", "{reply:?}");

    let late = claimed_a.succeeded(chain_a.final_checksum(), bare_evidence(f.key()).await);
    let reply = a.complete(&late).await;
    reply.expect_error(409, "COMPLETION_STALE");
    assert_eq!(reply.json()["decision"]["decision"], "stale", "{reply:?}");

    let done = job_of(&f, &job_id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["dispatchAttempt"], 2, "{done}");
    let completions = array_of(&done, "completions");
    assert_eq!(completions.len(), 2, "{done}");
    assert_eq!(completions[0]["decision"], "accepted", "{done}");
    assert_eq!(completions[0]["dispatchAttempt"], 2, "{done}");
    assert_eq!(completions[0]["runnerId"], b.id.as_str(), "{done}");
    assert_eq!(completions[1]["decision"], "stale", "{done}");
    assert_eq!(completions[1]["dispatchAttempt"], 1, "{done}");
    assert_eq!(completions[1]["runnerId"], a.id.as_str(), "{done}");
    assert_eq!(completions[1]["claimId"], claimed_a.claim_id().as_str());
    assert_eq!(
        completions[1]["completionChecksum"], late["completionChecksum"],
        "{done}"
    );
    let claims = array_of(&done, "claims");
    assert_eq!(claims.len(), 2, "{done}");
    assert_eq!(
        (&claims[0]["state"], &claims[1]["state"]),
        (&json!("lost"), &json!("released")),
        "{done}"
    );
    // The stream holds A's one chunk of attempt 1 and B's two of attempt 2; the late one is not
    // stored.
    let stream: Vec<(i64, i64)> = array_of(&done, "stream")
        .iter()
        .map(|c| {
            (
                c["dispatchAttempt"].as_i64().unwrap_or(-1),
                c["sequence"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(stream, [(1, 0), (2, 0), (2, 1)], "{done}");
    assert_eq!(
        single_event(&done, "job.lease_lost")["actor"],
        "system:alarm"
    );
    assert_eq!(events_of(&done, "job.requeued").len(), 1, "{done}");
    assert_eq!(events_of(&done, "job.completion_stale").len(), 1, "{done}");

    let record = runner_of(&f, &a.id).await;
    assert_eq!(record["state"], "active", "{record}");
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["completedJobs"], 0, "{record}");
    let record = runner_of(&f, &b.id).await;
    assert_eq!(record["state"], "active", "{record}");
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["completedJobs"], 1, "{record}");
}

/// A claim whose runner never heartbeats, chunks or completes: nothing but the grant ever
/// touched the job, and its job's object was never called. The runner's object, which granted
/// it, armed an alarm for the first lease before the grant committed; at that lease it asks the
/// job's object, which watches nothing, and recovery takes the lease.
#[tokio::test]
async fn a_claim_never_heard_from_again_is_recovered_at_its_first_lease_by_an_alarm() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-first-lease")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut a = f.runner(1).await;
    let claimed = a.claim_job().await;
    assert_eq!(claimed.job_id(), job_id);
    let lease = parse_time(str_of(&claimed.assignment["claim"], "leaseExpiresAt"));

    // Poll until the job is back in the queue. Global passes could recover the lease too once
    // it lapsed: from shortly before, only the alarm may (and no D1 write of this suite locks
    // the file under it).
    let deadline = lease + RECOVERY_GRACE_MS;
    let mut polls = 0;
    let mut windows = None;
    let recovered = loop {
        if windows.is_none() && now_ms() >= lease - 5_000 {
            windows = Some((no_global_passes().await, quiet().await));
        }
        let view = job_of(&f, &job_id).await;
        match str_of(&view, "state") {
            "queued" => break view,
            "claimed" => assert!(
                now_ms() < deadline,
                "not recovered {RECOVERY_GRACE_MS} ms after the first lease lapsed: {view}"
            ),
            _ => panic!(
                "an unheard-of claim's job went neither back to the queue nor stayed: {view}"
            ),
        }
        polls += 1;
        tokio::time::sleep(POLL).await;
    };
    assert!(
        polls > 0,
        "the job was recovered before its lease could lapse"
    );
    let lost = assert_one_loss(
        &recovered,
        &claimed,
        &a.id,
        "system:alarm",
        "job.requeued",
        "LEASE_LOST_REQUEUED",
    );
    drop(windows);
    let lost_at = parse_time(str_of(lost, "at"));
    assert!(
        lost_at >= lease,
        "recovered before the lease lapsed ({lost_at} < {lease}): {recovered}"
    );
    assert_requeued(&recovered, 1);
    assert_runner_lost(&runner_of(&f, &a.id).await);
}
