//! The hot path, end to end (ARCHITECTURE.md "The hot path"): a job object that already knows
//! its job answers a holder's heartbeat, chunk and completion with one D1 write, and that write
//! asserts what the object relied on. Whatever changes behind the object's back (a rotation or
//! revocation of the holder, a lease moved in D1) is caught by the write itself and refused
//! whole, and the object then answers from the job read fresh.
//!
//! Each test makes its own organization, never sleeps to synchronize, and bounds every loop.
//! Where a refusal alone could pass for the wrong reason, a control shows the same request
//! succeeding with only the defect removed.

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::{ChainHead, ChunkKind};
use edgerunner_protocol::stable_json::Sha256Hex;
use serde_json::{json, Value};

fn chunk(head: &ChainHead, claimed: &Claimed, line: &str) -> Value {
    head.next_chunk(
        &claimed.identity(),
        ChunkKind::Log,
        json!({ "segments": [{ "stream": "stdout", "text": line }] }),
        timestamp_now(),
    )
    .to_json()
}

#[tokio::test]
async fn a_rotation_between_two_heartbeats_of_a_warm_object_refuses_the_second() {
    let f = StagedPrompt::new(bootstrap_org("hot-rotation")).await;
    let (runner, claimed) = f.claimed_job(2).await;
    let lease = lease_of(&f, &claimed.job_id()).await;

    rotate(f.key(), &runner.id).await.expect(200);
    runner
        .heartbeat(&claimed.claim_id(), 90)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    // Refused whole: the lease did not move.
    assert_eq!(lease_of(&f, &claimed.job_id()).await, lease);

    // Control: the rotated runner's new credential holds the claim still, and beats.
    let rotated = rotate(f.key(), &runner.id).await.expect(200);
    let fresh = Runner::connect(&runner.id, str_of(&rotated, "bootstrapToken")).await;
    let beat = fresh.heartbeat(&claimed.claim_id(), 90).await.expect(200);
    assert_ne!(beat["leaseExpiresAt"], lease, "{beat}");
}

#[tokio::test]
async fn a_revocation_between_two_chunks_of_a_warm_object_refuses_the_second_and_stores_nothing() {
    let f = StagedPrompt::new(bootstrap_org("hot-revocation")).await;
    let (runner, claimed) = f.claimed_job(2).await;
    let first = chunk(&ChainHead::empty(), &claimed, "before\n");
    runner.stream(&first).await.expect(200);

    set_status(f.key(), &runner.id, "revoked", "hot path: revoked mid-job").await;
    let head = ChainHead::restore(
        1,
        vec![Sha256Hex::parse(str_of(&first, "checksum")).expect("a checksum")],
    )
    .expect("a one-chunk head");
    let second = chunk(&head, &claimed, "after\n");
    runner
        .stream(&second)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    let shown = get_job(f.key(), &claimed.job_id()).await.expect(200);
    assert_eq!(array_of(&shown, "stream").len(), 1, "{shown}");
}

#[tokio::test]
async fn a_lease_moved_into_the_past_behind_a_warm_object_refuses_its_heartbeat() {
    let f = StagedPrompt::new(bootstrap_org("hot-lease")).await;
    let (runner, claimed) = f.claimed_job(2).await;
    // Only D1 knows: the object last saw a lease a minute away.
    recovery::set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() - 1_000);
    runner
        .heartbeat(&claimed.claim_id(), 60)
        .await
        .expect_error(409, "LEASE_EXPIRED");
    // Control: moved back into the future, the same heartbeat is accepted.
    recovery::set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() + 60_000);
    runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
}

// A job's object first runs on its holder's first heartbeat, and decides it from the claim id
// alone: the job claimed at that attempt, that claim active, held by the runner, lease live. Its
// one write asserts all of it; each test below breaks one part before that first heartbeat.

/// A fresh job claimed by a fresh runner, nothing sent since: its object has not run yet.
async fn cold_claim(f: &StagedPrompt) -> (Runner, Claimed) {
    let input = json!({ "cold": unique("job") });
    let job = enqueue_job(f.key(), &f.release, &input, &requirements("prompt")).await;
    let mut runner = Runner::simple(&f.org, &["prompt"], 1).await;
    let claimed = runner.claim_job().await;
    assert_eq!(claimed.job_id(), str_of(&job, "id"));
    (runner, claimed)
}

