//! Retention (issue 42), against local workerd with its real D1 and R2: how long an
//! organization keeps its finished jobs, set and read by an admin with every bad value refused
//! by its code; and the retention pass, which deletes archived jobs past the cut with their
//! objects and the evidence only they hold, counted, and leaves every other job alone.
//!
//! Runs on a server of its own (`tests/e2e/own-server/retention.vars`): a local test server,
//! where an admin's pass may name the time it runs as (`asOf`).

use edgerunner_e2e::archive::*;
use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use reqwest::Method;
use serde_json::{json, Value};

const SETTING: &str = "/api/developer/retention";
const RUN: &str = "/api/developer/retention/run";
const DAY_MS: i64 = 86_400_000;

/// A finished job of `f`'s organization that streamed and completed with a run holding
/// every kind of evidence; archived when `archived`. Its id and its evaluation run's id.
async fn finished_job(f: &StagedPrompt, archived: bool) -> (String, String) {
    let (runner, claimed) = f.claimed_job(1).await;
    let mut writer = claimed.writer();
    let chunk = writer.next(
        edgerunner_protocol::chunk::ChunkKind::Log,
        json!({"line": 1}),
        timestamp_now(),
    );
    runner.stream(&chunk.to_json()).await.expect(200);
    let evidence = full_evidence(f.key()).await;
    let run = evidence.evaluation_run_id.key();
    let completion = claimed.succeeded(Some(&chunk.checksum), evidence);
    runner.complete(&completion).await.expect(200);
    let id = claimed.job_id();
    if archived {
        let answer = archive(f.key(), &id).await.expect(200);
        assert_eq!(answer["state"], "pruned", "{answer}");
    }
    (id, run.to_owned())
}

fn rfc3339(ms: i64) -> String {
    edgerunner_protocol::time::UnixMillis::new(ms)
        .expect("a time")
        .to_rfc3339()
}

/// Every evidence row of `run`, table by table, in the local D1 file.
fn evidence_rows_of(run: &str) -> u64 {
    let run = sql_text(run);
    let tables = ["test_results", "cost_records", "model_calls", "traces"];
    let mut rows = d1_rows(&d1(&format!(
        "SELECT count(*) AS n FROM evaluation_runs WHERE id = {run}"
    )))[0]["n"]
        .as_u64()
        .expect("a count");
    for table in tables {
        rows += d1_rows(&d1(&format!(
            "SELECT count(*) AS n FROM {table} WHERE evaluation_run_id = {run}"
        )))[0]["n"]
            .as_u64()
            .expect("a count");
    }
    rows
}

async fn put_setting(bearer: &str, body: &Value) -> Reply {
    call(Method::PUT, SETTING, Some(bearer), Some(body)).await
}

#[tokio::test]
async fn an_admin_sets_retention_from_1_to_400_days_and_every_other_value_is_refused() {
    let org = bootstrap_org("retention-setting");
    let other = bootstrap_org("retention-other");
    let default = get(SETTING, &org.admin_key).await.expect(200);
    assert_eq!(
        default,
        json!({"organizationId": org.id, "retentionDays": 90, "deletedJobs": 0})
    );
    for days in [1, 400] {
        let set = put_setting(&org.admin_key, &json!({ "retentionDays": days }))
            .await
            .expect(200);
        assert_eq!(set["retentionDays"], days, "{set}");
    }
    // Out of range, not a whole number, or missing: one code, and nothing changes.
    for bad in [
        json!({ "retentionDays": 0 }),
        json!({ "retentionDays": 401 }),
        json!({ "retentionDays": -1 }),
        json!({ "retentionDays": 1.5 }),
        json!({ "retentionDays": 90.0 }),
        json!({ "retentionDays": "90" }),
        json!({ "retentionDays": null }),
        json!({ "retentionDays": true }),
        json!({ "retentionDays": u64::MAX }),
        json!({}),
    ] {
        put_setting(&org.admin_key, &bad)
            .await
            .expect_error(422, "INVALID_RETENTION");
    }
    put_setting(&org.admin_key, &json!({ "retentionDays": 30, "days": 30 }))
        .await
        .expect_error(422, "UNKNOWN_FIELD");
    assert_eq!(
        get(SETTING, &org.admin_key).await.expect(200)["retentionDays"],
        400
    );
    // Each change is an event of the organization; the other organization is untouched.
    let events = d1_rows(&d1(&format!(
        "SELECT detail FROM job_events WHERE organization_id = {} AND type = 'retention.set' ORDER BY id",
        sql_text(&org.id)
    )));
    let details: Vec<Value> = events
        .iter()
        .map(|row| serde_json::from_str(row["detail"].as_str().expect("detail")).expect("JSON"))
        .collect();
    assert_eq!(
        details,
        vec![json!({"retentionDays": 1}), json!({"retentionDays": 400})]
    );
    assert_eq!(
        get(SETTING, &other.admin_key).await.expect(200)["retentionDays"],
        90
    );
}

