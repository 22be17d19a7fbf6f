//! Handing a claim back (`POST /api/remote-runners/release`, docs/API.md "The runner's side"),
//! end to end: the job is free at once with a `job.released` event, the runner stays active
//! with its capacity back, the released claim is dead to its runner, another runner takes the
//! job at the next attempt, only the holder may release, a job's first five hand-backs do not
//! count against its three attempts (later ones do, so it ends after eight dispatches at most),
//! and a hand-back after a cancel request ends the job. Also `GET /api/remote-runners/self/claims` (what a
//! restarted runner hands back) and what a lapsed lease now says about its heartbeats.
//!
//! Each test makes its own organization and bounds every loop; one waits for a real 15 s
//! lease to lapse under its job's alarm, polling while it passes.

use std::time::Duration;

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::ChunkKind;
use serde_json::{json, Value};

async fn hand_back(runner: &Runner, claim_id: &str, reason: &str) -> Reply {
    post(
        "/api/remote-runners/release",
        Some(&runner.token),
        &json!({ "claimId": claim_id, "reason": reason }),
    )
    .await
}

fn events<'a>(job: &'a Value, kind: &str) -> Vec<&'a Value> {
    job["events"]
        .as_array()
        .map(|all| all.iter().filter(|e| e["type"] == kind).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_released_claim_is_requeued_at_once_and_its_runner_stays_active() {
    let f = StagedPrompt::new(bootstrap_org("release-requeue")).await;
    let job_id = f.new_job("hand-back").await;
    let mut first = f.runner(1).await;
    let claimed = first.claim_job().await;
    assert_eq!(claimed.job_id(), job_id);
    let claim_id = claimed.claim_id();
    first.heartbeat(&claim_id, 60).await.expect(200);

    let answer = hand_back(&first, &claim_id, "runner stopping: second signal")
        .await
        .expect(200);
    assert_eq!(answer["state"], "queued", "{answer}");
    assert_eq!(answer["nextAttempt"], 2, "{answer}");
    assert_eq!(answer["decision"], "RELEASED_REQUEUED", "{answer}");
    assert_eq!(answer["counted"], false, "{answer}");
    assert_eq!(answer["countedAttempts"], 0, "{answer}");

    // The job is queued now, not after a lease; the event says who, which claim and why.
    let record = job(f.key(), &job_id).await;
    assert_eq!(record["state"], "queued", "{record}");
    assert_eq!(record["dispatchAttempt"], 1, "{record}");
    assert_eq!(
        record["releasedAttempts"], 1,
        "the hand-back is not counted: {record}"
    );
    let released = events(&record, "job.released");
    assert_eq!(released.len(), 1, "{record}");
    assert_eq!(released[0]["claimId"], claim_id.as_str(), "{record}");
    assert_eq!(released[0]["runnerId"], first.id.as_str(), "{record}");
    assert_eq!(released[0]["attempt"], 1, "{record}");
    assert_eq!(
        released[0]["reason"], "runner stopping: second signal",
        "{record}"
    );
    assert_eq!(released[0]["detail"]["nextAttempt"], 2, "{record}");
    assert!(events(&record, "job.lease_lost").is_empty(), "{record}");
    let claim = record["claims"]
        .as_array()
        .and_then(|claims| claims.iter().find(|c| c["id"] == claim_id.as_str()))
        .unwrap_or_else(|| panic!("the claim is in the timeline: {record}"));
    assert_eq!(claim["state"], "released", "{record}");

    // The runner is not lost, holds nothing, and its credential still works.
    let runner = runner_record(f.key(), &first.id).await;
    assert_eq!(runner["state"], "active", "{runner}");
    assert_eq!(runner["activeClaims"], 0, "{runner}");

    // The released claim is dead to its runner.
    first
        .heartbeat(&claim_id, 60)
        .await
        .expect_error(409, "CLAIM_NOT_ACTIVE");
    hand_back(&first, &claim_id, "again")
        .await
        .expect_error(409, "CLAIM_NOT_ACTIVE");
    let stale = first
        .complete(&claimed.succeeded(None, bare_evidence(f.key()).await))
        .await;
    assert_ne!(
        stale.status, 200,
        "a released claim cannot complete: {stale:?}"
    );
    assert_eq!(job(f.key(), &job_id).await["state"], "queued");

    // Another runner takes it at the next attempt and finishes it.
    let mut second = f.runner(1).await;
    let next = second.claim_job().await;
    assert_eq!(next.job_id(), job_id);
    assert_eq!(next.attempt().get(), 2);
    let done = second
        .complete(&next.succeeded(None, bare_evidence(f.key()).await))
        .await
        .expect(200);
    assert_eq!(done["decision"], "accepted", "{done}");
    assert_eq!(job(f.key(), &job_id).await["state"], "succeeded");
}

#[tokio::test]
async fn only_the_holder_releases_and_bad_requests_are_refused() {
    let f = StagedPrompt::new(bootstrap_org("release-holder")).await;
    f.new_job("hand-back").await;
    let mut holder = f.runner(1).await;
    let other = f.runner(1).await;
    let claimed = holder.claim_job().await;
    let claim_id = claimed.claim_id();

    hand_back(&other, &claim_id, "not mine")
        .await
        .expect_error(404, "NOT_FOUND");
    hand_back(
        &holder,
        &format!("{}-a2", claimed.job_id()),
        "wrong attempt",
    )
    .await
    .expect_error(404, "NOT_FOUND");
    hand_back(&holder, "garbage", "not a claim id")
        .await
        .expect_error(422, "CLAIM_ID_MALFORMED");
    let no_reason = post(
        "/api/remote-runners/release",
        Some(&holder.token),
        &json!({ "claimId": claim_id }),
    )
    .await;
    assert_eq!(no_reason.status, 422, "{no_reason:?}");
    // The body is capped at 16 KiB, before the object sees it.
    let padded = json!({ "claimId": claim_id, "reason": "r", "pad": "x".repeat(16 * 1024) });
    post("/api/remote-runners/release", Some(&holder.token), &padded)
        .await
        .expect_error(413, "BODY_TOO_LARGE");
    // A reason is 1–500 characters: one past either end is refused.
    for reason in [String::new(), "r".repeat(501)] {
        let reply = hand_back(&holder, &claim_id, &reason).await;
        assert_eq!(
            reply.status,
            422,
            "a {}-character reason: {reply:?}",
            reason.len()
        );
    }
    let extra = post(
        "/api/remote-runners/release",
        Some(&holder.token),
        &json!({ "claimId": claim_id, "reason": "x", "attempt": 9 }),
    )
    .await;
    assert_eq!(extra.status, 422, "{extra:?}");
    post(
        "/api/remote-runners/release",
        None,
        &json!({ "claimId": claim_id, "reason": "x" }),
    )
    .await
    .expect_error_status(401);

    // Nothing above touched the claim.
    let record = job(f.key(), &claimed.job_id()).await;
    assert_eq!(record["state"], "claimed", "{record}");
    assert!(events(&record, "job.released").is_empty(), "{record}");
    hand_back(&holder, &claim_id, &"r".repeat(500))
        .await
        .expect(200);
}

#[tokio::test]
async fn five_hand_backs_are_free_then_they_count_and_the_job_ends_after_eight_dispatches() {
    let f = StagedPrompt::new(bootstrap_org("release-budget")).await;
    let job_id = f.new_job("hand-back").await;
    let mut runner = f.runner(1).await;
    for attempt in 1..=8u32 {
        let claimed = runner.claim_job().await;
        assert_eq!(claimed.job_id(), job_id);
        assert_eq!(claimed.attempt().get(), attempt);
        if matches!(attempt, 6 | 8) {
            // A stream past the third attempt number is kept and read like the first ones.
            let mut writer = claimed.writer();
            let chunk = writer.next(
                ChunkKind::Log,
                json!({ "attempt": attempt }),
                timestamp_now(),
            );
            assert_eq!(
                runner.stream(&chunk.to_json()).await.expect(200)["accepted"],
                true
            );
        }
        let answer = hand_back(&runner, &claimed.claim_id(), "restarting")
            .await
            .expect(200);
        let record = job(f.key(), &job_id).await;
        match attempt {
            // The first five cost no attempt: the job still has all three.
            1..=5 => {
                assert_eq!(answer["state"], "queued", "{answer}");
                assert_eq!(answer["counted"], false, "{answer}");
                assert_eq!(answer["countedAttempts"], 0, "{answer}");
                assert_eq!(record["releasedAttempts"], attempt, "{record}");
            }
            // From the sixth on they count, like a lapsed lease.
            6 | 7 => {
                assert_eq!(answer["state"], "queued", "{answer}");
                assert_eq!(answer["counted"], true, "{answer}");
                assert_eq!(answer["countedAttempts"], attempt - 5, "{answer}");
                assert_eq!(answer["nextAttempt"], attempt + 1, "{answer}");
                assert_eq!(record["releasedAttempts"], 5, "{record}");
            }
            _ => {
                assert_eq!(answer["state"], "cancelled", "{answer}");
                assert_eq!(answer["decision"], "RELEASED_AT_LAST_ATTEMPT", "{answer}");
                assert_eq!(answer["countedAttempts"], 3, "{answer}");
                assert!(answer["nextAttempt"].is_null(), "{answer}");
            }
        }
    }
    let record = job(f.key(), &job_id).await;
    assert_eq!(record["state"], "cancelled", "{record}");
    assert_eq!(record["dispatchAttempt"], 8, "{record}");
    assert_eq!(events(&record, "job.released").len(), 8, "{record}");
    let free = events(&record, "job.released")
        .iter()
        .filter(|e| e["detail"]["counted"] == false)
        .count();
    assert_eq!(free, 5, "{record}");
    let cancelled = events(&record, "job.cancelled");
    assert_eq!(cancelled.len(), 1, "{record}");
    assert!(
        cancelled[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("counted attempt 3 of 3")),
        "{record}"
    );
    assert_eq!(runner.claim().await.status, 204, "no ninth claim");
    let state = runner_record(f.key(), &runner.id).await;
    assert_eq!(state["state"], "active", "{state}");
    assert_eq!(state["activeClaims"], 0, "{state}");

    // Attempts 6 and 8 streamed one chunk each: the detail's totals, the stream pages (all, and
    // one attempt) and the custody bundle all have them.
    let totals: Vec<&Value> = record["streamTotals"]
        .as_array()
        .expect("totals")
        .iter()
        .collect();
    let attempts: Vec<&Value> = totals.iter().map(|t| &t["dispatchAttempt"]).collect();
    assert_eq!(attempts, [&json!(6), &json!(8)], "{record}");
    let page = get(
        &format!("/api/remote-runners/jobs/{job_id}/stream"),
        f.key(),
    )
    .await
    .expect(200);
    let payloads: Vec<&Value> = page["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| &c["payload"])
        .collect();
    assert_eq!(
        payloads,
        [&json!({ "attempt": 6 }), &json!({ "attempt": 8 })],
        "{page}"
    );
    assert_eq!(page["cursor"], "8.0", "{page}");
    let eighth = get(
        &format!("/api/remote-runners/jobs/{job_id}/stream?attempt=8"),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(
        eighth["chunks"].as_array().map(Vec::len),
        Some(1),
        "{eighth}"
    );
    get(
        &format!("/api/remote-runners/jobs/{job_id}/stream?after=8.0"),
        f.key(),
    )
    .await
    .expect(200);
    get(
        &format!("/api/remote-runners/jobs/{job_id}/stream?attempt=9"),
        f.key(),
    )
    .await
    .expect_error(422, "INVALID_ATTEMPT");
    let bundle = get(
        &format!("/api/remote-runners/jobs/{job_id}/bundle"),
        f.key(),
    )
    .await
    .expect(200);
    let bundled: Vec<&Value> = bundle["stream"]
        .as_array()
        .expect("stream")
        .iter()
        .map(|c| &c["dispatchAttempt"])
        .collect();
    assert_eq!(bundled, [&json!(6), &json!(8)], "{bundle}");
}

#[tokio::test]
async fn a_hand_back_after_a_cancel_request_ends_the_job() {
    let f = StagedPrompt::new(bootstrap_org("release-cancel")).await;
    let job_id = f.new_job("hand-back").await;
    let mut runner = f.runner(1).await;
    let claimed = runner.claim_job().await;
    runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    cancel_job(f.key(), &job_id, "operator changed their mind")
        .await
        .expect(200);
    let answer = hand_back(&runner, &claimed.claim_id(), "stopping at a safe point")
        .await
        .expect(200);
    assert_eq!(answer["state"], "cancelled", "{answer}");
    let record = job(f.key(), &job_id).await;
    assert_eq!(record["state"], "cancelled", "{record}");
    assert_eq!(
        record["cancelReason"], "operator changed their mind",
        "{record}"
    );
}

#[tokio::test]
async fn self_claims_lists_what_the_runner_holds_for_a_restart_to_hand_back() {
    let f = StagedPrompt::new(bootstrap_org("release-self-claims")).await;
    f.new_job("hand-back").await;
    f.new_job("hand-back").await;
    let mut runner = f.runner(2).await;
    let a = runner.claim_job().await;
    let b = runner.claim_job().await;
    let held = |answer: Value| -> Vec<String> {
        answer["claims"]
            .as_array()
            .unwrap_or_else(|| panic!("a claims list: {answer}"))
            .iter()
            .map(|c| c["id"].as_str().expect("an id").to_owned())
            .collect()
    };
    let mut listed = held(
        get("/api/remote-runners/self/claims", &runner.token)
            .await
            .expect(200),
    );
    listed.sort();
    let mut both = vec![a.claim_id(), b.claim_id()];
    both.sort();
    assert_eq!(listed, both);
    hand_back(&runner, &a.claim_id(), "restarted")
        .await
        .expect(200);
    let listed = held(
        get("/api/remote-runners/self/claims", &runner.token)
            .await
            .expect(200),
    );
    assert_eq!(listed, vec![b.claim_id()]);
    // An admin key is not a runner credential.
    get("/api/remote-runners/self/claims", f.key())
        .await
        .expect_error_status(401);
    // Capacity is back at once: the runner claims again without waiting for a lease.
    f.new_job("hand-back").await;
    assert_eq!(runner.claim().await.status, 200);
}

#[tokio::test]
async fn a_lapsed_lease_says_when_its_last_heartbeat_was() {
    let f = StagedPrompt::new(bootstrap_org("release-lapse-words")).await;
    let job_id = f.new_job("hand-back").await;
    let mut runner = f.runner(1).await;
    let claimed = runner.claim_job().await;
    // The shortest lease a heartbeat may set; the job's alarm recovers it when it lapses.
    runner.heartbeat(&claimed.claim_id(), 15).await.expect(200);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let record = loop {
        let record = job(f.key(), &job_id).await;
        if !events(&record, "job.lease_lost").is_empty() {
            break record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease was not recovered within 60 s: {record}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let lost = events(&record, "job.lease_lost");
    let reason = lost[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("no heartbeat since") && reason.contains("attempt 1"),
        "the loss says when the last heartbeat was: {record}"
    );
    let requeued = events(&record, "job.requeued");
    assert_eq!(requeued[0]["detail"]["nextAttempt"], 2, "{record}");
    let state = runner_record(f.key(), &runner.id).await;
    assert!(
        state["stateReason"]
            .as_str()
            .is_some_and(|r| r.contains(&job_id) && r.contains("no heartbeat since")),
        "{state}"
    );
}