/// The job's `job.started` events.
fn started_events(job: &Value) -> usize {
    array_of(job, "events")
        .iter()
        .filter(|e| e["type"] == "job.started")
        .count()
}

#[tokio::test]
async fn a_first_heartbeat_naming_another_runners_claim_is_refused_and_changes_nothing() {
    let f = StagedPrompt::new(bootstrap_org("hot-first-foreign")).await;
    let (holder, claimed) = cold_claim(&f).await;
    let lease = lease_of(&f, &claimed.job_id()).await;
    let stranger = Runner::simple(&f.org, &["prompt"], 1).await;

    stranger
        .heartbeat(&claimed.claim_id(), 60)
        .await
        .expect_error(404, "NOT_FOUND");
    let job = get_job(f.key(), &claimed.job_id()).await.expect(200);
    assert_eq!(job["state"], "claimed", "{job}");
    assert_eq!(job["leaseExpiresAt"], lease, "{job}");
    assert_eq!(started_events(&job), 0, "{job}");

    // Control: the holder's first heartbeat starts the job, once.
    let beat = holder.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["state"], "running", "{beat}");
    let beat = holder.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["state"], "running", "{beat}");
    let job = get_job(f.key(), &claimed.job_id()).await.expect(200);
    assert_eq!(started_events(&job), 1, "{job}");
}

#[tokio::test]
async fn a_rotation_between_the_claim_and_its_first_heartbeat_refuses_the_heartbeat() {
    let f = StagedPrompt::new(bootstrap_org("hot-first-rotation")).await;
    let (runner, claimed) = cold_claim(&f).await;
    let lease = lease_of(&f, &claimed.job_id()).await;

    rotate(f.key(), &runner.id).await.expect(200);
    runner
        .heartbeat(&claimed.claim_id(), 60)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    let job = get_job(f.key(), &claimed.job_id()).await.expect(200);
    assert_eq!(job["state"], "claimed", "{job}");
    assert_eq!(job["leaseExpiresAt"], lease, "{job}");

    // Control: its new credential starts the job.
    let rotated = rotate(f.key(), &runner.id).await.expect(200);
    let fresh = Runner::connect(&runner.id, str_of(&rotated, "bootstrapToken")).await;
    let beat = fresh.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["state"], "running", "{beat}");
}

#[tokio::test]
async fn a_first_heartbeat_after_the_claims_lease_lapsed_in_d1_is_refused() {
    let f = StagedPrompt::new(bootstrap_org("hot-first-lapsed")).await;
    let (runner, claimed) = cold_claim(&f).await;
    recovery::set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() - 1_000);
    runner
        .heartbeat(&claimed.claim_id(), 60)
        .await
        .expect_error(409, "LEASE_EXPIRED");
    let job = get_job(f.key(), &claimed.job_id()).await.expect(200);
    assert_eq!(job["state"], "claimed", "{job}");

    // Control: moved back into the future, the same heartbeat starts the job.
    recovery::set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() + 60_000);
    let beat = runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    assert_eq!(beat["state"], "running", "{beat}");
}

/// Bounded: each round is one race; the property must hold in every round, whichever wins.
const PATCH_RACE_ROUNDS: usize = 12;

#[tokio::test]
async fn a_status_and_tags_change_racing_a_revocation_changes_all_or_nothing() {
    let org = bootstrap_org("hot-patch-race");
    let mut refused = 0;
    for round in 0..PATCH_RACE_ROUNDS {
        let runner = Runner::simple(&org, &["prompt"], 1).await;
        let tag = format!("round-{round}");
        let change =
            json!({ "status": "draining", "tags": [tag], "reason": "race: drain and tag" });
        let revoke = json!({ "status": "revoked", "reason": "race: revoke" });
        let (changed, revoked) = tokio::join!(
            patch_runner(&org.admin_key, &runner.id, &change),
            patch_runner(&org.admin_key, &runner.id, &revoke),
        );
        // The revocation wins unless the change landed between its read and its write.
        assert!(
            matches!(revoked.status, 200 | 409),
            "round {round}: {revoked:?}"
        );
        let record = get_runner(&org.admin_key, &runner.id).await.expect(200);
        let events = runner_events(&org.admin_key, &runner.id).await.expect(200);
        let tag_events = array_of(&events, "events")
            .iter()
            .filter(|e| e["type"] == "runner.tags_changed")
            .count();
        match changed.status {
            200 => {
                assert_eq!(record["tags"], json!([tag]), "round {round}: {record}");
                assert_eq!(tag_events, 1, "round {round}: {events}");
            }
            409 => {
                // Refused whole: neither its status nor its tags, nor their event.
                refused += 1;
                let code = changed.json()["error"]["code"].clone();
                assert!(
                    code == "RUNNER_CHANGED" || code == "ILLEGAL_RUNNER_TRANSITION",
                    "round {round}: {changed:?}"
                );
                assert_eq!(record["tags"], json!([]), "round {round}: {record}");
                assert_eq!(tag_events, 0, "round {round}: {events}");
                assert_eq!(record["state"], "revoked", "round {round}: {record}");
            }
            _ => panic!("round {round}: {changed:?}"),
        }
    }
    eprintln!("patch race: the change was refused in {refused} of {PATCH_RACE_ROUNDS} rounds");
}

