//! The attempt budget, and three recoverers racing on one lease.

use super::*;

/// A hand-back (`POST …/release`) is not one of the three attempts: after one, three lapsed
/// leases still end the job, at attempt 4.
#[tokio::test]
async fn a_hand_back_does_not_use_one_of_the_three_attempts() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-hand-back")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut runner = f.runner(1).await;
    let (first, _) = claim_running(&mut runner, 60).await;
    post(
        "/api/remote-runners/release",
        Some(&runner.token),
        &json!({ "claimId": first.claim_id(), "reason": "restarting" }),
    )
    .await
    .expect(200);
    for attempt in 2..=4u32 {
        // Each lapse marks its runner lost, so each attempt has a runner of its own.
        let mut runner = f.runner(1).await;
        let passes = global_passes_allowed().await;
        let (claimed, _) = claim_running(&mut runner, 60).await;
        assert_eq!(claimed.job_id(), job_id);
        assert_eq!(claimed.attempt().get(), attempt, "{:?}", claimed.assignment);
        expire(&claimed).await;
        fire_cron().await;
        drop(passes);
        let view = job_of(&f, &job_id).await;
        let expected = if attempt < 4 { "queued" } else { "cancelled" };
        assert_eq!(view["state"], expected, "after attempt {attempt}: {view}");
    }
    let done = job_of(&f, &job_id).await;
    assert_eq!(done["dispatchAttempt"], 4, "{done}");
    assert_eq!(done["releasedAttempts"], 1, "{done}");
    assert!(
        str_of(&done, "cancelReason").contains("3 counted dispatch attempts"),
        "{done}"
    );
    assert_eq!(events_of(&done, "job.released").len(), 1, "{done}");
    assert_eq!(events_of(&done, "job.lease_lost").len(), 3, "{done}");
    // Each lapse says how many of the three attempts are used: the hand-back is not one.
    let counted: Vec<&Value> = events_of(&done, "job.requeued")
        .iter()
        .chain(events_of(&done, "job.cancelled").iter())
        .map(|e| &e["detail"]["countedAttempts"])
        .collect();
    assert_eq!(counted, [&json!(1), &json!(2), &json!(3)], "{done}");
    assert_eq!(runner.claim().await.status, 204, "no fifth dispatch");
}

#[tokio::test]
async fn three_lost_attempts_end_the_job() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-exhausted")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut runners = Vec::new();
    for _ in 0..4 {
        runners.push(f.runner(1).await);
    }

    let mut held = Vec::new();
    for (round, runner) in runners.iter_mut().take(3).enumerate() {
        let attempt = u32::try_from(round).expect("three rounds") + 1;
        let passes = global_passes_allowed().await;
        let (claimed, _) = claim_running(runner, 60).await;
        assert_eq!(claimed.job_id(), job_id);
        assert_eq!(claimed.attempt().get(), attempt, "{:?}", claimed.assignment);
        expire(&claimed).await;
        fire_cron().await;
        let view = job_of(&f, &job_id).await;
        drop(passes);
        if attempt < 3 {
            assert_requeued(&view, attempt);
            assert_one_loss(
                &view,
                &claimed,
                &runner.id,
                "system:cron",
                "job.requeued",
                "LEASE_LOST_REQUEUED",
            );
        } else {
            assert_one_loss(
                &view,
                &claimed,
                &runner.id,
                "system:cron",
                "job.cancelled",
                "DISPATCH_ATTEMPTS_EXHAUSTED",
            );
        }
        assert_runner_lost(&runner_of(&f, &runner.id).await);
        held.push(claimed);
    }

    // Never queued a fourth time.
    let fourth = runners[3].claim().await;
    assert_eq!(fourth.status, 204, "a fourth dispatch: {fourth:?}");

    let done = job_of(&f, &job_id).await;
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(done["dispatchAttempt"], 3, "{done}");
    assert_eq!(done["activeClaimId"], Value::Null, "{done}");
    assert_eq!(done["leaseExpiresAt"], Value::Null, "{done}");
    assert!(done["finishedAt"].is_string(), "{done}");
    let reason = str_of(&done, "cancelReason");
    assert!(
        reason.contains("3 counted dispatch attempts"),
        "the cancel reason does not say the attempts are exhausted: {done}"
    );
    let cancelled = single_event(&done, "job.cancelled");
    assert_eq!(cancelled["reason"], reason, "{done}");
    assert_eq!(
        event_types(&done).last().map(String::as_str),
        Some("job.cancelled"),
        "{done}"
    );

    let claims = array_of(&done, "claims");
    assert_eq!(claims.len(), 3, "exactly three claims: {done}");
    for (i, (claim, runner)) in claims.iter().zip(&runners).enumerate() {
        assert_eq!(claim["dispatchAttempt"], i + 1, "{done}");
        assert_eq!(claim["state"], "lost", "{done}");
        assert_eq!(claim["runnerId"], runner.id.as_str(), "{done}");
        assert_eq!(claim["id"], held[i].claim_id().as_str(), "{done}");
    }
    assert_eq!(events_of(&done, "job.claimed").len(), 3, "{done}");
    assert_eq!(events_of(&done, "job.lease_lost").len(), 3, "{done}");
    assert_eq!(events_of(&done, "job.requeued").len(), 2, "{done}");
    let nonces: std::collections::BTreeSet<String> = held.iter().map(nonce_of).collect();
    assert_eq!(nonces.len(), 3, "each attempt has its own nonce");

    cancel_job(f.key(), &job_id, "too late")
        .await
        .expect_error(409, "JOB_FINISHED");
    let record = runner_of(&f, &runners[3].id).await;
    assert_eq!(record["state"], "active", "{record}");
    assert_eq!(record["activeClaims"], 0, "{record}");
}

