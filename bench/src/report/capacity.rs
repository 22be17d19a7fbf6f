//! Section 10, the capacity model: from section 8's counts, the D1 queries per second an idle
//! and a busy runner cost, and the runners one D1 database carries.

use serde_json::Value;

use super::verdict;
use crate::scenarios::pickup::PICKUP_WAIT_SECONDS;

/// The capacity model's workload: what an idle and a busy runner send.
const MODEL_POLL_SECONDS: f64 = 2.0;
const MODEL_QUIET_SECONDS: f64 = 30.0;
const MODEL_HEARTBEAT_SECONDS: f64 = 5.0;
const MODEL_CHUNK_SECONDS: f64 = 1.0;

/// D1 queries/s one database is taken to serve.
pub(crate) const MODEL_D1_QPS: f64 = 1000.0;

/// Scenario 8's counts before the hot-path work (commit 7b0ce23, the same scenario): a claim
/// that found nothing, a warm heartbeat, a warm chunk. There was no long poll.
const BEFORE_CLAIM_NOTHING: f64 = 2.0;
const BEFORE_HEARTBEAT: f64 = 3.0;
const BEFORE_CHUNK: f64 = 3.0;

/// D1 queries per second of (an idle runner polling, an idle runner long-polling, a busy
/// runner), from scenario 8's counts. An idle runner's claims cost `claimIdle` each, plus one
/// confirming read (`claimNothingQueuedAgain`) per quiet period.
pub(crate) fn capacity(r: &Value) -> Option<(f64, f64, f64)> {
    let c = &r["roundTrips"];
    let n = |k: &str| c[k].as_f64();
    let refresh = n("claimNothingQueuedAgain")? / MODEL_QUIET_SECONDS;
    let polling = n("claimIdle")? / MODEL_POLL_SECONDS + refresh;
    let long_polling = n("claimLongPoll")? / f64::from(PICKUP_WAIT_SECONDS) + refresh;
    let busy =
        n("heartbeatWarm")? / MODEL_HEARTBEAT_SECONDS + n("chunkWarm")? / MODEL_CHUNK_SECONDS;
    Some((polling, long_polling, busy))
}

/// Section 10.
pub(crate) fn markdown(r: &Value) -> String {
    let Some((polling, long_polling, busy)) = capacity(r) else {
        return String::new();
    };
    let runners = |qps: f64| {
        if qps > 0.0 {
            format!("{:.0}", MODEL_D1_QPS / qps)
        } else {
            "unbounded by D1".to_owned()
        }
    };
    let before_idle = BEFORE_CLAIM_NOTHING / MODEL_POLL_SECONDS;
    let before_busy =
        BEFORE_HEARTBEAT / MODEL_HEARTBEAT_SECONDS + BEFORE_CHUNK / MODEL_CHUNK_SECONDS;
    format!(
        "\n## 10. Capacity model\n\nD1 queries per second per runner, from the counts of section 8, and the runners one D1 database carries at {:.0} queries/s. An idle runner polls every {:.0} s (the published SDK's loop and the CLI's `--poll-interval`) or long-polls {} s per claim (the CLI's default); its object re-reads D1 once per {:.0} s quiet period. A busy runner holds one job, heartbeats every {:.0} s and sends one chunk per {:.0} s. \"Before\" is the same scenario at commit 7b0ce23 (a claim that found nothing: {:.0} round trips; warm heartbeat and chunk: {:.0} each; no long poll).\n\n| runner | q/s before | runners before | q/s now | runners now | goal |\n|---|---|---|---|---|---|\n| idle, polling every {:.0} s | {:.3} | {} | {:.3} | {} | ≥ 10,000: **{}** |\n| idle, long-polling {} s | – | – | {:.3} | {} | ≥ 10,000: **{}** |\n| busy | {:.2} | {} | {:.2} | {} | ≥ 800: **{}** |\n\nNot in the per-runner figures: each job enqueued or requeued wakes one waiting claim, which reads D1 once and writes the grant; a woken claim whose runner cannot take the job passes the wake on, one more read each. A fleet whose organizations queue J jobs/s, with waiting runners that can take them, adds 2·J queries/s, whatever its size; a waiting claim that was not woken reads once when its wait ends.\n",
        MODEL_D1_QPS,
        MODEL_POLL_SECONDS,
        PICKUP_WAIT_SECONDS,
        MODEL_QUIET_SECONDS,
        MODEL_HEARTBEAT_SECONDS,
        MODEL_CHUNK_SECONDS,
        BEFORE_CLAIM_NOTHING,
        BEFORE_HEARTBEAT,
        MODEL_POLL_SECONDS,
        before_idle,
        runners(before_idle),
        polling,
        runners(polling),
        verdict(polling <= MODEL_D1_QPS / 10_000.0),
        PICKUP_WAIT_SECONDS,
        long_polling,
        runners(long_polling),
        verdict(long_polling <= MODEL_D1_QPS / 10_000.0),
        before_busy,
        runners(before_busy),
        busy,
        runners(busy),
        verdict(busy <= MODEL_D1_QPS / 800.0),
    )
}
