//! Helpers for the recovery suite (`tests/recovery.rs`): fire the cron trigger the way
//! `wrangler dev --test-scheduled` allows, call `POST /api/remote-runners/jobs/reap`, read
//! `CRON_SECRET`, and move a lease into the past through D1 (so that a test need not wait for
//! it to lapse).

use serde_json::{json, Value};

use crate::{base_url, client, d1, post, required_env, send, sql_text, Reply};

/// `CRON_SECRET` from the `KEY=VALUE` file named by `EDGERUNNER_DEV_VARS`.
pub fn cron_secret() -> String {
    let path = required_env("EDGERUNNER_DEV_VARS");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read EDGERUNNER_DEV_VARS file {path}: {e}"));
    let value = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("CRON_SECRET="))
        .unwrap_or_else(|| panic!("{path} has no CRON_SECRET line"))
        .trim()
        .trim_matches('"')
        .to_owned();
    assert!(!value.is_empty(), "{path} has an empty CRON_SECRET");
    value
}

/// `GET /__scheduled?cron=*+*+*+*+*`: runs the cron trigger (one recovery pass over every
/// organization) and answers once the pass has run. Expects `200`.
pub async fn fire_cron() -> Reply {
    let request = client().get(format!("{}/__scheduled?cron=*+*+*+*+*", base_url()));
    let reply = send("GET /__scheduled".to_owned(), request).await;
    assert_eq!(reply.status, 200, "the cron trigger did not run: {reply:?}");
    reply
}

/// `POST /api/remote-runners/jobs/reap` with an optional bearer (API key or `CRON_SECRET`).
pub async fn reap(bearer: Option<&str>, body: &Value) -> Reply {
    post("/api/remote-runners/jobs/reap", bearer, body).await
}

/// A reap answer, checked to be exactly `{examined, requeued, ended, unchanged, failed,
/// more}` with these counts.
pub fn expect_report(reply: &Reply, examined: u64, requeued: u64, ended: u64, more: bool) -> Value {
    let report = reply.expect(200);
    assert_eq!(
        report,
        json!({
            "examined": examined,
            "requeued": requeued,
            "ended": ended,
            "unchanged": 0,
            "failed": 0,
            "more": more,
        }),
        "unexpected reap report: {reply:?}"
    );
    report
}

/// The rows of statement `index` of a [`d1`] answer.
pub fn d1_statement_rows(answer: &Value, index: usize) -> Vec<Value> {
    answer[index]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results for statement {index} in {answer}"))
        .clone()
}

/// Moves each `(job id, claim id, at_ms)` lease to `at_ms`, in one D1 call: the job's
/// `lease_expires_at` (what recovery reads) while it holds that claim, and the active
/// claim's. Panics unless every statement changed exactly one row. The job's own alarm is
/// left where it was.
pub fn set_leases(leases: &[(&str, &str, i64)]) {
    let sql: String = leases
        .iter()
        .map(|(job, claim, at)| {
            let (job, claim) = (sql_text(job), sql_text(claim));
            format!(
                "UPDATE jobs SET lease_expires_at = {at} WHERE id = {job} AND active_claim_id = {claim} \
                   AND state IN ('claimed', 'running', 'cancel_requested') RETURNING id; \
                 UPDATE job_claims SET lease_expires_at = {at} WHERE id = {claim} AND job_id = {job} \
                   AND state = 'active' RETURNING id; "
            )
        })
        .collect();
    let answer = d1(&sql);
    for index in 0..leases.len() * 2 {
        let rows = d1_statement_rows(&answer, index);
        assert_eq!(
            rows.len(),
            1,
            "statement {index} of {sql:?} changed {} rows: {answer}",
            rows.len()
        );
    }
}

/// [`set_leases`] for one lease.
pub fn set_lease(job_id: &str, claim_id: &str, at_ms: i64) {
    set_leases(&[(job_id, claim_id, at_ms)]);
}