// ---------------------------------------------------------------------------------------------
// Three recoverers, one lease
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn cron_alarm_and_admin_reap_racing_on_one_lease_lose_it_once() {
    let f = StagedPrompt::new(d1_write(|| bootstrap_org("recovery-race")).await).await;
    let job_id = f.new_job("recovery").await;
    let mut a = f.runner(1).await;

    let passes = global_passes_allowed().await;
    // Quiet from before the claim: waiting for the window later could outlast the lease and
    // leave the alarm alone at its expiry.
    let quiet_window = quiet().await;
    let (claimed, lease) = claim_running(&mut a, 15).await;

    // Wait for the lease to near its end; nothing recovers a live lease meanwhile.
    while now_ms() < lease - 1_500 {
        let view = job_of(&f, &job_id).await;
        assert_eq!(
            view["state"], "running",
            "a live lease was recovered: {view}"
        );
        tokio::time::sleep(POLL).await;
    }

    // Cron and the admin reap, concurrently, every ~100 ms, while the alarm fires at expiry.
    let deadline = lease + RECOVERY_GRACE_MS;
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let mut reports = Vec::new();
    let everything = json!({});
    let recovered = loop {
        ticks.tick().await;
        let (cron, reaped, view) = tokio::join!(
            fire_cron(),
            reap(Some(f.key()), &everything),
            job_of(&f, &job_id)
        );
        assert_eq!(cron.status, 200, "{cron:?}");
        reports.push(reaped.expect(200));
        if view["state"] == "queued" {
            break view;
        }
        assert_eq!(view["state"], "running", "{view}");
        assert!(now_ms() < deadline, "not recovered in time: {view}");
    };
    // Two more rounds after the fact: there is nothing left to recover.
    for _ in 0..2 {
        let (cron, reaped) = tokio::join!(fire_cron(), reap(Some(f.key()), &everything));
        assert_eq!(cron.status, 200, "{cron:?}");
        expect_report(&reaped, 0, 0, 0, false);
    }
    drop(quiet_window);
    drop(passes);

    for report in &reports {
        assert_eq!(report["failed"], 0, "a recovery failed: {reports:?}");
        assert_eq!(report["ended"], 0, "{reports:?}");
    }
    let by_admin: u64 = reports
        .iter()
        .map(|r| r["requeued"].as_u64().unwrap_or(0))
        .sum();
    assert!(by_admin <= 1, "the admin reap requeued twice: {reports:?}");

    let done = job_of(&f, &job_id).await;
    let actor = str_of(single_event(&done, "job.lease_lost"), "actor").to_owned();
    assert!(
        actor == "system:alarm" || actor == "system:cron" || actor.starts_with("api_key:"),
        "lost by an unexpected recoverer {actor}: {done}"
    );
    assert_eq!(
        by_admin,
        u64::from(actor.starts_with("api_key:")),
        "the admin reap's report disagrees with the timeline ({reports:?}): {done}"
    );
    let lost = assert_one_loss(
        &done,
        &claimed,
        &a.id,
        &actor,
        "job.requeued",
        "LEASE_LOST_REQUEUED",
    );
    assert!(parse_time(str_of(lost, "at")) >= lease, "{done}");
    assert_eq!(events_of(&done, "job.requeued").len(), 1, "{done}");
    assert_eq!(array_of(&done, "claims").len(), 1, "{done}");
    assert_requeued(&done, 1);
    assert_eq!(recovered["dispatchAttempt"], 1, "{recovered}");
    assert_runner_lost(&runner_of(&f, &a.id).await);
    let seen: Vec<&Value> = reports.iter().filter(|r| r["examined"] != 0).collect();
    println!(
        "the lease was lost to {actor} after {} rounds; admin passes that saw it: {seen:?}",
        reports.len()
    );
}