/// Sends a claim over a connection of its own and hangs up without reading the answer: the
/// request reached the server whole, and its answer is lost.
fn claim_and_hang_up(token: &str, body: &Value) {
    use std::io::Write;
    let url = base_url();
    let authority = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&authority).expect("connect to the server");
    let body = body.to_string();
    write!(
        stream,
        "POST /api/remote-runners/claim HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send the claim");
    stream.flush().expect("flush the claim");
    stream.shutdown(std::net::Shutdown::Both).expect("hang up");
}

#[tokio::test]
async fn a_claim_whose_answer_is_lost_is_recovered_by_asking_again_with_its_request_id() {
    let f = StagedPrompt::new(bootstrap_org("hot-request-id")).await;
    let first = enqueue_job(
        f.key(),
        &f.release,
        &json!({ "n": 1 }),
        &requirements("prompt"),
    )
    .await;
    let second = enqueue_job(
        f.key(),
        &f.release,
        &json!({ "n": 2 }),
        &requirements("prompt"),
    )
    .await;
    // Room for a third claim, so that the last one below shows the queue empty, not the runner full.
    let mut runner = Runner::simple(&f.org, &["prompt"], 3).await;
    let ask = json!({ "requestId": "claim-1" });

    claim_and_hang_up(&runner.token, &ask);
    let again = runner.claim_with(&ask).await;
    let claimed = runner
        .verify(&again, &[])
        .unwrap_or_else(|e| panic!("assignment refused by verification ({e}): {again:?}"));
    assert_eq!(claimed.job_id(), str_of(&first, "id"));
    assert_eq!(claimed.attempt().get(), 1);

    // Asked once more: the very same answer (claim, attempt, nonce, signature), no new grant.
    let once_more = runner.claim_with(&ask).await.expect(200);
    let answered = again.json();
    assert_eq!(once_more["signedJob"], answered["signedJob"]);
    assert_eq!(once_more["claim"]["id"], answered["claim"]["id"]);
    let shown = get_job(f.key(), str_of(&first, "id")).await.expect(200);
    assert_eq!(array_of(&shown, "claims").len(), 1, "{shown}");
    assert_eq!(shown["dispatchAttempt"], 1, "{shown}");

    // Another requestId is another claim: the next job.
    let other = runner.claim_with(&json!({ "requestId": "claim-2" })).await;
    let next = runner
        .verify(&other, &[])
        .unwrap_or_else(|e| panic!("assignment refused by verification ({e}): {other:?}"));
    assert_eq!(next.job_id(), str_of(&second, "id"));

    // Without a requestId (the published SDK), a claim is a new claim: none is left to grant.
    assert_eq!(runner.claim().await.status, 204);
}

#[tokio::test]
async fn a_request_id_must_be_a_short_plain_token() {
    let f = StagedPrompt::new(bootstrap_org("hot-request-id-shape")).await;
    let runner = Runner::simple(&f.org, &["prompt"], 1).await;
    for bad in [
        json!(""),
        json!("has space"),
        json!("a".repeat(65)),
        json!(7),
        json!(["x"]),
    ] {
        runner
            .claim_with(&json!({ "requestId": bad }))
            .await
            .expect_error(422, "INVALID_REQUEST_ID");
    }
    // Control: 64 characters of the allowed set, and null, are accepted (nothing is queued).
    let longest = format!("{}.:_-", "A1".repeat(30));
    assert_eq!(longest.len(), 64);
    for good in [json!(longest), Value::Null] {
        assert_eq!(
            runner
                .claim_with(&json!({ "requestId": good }))
                .await
                .status,
            204
        );
    }
}