#[tokio::test]
async fn only_an_admin_key_with_admin_org_reads_or_sets_retention() {
    let org = bootstrap_org("retention-scopes");
    let reader = new_api_key(
        &org.admin_key,
        &json!({ "name": "reader", "scopes": ["runs:read"] }),
    )
    .await["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned();
    get(SETTING, &reader).await.expect_error(403, "FORBIDDEN");
    put_setting(&reader, &json!({ "retentionDays": 1 }))
        .await
        .expect_error(403, "FORBIDDEN");
    call(Method::GET, SETTING, None, None)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    assert_eq!(
        get(SETTING, &org.admin_key).await.expect(200)["retentionDays"],
        90
    );
}

#[tokio::test]
async fn the_cli_shows_and_sets_retention() {
    let org = bootstrap_org("retention-cli");
    let admin = |args: &[&str]| {
        std::process::Command::new(required_env("EDGERUNNER_BIN"))
            .args(["admin", "--server", &base_url()])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("EDGERUNNER_API_KEY", &org.admin_key)
            .output()
            .expect("edgerunner runs")
    };
    let shown = admin(&["retention"]);
    assert!(shown.status.success(), "{shown:?}");
    assert_eq!(
        String::from_utf8_lossy(&shown.stdout).trim(),
        format!(
            "{} keeps finished jobs 90 days; retention has deleted 0 jobs",
            org.id
        )
    );
    let set = admin(&["--json", "retention", "30"]);
    assert!(set.status.success(), "{set:?}");
    let answer: Value = serde_json::from_slice(&set.stdout).expect("JSON");
    assert_eq!(answer["retentionDays"], 30);
    // Refused before anything is sent.
    let refused = admin(&["retention", "401"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(
        get(SETTING, &org.admin_key).await.expect(200)["retentionDays"],
        30
    );
}

#[tokio::test]
async fn the_pass_deletes_archived_jobs_past_the_cut_with_their_objects_and_evidence_only() {
    let f = StagedPrompt::new(bootstrap_org("retention-pass")).await;
    let other = StagedPrompt::new(bootstrap_org("retention-pass-other")).await;
    put_setting(f.key(), &json!({ "retentionDays": 1 }))
        .await
        .expect(200);
    let (doomed, doomed_run) = finished_job(&f, true).await;
    let (unarchived, _) = finished_job(&f, false).await;
    let (foreign, foreign_run) = finished_job(&other, true).await;
    let live = f.new_job("retention-live").await;
    let doomed_bundle = bundle(f.key(), &doomed).await;
    assert_eq!(evidence_rows_of(&doomed_run), 5);
    let archive_of = |detail: Value| -> [String; 2] {
        let archive = &detail["archive"];
        [
            archive["bundleKey"].as_str().expect("bundleKey").to_owned(),
            archive["recordKey"].as_str().expect("recordKey").to_owned(),
        ]
    };
    let doomed_keys = archive_of(job(f.key(), &doomed).await);
    let foreign_keys = archive_of(job(other.key(), &foreign).await);
    let stored = r2_keys();
    assert!(
        doomed_keys
            .iter()
            .chain(&foreign_keys)
            .all(|key| stored.contains(key)),
        "{stored:?}"
    );

    // A day after the finish, the cut has not passed yet: nothing goes.
    let early = post(
        RUN,
        Some(f.key()),
        &json!({ "asOf": rfc3339(now_ms() + DAY_MS - 60_000) }),
    )
    .await
    .expect(200);
    assert_eq!(early["deleted"], 0, "{early}");
    assert!(bundle(f.key(), &doomed).await == doomed_bundle);

    // Two days after: the archived job goes, whole.
    let pass = post(
        RUN,
        Some(f.key()),
        &json!({ "asOf": rfc3339(now_ms() + 2 * DAY_MS) }),
    )
    .await
    .expect(200);
    assert_eq!(
        pass,
        json!({"expired": 1, "deleted": 1, "unfinished": 0, "more": false})
    );
    get_job(f.key(), &doomed)
        .await
        .expect_error(404, "NOT_FOUND");
    get(
        &format!("/api/remote-runners/jobs/{doomed}/bundle"),
        f.key(),
    )
    .await
    .expect_error(404, "NOT_FOUND");
    get(&format!("/api/evidence/runs/{doomed_run}"), f.key())
        .await
        .expect_error(404, "NOT_FOUND");
    let rows: u64 = d1_footprint(&doomed).iter().map(|(_, rows, _)| rows).sum();
    assert_eq!(rows, 0, "{:?}", d1_footprint(&doomed));
    assert_eq!(evidence_rows_of(&doomed_run), 0);
    // Its bundle and record are gone from R2; the other organization's stay.
    let stored = r2_keys();
    assert!(
        doomed_keys.iter().all(|key| !stored.contains(key)),
        "{stored:?}"
    );
    assert!(
        foreign_keys.iter().all(|key| stored.contains(key)),
        "{stored:?}"
    );
    // Counted, and one event for the pass.
    assert_eq!(get(SETTING, f.key()).await.expect(200)["deletedJobs"], 1);
    let events = d1_rows(&d1(&format!(
        "SELECT detail FROM job_events WHERE organization_id = {} AND type = 'retention.pass'",
        sql_text(&f.org.id)
    )));
    assert_eq!(events.len(), 1, "{events:?}");

    // Not archived yet, live, or another organization's: untouched.
    assert_eq!(job(f.key(), &unarchived).await["state"], "succeeded");
    assert_eq!(job(f.key(), &live).await["state"], "queued");
    assert_eq!(
        job(other.key(), &foreign).await["archive"]["state"],
        "pruned"
    );
    assert_eq!(evidence_rows_of(&foreign_run), 5);

    // Again: nothing more to do, nothing counted twice.
    let again = post(
        RUN,
        Some(f.key()),
        &json!({ "asOf": rfc3339(now_ms() + 2 * DAY_MS) }),
    )
    .await
    .expect(200);
    assert_eq!(again["deleted"], 0, "{again}");
    assert_eq!(get(SETTING, f.key()).await.expect(200)["deletedJobs"], 1);
}

#[tokio::test]
async fn the_cron_pass_deletes_each_organizations_jobs_by_its_own_setting() {
    let short = StagedPrompt::new(bootstrap_org("retention-cron-short")).await;
    let long = StagedPrompt::new(bootstrap_org("retention-cron-long")).await;
    put_setting(short.key(), &json!({ "retentionDays": 1 }))
        .await
        .expect(200);
    let (gone, _) = finished_job(&short, true).await;
    let (kept, _) = finished_job(&long, true).await;
    // Both finished two days ago, as an operator could write through D1: past the short
    // organization's cut (1 day), inside the long one's (90).
    let moved = d1_rows(&d1(&format!(
        "UPDATE jobs SET finished_at = {} WHERE id IN ({}, {}) RETURNING id",
        now_ms() - 2 * DAY_MS,
        sql_text(&gone),
        sql_text(&kept)
    )));
    assert_eq!(moved.len(), 2, "{moved:?}");
    // Bounded: a pass takes up to 25 due jobs; other tests' jobs on this server are young.
    let mut deleted = false;
    for _ in 0..5 {
        edgerunner_e2e::recovery::fire_cron().await;
        if get_job(short.key(), &gone).await.status == 404 {
            deleted = true;
            break;
        }
    }
    assert!(deleted, "the cron pass did not delete {gone}");
    assert_eq!(
        get(SETTING, short.key()).await.expect(200)["deletedJobs"],
        1
    );
    assert_eq!(job(long.key(), &kept).await["archive"]["state"], "pruned");
}

#[tokio::test]
async fn a_pass_is_bounded_and_its_clock_is_a_time() {
    let org = bootstrap_org("retention-run-bounds");
    for bad in [
        json!({ "limit": 0 }),
        json!({ "limit": 26 }),
        json!({ "limit": "5" }),
    ] {
        post(RUN, Some(&org.admin_key), &bad)
            .await
            .expect_error(422, "INVALID_LIMIT");
    }
    for bad in [json!({ "asOf": "yesterday" }), json!({ "asOf": 5 })] {
        post(RUN, Some(&org.admin_key), &bad)
            .await
            .expect_error(422, "INVALID_FIELD");
    }
    post(RUN, Some(&org.admin_key), &json!({ "at": 1 }))
        .await
        .expect_error(422, "UNKNOWN_FIELD");
    // Omitted or null: a pass of 25 at the server's own time.
    for body in [json!({}), json!({ "asOf": null, "limit": null })] {
        let pass = post(RUN, Some(&org.admin_key), &body).await.expect(200);
        assert_eq!(pass["deleted"], 0, "{pass}");
    }
}
