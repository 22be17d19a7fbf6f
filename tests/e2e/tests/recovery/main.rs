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
//! reap test: exact counts and `system:cron-secret`). And local D1 is one SQLite file that a
//! harness write locks while it runs: [`D1_WRITES`] keeps this suite's writes out of
//! the windows where a failed request would hide what the test is about.

mod alarm;
mod budget;
mod passes;
mod races;

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

/// A harness write ([`bootstrap_org`]'s `wrangler d1 execute`, [`set_leases`]' SQL on the file)
/// locks local D1's one SQLite file for a moment, and a server request meeting that lock fails (`500`, workerd logs
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
/// harness write of another test (workerd logs `database is locked: SQLITE_BUSY`). Only
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