#[tokio::test]
async fn two_concurrent_claims_of_one_runner_get_two_jobs_or_meet_its_capacity() {
    let f = StagedPrompt::new(bootstrap_org("hot-two-claims")).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let job = enqueue_job(
            f.key(),
            &f.release,
            &json!({ "n": n }),
            &requirements("prompt"),
        )
        .await;
        ids.push(str_of(&job, "id").to_owned());
    }
    // Capacity 2: both claims are granted, each its own job.
    let two = Runner::simple(&f.org, &["prompt"], 2).await;
    let (a, b) = tokio::join!(two.claim(), two.claim());
    let (a, b) = (a.expect(200), b.expect(200));
    assert_ne!(a["claim"]["jobId"], b["claim"]["jobId"], "{a} {b}");
    for answer in [&a, &b] {
        assert_eq!(answer["claim"]["dispatchAttempt"], 1, "{answer}");
        assert!(ids.iter().any(|id| answer["claim"]["jobId"] == id.as_str()));
    }
    // Capacity 1: one is granted, the other meets the runner's capacity; the third job is left.
    let one = Runner::simple(&f.org, &["prompt"], 1).await;
    let (c, d) = tokio::join!(one.claim(), one.claim());
    let mut statuses = [c.status, d.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 503], "{c:?} {d:?}");
    let refused = if c.status == 503 { &c } else { &d };
    refused.expect_error(503, "RUNNER_AT_CAPACITY");
    for id in &ids {
        let shown = get_job(f.key(), id).await.expect(200);
        assert_eq!(array_of(&shown, "claims").len(), 1, "claimed once: {shown}");
    }
}

#[tokio::test]
async fn a_cancel_racing_a_completion_ends_the_job_once() {
    let f = StagedPrompt::new(bootstrap_org("hot-cancel-race")).await;
    let (runner, claimed) = f.claimed_job(2).await;
    let completion = claimed.succeeded(None, bare_evidence(f.key()).await);
    let job_id = claimed.job_id();
    let (cancelled, completed) = tokio::join!(
        cancel_job(f.key(), &job_id, "race: cancel"),
        runner.complete(&completion),
    );
    // The completion always wins: a cancel requested before it is answered by it (the runner
    // finished), and a cancel after it finds the job finished.
    let done = completed.expect(200);
    assert_eq!(done["decision"], "accepted", "{done}");
    assert_eq!(done["jobState"], "succeeded", "{done}");
    match cancelled.status {
        200 => assert_eq!(
            cancelled.json()["state"],
            "cancel_requested",
            "{cancelled:?}"
        ),
        409 => cancelled.expect_error(409, "JOB_FINISHED"),
        _ => panic!("{cancelled:?}"),
    }
    let shown = get_job(f.key(), &claimed.job_id()).await.expect(200);
    assert_eq!(shown["state"], "succeeded", "{shown}");
    let accepted = array_of(&shown, "completions")
        .iter()
        .filter(|c| c["decision"] == "accepted")
        .count();
    assert_eq!(accepted, 1, "{shown}");
}

// ---------------------------------------------------------------------------------------------
// Idle runners and the long poll (`waitSeconds`)
// ---------------------------------------------------------------------------------------------

/// How long a test lets a long-polling claim stand before it queues work: the claim must still be
/// unanswered then (it is waiting). Whatever the order on the server, the claim must get the job.
const STILL_WAITING: std::time::Duration = std::time::Duration::from_millis(500);

/// A runner whose last claims found nothing (its object remembers so).
async fn idle_runner(org: &Org, max_concurrent_jobs: u32) -> Runner {
    let runner = Runner::simple(org, &["prompt"], max_concurrent_jobs).await;
    for _ in 0..3 {
        assert_eq!(runner.claim().await.status, 204);
    }
    runner
}

