//! Recovery, end to end, against the seed ("Cancellation and runner loss"), docs/API.md and
//! `edgerunner_protocol::recovery`: a job object's own alarm at its lease expiry, the cron
//! trigger and `POST /api/remote-runners/jobs/reap` (one bounded pass each), the attempt budget,
//! a lease lost after cancellation was requested, three recoverers racing on one lease, and a
//! runner that keeps heartbeating keeping its job.
//!
//! On loss: the claim → `lost`, the runner → `lost` (its credential generation moves forward:
//! its next call is `401`, and a fresh session makes it `active` again), capacity released,
//! events `job.lease_lost` then `job.requeued` (or `job.cancelled` when the third attempt is
//! lost or cancellation was pending).
//!
//! Each test makes its own organization, runs in parallel with `--test-threads=4`, and bounds
//! every loop; no sleep stands in for synchronization. Three tests wait for real time (a lease
//! must really lapse, or really be outlived, for the alarm to matter) and poll state while it
//! passes. Elsewhere a lease is moved into the past through D1, where its job's alarm (still
//! 60 s away) cannot act, so only the recoverer under test can.
//!
//! Two things the tests share. The cron trigger and `CRON_SECRET` recover *every* expired lease
//! on the server, whichever test made it: [`SWEEPS`] keeps those global passes away from the
//! two tests that must know who recovered their leases (the alarm test: `system:alarm`; the
//! reap test: exact counts and `system:cron-secret`). And local D1 is one SQLite file that
//! `wrangler d1 execute` locks while it writes: [`D1_WRITES`] keeps this suite's writes out of
//! the windows where a failed request would hide what the test is about.

use std::time::Duration;

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::recovery::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::ChunkKind;
use serde_json::{json, Value};
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Clock skew tolerated between this process and the server (same machine).
const SKEW_MS: i64 = 5_000;
/// How often a test polls while real time passes.
const POLL: Duration = Duration::from_millis(250);
/// How long after a lease lapses its recovery may take at most.
const RECOVERY_GRACE_MS: i64 = 10_000;
/// The reason recovery records on a lost claim (API: the claim's `endReason`).
const LOST_END_REASON: &str = "lease expired";

/// Global recovery passes (the cron trigger, `CRON_SECRET`) take a read guard while they may
/// run; a test whose assertions depend on nothing else recovering its leases takes the write
/// guard. The lock is FIFO-fair, so neither side starves.
static SWEEPS: RwLock<()> = RwLock::const_new(());

/// A `wrangler d1 execute` (what [`bootstrap_org`] and [`set_leases`] run) locks local D1's one
/// SQLite file for a moment, and a server request meeting that lock fails (`500`, workerd logs
/// `database is locked: SQLITE_BUSY`) — a harness artifact: deployed D1 has no second process
/// writing its file. This suite's D1 writes take a read guard; the few windows whose requests
/// must not meet one (a lease lapsing under the alarm, the recovery race) take the write guard.
static D1_WRITES: RwLock<()> = RwLock::const_new(());

/// Runs a D1 write of this suite (never while a quiet window is open).
async fn d1_write<T>(write: impl FnOnce() -> T) -> T {
    let _turn = D1_WRITES.read().await;
    write()
}

/// No D1 write of this suite runs while the guard is held.
async fn quiet() -> RwLockWriteGuard<'static, ()> {
    D1_WRITES.write().await
}

/// Held by a test that fires the cron trigger (any number at once).
async fn global_passes_allowed() -> RwLockReadGuard<'static, ()> {
    SWEEPS.read().await
}

/// Held by a test that must be the only one able to trigger a global pass.
async fn no_global_passes() -> RwLockWriteGuard<'static, ()> {
    SWEEPS.write().await
}

/// The job with its timeline (a read, retried through a locked local D1 file).
async fn job_of(f: &StagedPrompt, job_id: &str) -> Value {
    read(&format!("/api/remote-runners/jobs/{job_id}"), f.key()).await
}

/// The runner record (a read, retried through a locked local D1 file).
async fn runner_of(f: &StagedPrompt, runner_id: &str) -> Value {
    read(&format!("/api/remote-runners/{runner_id}"), f.key()).await
}

/// Whether `reply` is the `500` local D1 answers when it finds its SQLite file locked by a
/// `wrangler d1 execute` of another test (workerd logs `database is locked: SQLITE_BUSY`). Only
/// a harness artifact: deployed D1 has no second process writing its file.
fn locked_by_harness(reply: &Reply) -> bool {
    reply.status == 500 && reply.text.contains("\"INTERNAL\"")
}

/// A `GET` expecting `200`. A read changes nothing, so one that met the locked file is simply
/// asked again (a bounded number of times).
async fn read(path: &str, bearer: &str) -> Value {
    const ATTEMPTS: u32 = 5;
    for _ in 1..ATTEMPTS {
        let reply = get(path, bearer).await;
        if !locked_by_harness(&reply) {
            return reply.expect(200);
        }
        eprintln!("retrying a read that met the locked local D1 file: {reply:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    get(path, bearer).await.expect(200)
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key:?} in {value}"))
}

fn array_of<'a>(value: &'a Value, key: &str) -> &'a Vec<Value> {
    value[key]
        .as_array()
        .unwrap_or_else(|| panic!("no array {key:?} in {value}"))
}

/// The `type`s of a job's events, in order.
fn event_types(job: &Value) -> Vec<String> {
    array_of(job, "events")
        .iter()
        .map(|event| str_of(event, "type").to_owned())
        .collect()
}

