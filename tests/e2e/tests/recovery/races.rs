//! A cancel request then a lost lease, a live runner kept, a long poll woken by a requeue, a completion at the lease instant.

use super::*;

#[tokio::test]
async fn cancel_requested_job_whose_lease_is_lost_ends_cancelled() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-cancel")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut a = f.runner(1).await;
    let b = f.runner(1).await;
    let why = "operator stopped it during an incident";

    let passes = global_passes_allowed().await;
    let (claimed, _) = claim_running(&mut a, 60).await;
    let reply = cancel_job(f.key(), &job_id, why).await;
    assert_eq!(reply.expect(200)["state"], "cancel_requested", "{reply:?}");
    let beat = a.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["cancelRequested"], true, "{beat}");
    assert_eq!(beat["cancelReason"], why, "{beat}");
    expire(&claimed).await;
    fire_cron().await;
    let done = job_of(&f, &job_id).await;
    drop(passes);

    assert_one_loss(
        &done,
        &claimed,
        &a.id,
        "system:cron",
        "job.cancelled",
        "LEASE_LOST_AFTER_CANCEL_REQUEST",
    );
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(done["dispatchAttempt"], 1, "{done}");
    assert_eq!(done["activeClaimId"], Value::Null, "{done}");
    assert_eq!(done["leaseExpiresAt"], Value::Null, "{done}");
    assert!(done["finishedAt"].is_string(), "{done}");
    assert_eq!(
        done["cancelReason"], why,
        "the operator's reason is kept: {done}"
    );
    assert!(events_of(&done, "job.requeued").is_empty(), "{done}");
    assert_eq!(events_of(&done, "job.cancel_requested").len(), 1, "{done}");
    assert_eq!(
        event_types(&done).last().map(String::as_str),
        Some("job.cancelled"),
        "{done}"
    );
    assert_runner_lost(&runner_of(&f, &a.id).await);
    let nothing = b.claim().await;
    assert_eq!(
        nothing.status, 204,
        "a cancelled job was dispatched: {nothing:?}"
    );
    cancel_job(f.key(), &job_id, "again")
        .await
        .expect_error(409, "JOB_FINISHED");
}

// ---------------------------------------------------------------------------------------------
// A live runner
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_live_runner_keeps_its_job() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-live")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut a = f.runner(1).await;

    let passes = global_passes_allowed().await;
    let (claimed, first_lease) = claim_running(&mut a, 15).await;
    // Heartbeat before the first lease lapses, then let that first lease's instant pass: the
    // alarm follows the lease, and cron finds nothing expired.
    while now_ms() < first_lease - 7_000 {
        let view = job_of(&f, &job_id).await;
        assert_eq!(
            view["state"], "running",
            "a live lease was recovered: {view}"
        );
        tokio::time::sleep(POLL).await;
    }
    // Not behind the quiet window (waiting for it could outlast the lease): a heartbeat that met
    // the locked local D1 file is sent again, as the SDK would.
    let mut reply = a.heartbeat(&claimed.claim_id(), 60).await;
    for _ in 0..3 {
        if !locked_by_harness(&reply) {
            break;
        }
        reply = a.heartbeat(&claimed.claim_id(), 60).await;
    }
    assert!(
        now_ms() < first_lease,
        "the heartbeat came too late to prove anything: {reply:?}"
    );
    let beat = reply.expect(200);
    assert_eq!(beat["state"], "running", "{reply:?}");
    let lease = parse_time(str_of(&beat, "leaseExpiresAt"));
    assert!(lease > first_lease + 30_000, "{reply:?}");
    while now_ms() < first_lease + 1_000 {
        let view = job_of(&f, &job_id).await;
        assert_eq!(
            view["state"], "running",
            "a heartbeating runner lost its job: {view}"
        );
        tokio::time::sleep(POLL).await;
    }
    let quiet_window = quiet().await;
    fire_cron().await;
    expect_report(&reap(Some(f.key()), &json!({})).await, 0, 0, 0, false);
    drop(quiet_window);
    let view = job_of(&f, &job_id).await;
    drop(passes);

    assert_eq!(view["state"], "running", "{view}");
    assert_eq!(view["dispatchAttempt"], 1, "{view}");
    assert_eq!(view["activeClaimId"], claimed.claim_id().as_str(), "{view}");
    assert_eq!(parse_time(str_of(&view, "leaseExpiresAt")), lease, "{view}");
    assert!(events_of(&view, "job.lease_lost").is_empty(), "{view}");
    let claims = array_of(&view, "claims");
    assert_eq!(claims.len(), 1, "{view}");
    assert_eq!(claims[0]["state"], "active", "{view}");
    let record = runner_of(&f, &a.id).await;
    assert_eq!(record["state"], "active", "{record}");
    assert_eq!(record["activeClaims"], 1, "{record}");

    // Its credential still works, and it finishes the job.
    let beat = a.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["state"], "running", "{beat}");
    let mut chain = claimed.writer();
    let chunk = chain.next(ChunkKind::Log, json!({ "alive": true }), timestamp_now());
    a.stream(&chunk.to_json()).await.expect(200);
    let reply = a
        .complete(&claimed.succeeded(chain.final_checksum(), bare_evidence(f.key()).await))
        .await;
    assert_eq!(reply.expect(200)["decision"], "accepted", "{reply:?}");
    let done = job_of(&f, &job_id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert!(events_of(&done, "job.lease_lost").is_empty(), "{done}");
}