/// Sends a long-polling claim and checks that it is still unanswered after [`STILL_WAITING`].
async fn waiting_claim<'a>(
    runner: &'a Runner,
    wait_seconds: u64,
) -> std::pin::Pin<Box<impl std::future::Future<Output = Reply> + 'a>> {
    let body = json!({ "waitSeconds": wait_seconds });
    let mut claim = Box::pin(async move { runner.claim_with(&body).await });
    tokio::select! {
        early = &mut claim => panic!("the long poll answered before any job was queued: {early:?}"),
        () = tokio::time::sleep(STILL_WAITING) => {}
    }
    claim
}

#[tokio::test]
async fn a_long_poll_answers_204_when_its_wait_ends_and_wait_seconds_is_bounded() {
    let f = StagedPrompt::new(bootstrap_org("hot-long-poll-empty")).await;
    let runner = idle_runner(&f.org, 1).await;
    for bad in [json!(26), json!(-1), json!("5"), json!(1.5), json!(true)] {
        runner
            .claim_with(&json!({ "waitSeconds": bad }))
            .await
            .expect_error(422, "INVALID_WAIT");
    }
    for immediate in [json!(0), Value::Null] {
        let reply = runner
            .claim_with(&json!({ "waitSeconds": immediate }))
            .await;
        assert_eq!(reply.status, 204, "{reply:?}");
    }
    let started = std::time::Instant::now();
    let reply = runner.claim_with(&json!({ "waitSeconds": 2 })).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 204, "{reply:?}");
    assert!(
        waited >= std::time::Duration::from_millis(1_900),
        "a 2 s long poll answered after {waited:?}"
    );
    // Another organization's work does not end it: a job queued elsewhere leaves it waiting.
    let other = StagedPrompt::new(bootstrap_org("hot-long-poll-other")).await;
    let claim = waiting_claim(&runner, 3).await;
    enqueue_job(
        other.key(),
        &other.release,
        &json!({ "elsewhere": unique("job") }),
        &requirements("prompt"),
    )
    .await;
    assert_eq!(claim.await.status, 204);
}

/// Enqueues a prompt job while `runner` long-polls (20 s), and checks that the poll got that job
/// before its wait ended: it was woken, not answered at the end of its wait.
async fn enqueue_while_waiting(f: &StagedPrompt, runner: &mut Runner, woken_by: &str) {
    let started = std::time::Instant::now();
    let claim = waiting_claim(runner, 20).await;
    let job = enqueue_job(
        f.key(),
        &f.release,
        &json!({ "wokenBy": woken_by, "job": unique("job") }),
        &requirements("prompt"),
    )
    .await;
    let reply = claim.await;
    let waited = started.elapsed();
    let claimed = runner
        .verify(&reply, &[])
        .unwrap_or_else(|e| panic!("{e}: {reply:?}"));
    assert_eq!(claimed.job_id(), str_of(&job, "id"));
    assert!(
        waited < std::time::Duration::from_secs(20),
        "woken by {woken_by}, not by the end of its wait: {waited:?}"
    );
}

#[tokio::test]
async fn a_long_poll_wakes_when_a_job_is_enqueued() {
    let f = StagedPrompt::new(bootstrap_org("hot-long-poll-enqueue")).await;
    let mut runner = idle_runner(&f.org, 1).await;
    enqueue_while_waiting(&f, &mut runner, "the enqueue").await;
}

#[tokio::test]
async fn a_long_poll_wakes_when_a_job_is_handed_back() {
    let f = StagedPrompt::new(bootstrap_org("hot-long-poll-requeue")).await;
    let job = enqueue_job(
        f.key(),
        &f.release,
        &json!({ "requeued": unique("job") }),
        &requirements("prompt"),
    )
    .await;
    let mut holder = Runner::simple(&f.org, &["prompt"], 1).await;
    let first = holder.claim_job().await;
    assert_eq!(first.job_id(), str_of(&job, "id"));
    let mut waiter = idle_runner(&f.org, 1).await;
    let started = std::time::Instant::now();
    let claim = waiting_claim(&waiter, 20).await;
    post(
        "/api/remote-runners/release",
        Some(&holder.token),
        &json!({ "claimId": first.claim_id(), "reason": "stopping" }),
    )
    .await
    .expect(200);
    let reply = claim.await;
    let waited = started.elapsed();
    let second = waiter
        .verify(&reply, &[])
        .unwrap_or_else(|e| panic!("{e}: {reply:?}"));
    assert_eq!(second.job_id(), first.job_id());
    assert_eq!(second.attempt().get(), 2, "{:?}", second.assignment);
    assert!(
        waited < std::time::Duration::from_secs(20),
        "woken by the requeue: {waited:?}"
    );
}