/// The job's events of type `kind`, in order.
fn events_of<'a>(job: &'a Value, kind: &str) -> Vec<&'a Value> {
    array_of(job, "events")
        .iter()
        .filter(|event| event["type"] == kind)
        .collect()
}

/// The one event of type `kind` (panics when there are none or several).
fn single_event<'a>(job: &'a Value, kind: &str) -> &'a Value {
    let found = events_of(job, kind);
    assert_eq!(found.len(), 1, "expected exactly one {kind} event: {job}");
    found[0]
}

/// Claims the fixture's queued job with `runner`, heartbeats it once with `extend_seconds`
/// (claimed → running) and returns the assignment and the lease the heartbeat set.
async fn claim_running(runner: &mut Runner, extend_seconds: i64) -> (Claimed, i64) {
    let claimed = runner.claim_job().await;
    let reply = runner.heartbeat(&claimed.claim_id(), extend_seconds).await;
    let beat = reply.expect(200);
    assert_eq!(beat["state"], "running", "first heartbeat: {reply:?}");
    let lease = parse_time(str_of(&beat, "leaseExpiresAt"));
    let expected = now_ms() + extend_seconds * 1000;
    assert!(
        (expected - SKEW_MS..=expected + SKEW_MS).contains(&lease),
        "the heartbeat did not set a lease {extend_seconds} s away: {reply:?}"
    );
    (claimed, lease)
}

/// The nonce of a claim answer's signed envelope.
fn nonce_of(claimed: &Claimed) -> String {
    claimed.verified.envelope().nonce.as_str().to_owned()
}

/// Checks what one lost lease leaves in a job's timeline: exactly one `job.lease_lost` naming
/// the claim, its runner and attempt, immediately followed by `then` (`job.requeued` or
/// `job.cancelled`) with `decision`, both by `actor`; the claim `lost`. Returns the loss event.
fn assert_one_loss<'a>(
    job: &'a Value,
    claimed: &Claimed,
    runner_id: &str,
    actor: &str,
    then: &str,
    decision: &str,
) -> &'a Value {
    let claim_id = claimed.claim_id();
    let attempt = claimed.attempt().get();
    let lost: Vec<&Value> = events_of(job, "job.lease_lost")
        .into_iter()
        .filter(|event| event["claimId"] == claim_id.as_str())
        .collect();
    assert_eq!(lost.len(), 1, "one loss of {claim_id}: {job}");
    let lost = lost[0];
    assert_eq!(lost["actor"], actor, "loss recorded by {actor}: {job}");
    assert_eq!(lost["runnerId"], runner_id, "{job}");
    assert_eq!(lost["attempt"], attempt, "{job}");
    assert!(lost["reason"].is_string(), "a loss has a reason: {job}");

    let events = array_of(job, "events");
    let at = events
        .iter()
        .position(|event| event["id"] == lost["id"])
        .expect("the loss is among the events");
    let next = events
        .get(at + 1)
        .unwrap_or_else(|| panic!("nothing follows the loss of {claim_id}: {job}"));
    assert_eq!(next["type"], then, "the loss is followed by {then}: {job}");
    assert_eq!(next["actor"], actor, "{job}");
    assert_eq!(next["attempt"], attempt, "{job}");
    assert_eq!(next["detail"]["decision"], decision, "{job}");
    if then == "job.requeued" {
        assert_eq!(next["detail"]["nextAttempt"], attempt + 1, "{job}");
    } else {
        assert!(
            next["detail"]["nextAttempt"].is_null(),
            "a job that ends has no next attempt: {job}"
        );
    }
    assert!(next["reason"].is_string(), "{job}");
    assert_eq!(
        lost["at"], next["at"],
        "loss and its outcome commit together: {job}"
    );

    let claim = array_of(job, "claims")
        .iter()
        .find(|c| c["id"] == claim_id.as_str())
        .unwrap_or_else(|| panic!("claim {claim_id} not in the timeline: {job}"));
    assert_eq!(claim["state"], "lost", "{job}");
    assert_eq!(claim["runnerId"], runner_id, "{job}");
    assert_eq!(claim["dispatchAttempt"], attempt, "{job}");
    assert_eq!(claim["endReason"], LOST_END_REASON, "{job}");
    assert_eq!(claim["endedAt"], lost["at"], "{job}");
    lost
}

/// A job back in the queue after losing attempt `attempt`: no claim, no lease, nothing finished.
fn assert_requeued(job: &Value, attempt: u32) {
    assert_eq!(job["state"], "queued", "{job}");
    assert_eq!(job["dispatchAttempt"], attempt, "{job}");
    assert_eq!(job["activeClaimId"], Value::Null, "{job}");
    assert_eq!(job["leaseExpiresAt"], Value::Null, "{job}");
    assert_eq!(job["finishedAt"], Value::Null, "{job}");
}

/// A runner whose lease was lost: `lost`, holding nothing.
fn assert_runner_lost(record: &Value) {
    assert_eq!(record["state"], "lost", "{record}");
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert!(record["stateReason"].is_string(), "{record}");
}

/// Moves the lease of `claimed` one second into the past.
async fn expire(claimed: &Claimed) {
    d1_write(|| set_lease(&claimed.job_id(), &claimed.claim_id(), now_ms() - 1_000)).await;
}

// ---------------------------------------------------------------------------------------------
// The alarm
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// The cron trigger
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// The attempt budget
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Cancellation requested, then the lease lost
// ---------------------------------------------------------------------------------------------

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