// ---------------------------------------------------------------------------------------------
// A long-polling claim and recovery
// ---------------------------------------------------------------------------------------------

/// A runner waiting in a long poll (`waitSeconds`) gets a job the moment recovery requeues it,
/// not at the end of its wait.
#[tokio::test]
async fn a_long_polling_claim_wakes_when_recovery_requeues_a_job() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-long-poll")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut a = f.runner(1).await;
    let mut b = f.runner(1).await;
    let passes = global_passes_allowed().await;
    let (claimed_a, _) = claim_running(&mut a, 60).await;
    // B finds nothing (A holds the only job), so its object remembers that.
    for _ in 0..3 {
        assert_eq!(b.claim().await.status, 204);
    }
    let started = std::time::Instant::now();
    let body = json!({ "waitSeconds": 20 });
    let mut claim = Box::pin(b.claim_with(&body));
    tokio::select! {
        early = &mut claim => panic!("the long poll answered before the requeue: {early:?}"),
        () = tokio::time::sleep(Duration::from_millis(500)) => {}
    }
    expire(&claimed_a).await;
    fire_cron().await;
    drop(passes);
    let reply = claim.await;
    let waited = started.elapsed();
    let claimed_b = b
        .verify(&reply, &[])
        .unwrap_or_else(|e| panic!("{e}: {reply:?}"));
    assert_eq!(claimed_b.job_id(), job_id);
    assert_eq!(claimed_b.attempt().get(), 2, "{:?}", claimed_b.assignment);
    assert!(
        waited < Duration::from_secs(20),
        "woken by the requeue, not by the end of its wait: {waited:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A completion at the lease instant
// ---------------------------------------------------------------------------------------------

/// Completions sent 20 ms before, at, and 20 ms after their lease's expiry, each racing its
/// job's alarm: every one is decided once. Either the completion is accepted (the job
/// succeeded and was not lost), or it is refused because the lease lapsed and recovery requeues
/// the job; never both, never neither. A refusal is `409` (the lease lapsed, or the completion is
/// stale), or `401` when recovery came first: losing the lease marks the runner lost and moves
/// its credential on, so its next call exchanges a new one (the SDK does so at once).
#[tokio::test]
async fn a_completion_at_the_lease_instant_is_decided_once() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-instant")).await).await;
    let mut cases = Vec::new();
    for offset in [-20i64, 0, 20] {
        f.new_job("recovery").await;
        let mut runner = f.runner(1).await;
        let (claimed, lease) = claim_running(&mut runner, 15).await;
        let completion = claimed.succeeded(None, bare_evidence(f.key()).await);
        cases.push((offset, runner, claimed, lease, completion));
    }
    // Each request is aimed at its instant; which side of it the server sees does not matter.
    let send_at = |i: usize| {
        let (offset, runner, _, lease, completion) = &cases[i];
        let at = lease + offset;
        async move {
            tokio::time::sleep(Duration::from_millis(
                u64::try_from(at - now_ms()).unwrap_or(0),
            ))
            .await;
            runner.complete(completion).await
        }
    };
    let (first, second, third) = tokio::join!(send_at(0), send_at(1), send_at(2));
    let replies = [first, second, third];
    for ((offset, runner, claimed, lease, _), reply) in cases.iter().zip(replies) {
        let job_id = claimed.job_id();
        let accepted = match reply.status {
            200 => {
                let answer = reply.json();
                assert_eq!(answer["decision"], "accepted", "{offset} ms: {answer}");
                true
            }
            401 | 409 => {
                let code = reply.json()["error"]["code"].clone();
                assert!(
                    code == "COMPLETION_STALE"
                        || code == "LEASE_EXPIRED"
                        || code == "AUTHENTICATION_FAILED",
                    "{offset} ms: {reply:?}"
                );
                false
            }
            _ => panic!("{offset} ms: {reply:?}"),
        };
        // Recovery (the alarm, or cron) settles a refused one; a bounded wait for it.
        let deadline = lease + RECOVERY_GRACE_MS;
        let settled = loop {
            let view = job_of(&f, &job_id).await;
            if view["state"] != "running" {
                break view;
            }
            assert!(now_ms() < deadline, "{offset} ms: never settled: {view}");
            tokio::time::sleep(POLL).await;
        };
        let lost = events_of(&settled, "job.lease_lost").len();
        let accepted_completions = array_of(&settled, "completions")
            .iter()
            .filter(|c| c["decision"] == "accepted")
            .count();
        if accepted {
            assert_eq!(settled["state"], "succeeded", "{offset} ms: {settled}");
            assert_eq!(lost, 0, "accepted and lost ({offset} ms): {settled}");
            assert_eq!(accepted_completions, 1, "{offset} ms: {settled}");
            assert_eq!(runner_of(&f, &runner.id).await["state"], "active");
        } else {
            assert_eq!(lost, 1, "refused and not lost ({offset} ms): {settled}");
            assert_eq!(accepted_completions, 0, "{offset} ms: {settled}");
            assert_requeued(&settled, 1);
        }
    }
}