/// A touch wakes one waiting claim, the longest-waiting. One whose runner cannot take the job
/// comes back to wait and passes the wake on, so the job reaches a waiting runner that can take
/// it before that runner's own wait ends.
#[tokio::test]
async fn a_wake_passes_on_past_a_runner_that_cannot_take_the_job() {
    let f = StagedPrompt::new(bootstrap_org("hot-long-poll-pass")).await;
    // It waits first, so the touch wakes it first; it runs no prompt jobs.
    let scorer = Runner::simple(&f.org, &["scorer"], 1).await;
    for _ in 0..3 {
        assert_eq!(scorer.claim().await.status, 204);
    }
    let mut runner = idle_runner(&f.org, 1).await;
    let passed_over = waiting_claim(&scorer, 8).await;
    enqueue_while_waiting(&f, &mut runner, "the wake the scorer runner passed on").await;
    // The runner passed over got nothing, and went on waiting until its wait ended.
    assert_eq!(passed_over.await.status, 204);
}

/// Each touch wakes a waiting claim of its own: two jobs queued one after the other reach two
/// waiting runners, neither of them at the end of its wait.
#[tokio::test]
async fn two_jobs_queued_together_wake_two_waiting_runners() {
    let f = StagedPrompt::new(bootstrap_org("hot-long-poll-two")).await;
    let mut first = idle_runner(&f.org, 1).await;
    let mut second = idle_runner(&f.org, 1).await;
    let started = std::time::Instant::now();
    let first_claim = waiting_claim(&first, 20).await;
    let second_claim = waiting_claim(&second, 20).await;
    let mut queued = Vec::new();
    for n in 0..2 {
        let input = json!({ "together": unique("job"), "n": n });
        let job = enqueue_job(f.key(), &f.release, &input, &requirements("prompt")).await;
        queued.push(str_of(&job, "id").to_owned());
    }
    let (first_reply, second_reply) = tokio::join!(first_claim, second_claim);
    let waited = started.elapsed();
    let mut claimed = vec![
        first
            .verify(&first_reply, &[])
            .unwrap_or_else(|e| panic!("{e}: {first_reply:?}"))
            .job_id(),
        second
            .verify(&second_reply, &[])
            .unwrap_or_else(|e| panic!("{e}: {second_reply:?}"))
            .job_id(),
    ];
    claimed.sort();
    queued.sort();
    assert_eq!(claimed, queued);
    assert!(
        waited < std::time::Duration::from_secs(20),
        "both woken by the touches, not by the end of their waits: {waited:?}"
    );
}

/// An idle runner's object answers from memory only while nothing changed: a change to the
/// runner itself (drained, active again, rotated) is answered as D1 would answer it.
#[tokio::test]
async fn an_idle_runner_that_changes_is_answered_from_its_row() {
    let f = StagedPrompt::new(bootstrap_org("hot-idle-change")).await;
    let runner = idle_runner(&f.org, 1).await;
    set_status(f.key(), &runner.id, "draining", "maintenance").await;
    runner.claim().await.expect_error(503, "RUNNER_NOT_ACTIVE");
    set_status(f.key(), &runner.id, "active", "back").await;
    for _ in 0..3 {
        assert_eq!(runner.claim().await.status, 204);
    }
    rotate(f.key(), &runner.id).await.expect(200);
    runner
        .claim()
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    // A quiet runner still gets a job queued for it, without waiting.
    let fresh = idle_runner(&f.org, 1).await;
    let job = enqueue_job(
        f.key(),
        &f.release,
        &json!({ "after-idle": unique("job") }),
        &requirements("prompt"),
    )
    .await;
    let reply = fresh.claim().await.expect(200);
    assert_eq!(reply["claim"]["jobId"], job["id"], "{reply}");
}

/// The job's `leaseExpiresAt` as the admin API shows it.
async fn lease_of(f: &StagedPrompt, job_id: &str) -> Value {
    get_job(f.key(), job_id).await.expect(200)["leaseExpiresAt"].clone()
}
