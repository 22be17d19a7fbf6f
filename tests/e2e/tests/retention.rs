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

/// The tests that make a job due at the real clock's cut (an operator moves its finish back)
/// take turns: the cron pass one of them runs goes over every organization and would delete
/// another's due job under its feet.
fn real_cut() -> &'static tokio::sync::Mutex<()> {
    static TURN: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    TURN.get_or_init(|| tokio::sync::Mutex::new(()))
}

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

/// `edgerunner admin --server BASE ARGS` with `key` in its environment and nothing else of ours.
fn admin_cli(key: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(required_env("EDGERUNNER_BIN"))
        .args(["admin", "--server", &base_url()])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("EDGERUNNER_API_KEY", key)
        .output()
        .expect("edgerunner runs")
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
    let admin = |args: &[&str]| admin_cli(&org.admin_key, args);
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
    let _turn = real_cut().lock().await;
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
        "UPDATE archived_jobs SET finished_at = {} WHERE id IN ({}, {}) RETURNING id",
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

const USAGE: &str = "/api/developer/usage";

fn hold_path(job_id: &str) -> String {
    format!("/api/remote-runners/jobs/{job_id}/hold")
}

async fn reader_key(org: &Org) -> String {
    new_api_key(
        &org.admin_key,
        &json!({ "name": "reader", "scopes": ["runs:read"] }),
    )
    .await["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned()
}

async fn pass_as_of(bearer: &str, at_ms: i64) -> Value {
    post(RUN, Some(bearer), &json!({ "asOf": rfc3339(at_ms) }))
        .await
        .expect(200)
}

/// The organization's hold events, oldest first: type, job id, reason and detail.
fn hold_events(org: &Org) -> Vec<Value> {
    d1_rows(&d1(&format!(
        "SELECT type, job_id, reason, detail FROM job_events WHERE organization_id = {} \
         AND type IN ('job.held', 'job.hold_released') ORDER BY id",
        sql_text(&org.id)
    )))
}

#[tokio::test]
async fn a_held_job_outlives_its_cut_until_released_and_both_are_events() {
    let f = StagedPrompt::new(bootstrap_org("retention-hold")).await;
    put_setting(f.key(), &json!({ "retentionDays": 1 }))
        .await
        .expect(200);
    let (held, held_run) = finished_job(&f, true).await;
    let (free, _) = finished_job(&f, true).await;
    let live = f.new_job("retention-hold-live").await;

    // Refused: no reason, a blank one, a live job, an unknown one, another organization's,
    // a key without admin:org.
    let too_long = "x".repeat(1001);
    for body in [
        json!({}),
        json!({ "reason": "  " }),
        json!({ "reason": 7 }),
        json!({ "reason": too_long }),
    ] {
        post(&hold_path(&held), Some(f.key()), &body)
            .await
            .expect_error(422, "REASON_REQUIRED");
    }
    // 1000 characters is the most a reason holds (checked here on a job it cannot hold).
    post(
        &hold_path("job_unknown"),
        Some(f.key()),
        &json!({ "reason": "x".repeat(1000) }),
    )
    .await
    .expect_error(404, "NOT_FOUND");
    post(
        &hold_path(&held),
        Some(f.key()),
        &json!({ "reason": "x", "by": "me" }),
    )
    .await
    .expect_error(422, "UNKNOWN_FIELD");
    let why = json!({ "reason": "audit 2026-12" });
    post(&hold_path(&live), Some(f.key()), &why)
        .await
        .expect_error(409, "JOB_NOT_FINISHED");
    post(&hold_path("job_unknown"), Some(f.key()), &why)
        .await
        .expect_error(404, "NOT_FOUND");
    let other = bootstrap_org("retention-hold-other");
    post(&hold_path(&held), Some(&other.admin_key), &why)
        .await
        .expect_error(404, "NOT_FOUND");
    post(&hold_path(&held), Some(&reader_key(&f.org).await), &why)
        .await
        .expect_error(403, "FORBIDDEN");
    assert!(hold_events(&f.org).is_empty());

    // Held: the job says by whom, when and why; again changes nothing.
    let answer = post(&hold_path(&held), Some(f.key()), &why)
        .await
        .expect(200);
    assert_eq!(answer["id"], held.as_str(), "{answer}");
    let hold = answer["hold"].clone();
    assert_eq!(hold["reason"], "audit 2026-12", "{answer}");
    assert!(
        hold["heldBy"].as_str().is_some_and(|by| !by.is_empty()),
        "{hold}"
    );
    assert!(hold["heldAt"].is_string(), "{hold}");
    let again = post(
        &hold_path(&held),
        Some(f.key()),
        &json!({ "reason": "another" }),
    )
    .await
    .expect(200);
    assert_eq!(again["hold"], hold);
    // Shown in the detail and the list, never in the custody bundle.
    assert_eq!(job(f.key(), &held).await["hold"], hold);
    let listed = get("/api/remote-runners/jobs?limit=10", f.key())
        .await
        .expect(200);
    for listed_job in listed["jobs"].as_array().expect("jobs") {
        let expected = if listed_job["id"] == held.as_str() {
            hold.clone()
        } else {
            Value::Null
        };
        assert_eq!(listed_job["hold"], expected, "{listed_job}");
    }
    let sealed: Value = serde_json::from_str(&bundle(f.key(), &held).await).expect("JSON");
    assert!(sealed["job"].get("hold").is_none(), "{}", sealed["job"]);

    // Two days on, the pass deletes the free job and passes the held one by.
    let pass = pass_as_of(f.key(), now_ms() + 2 * DAY_MS).await;
    assert_eq!(pass["deleted"], 1, "{pass}");
    get_job(f.key(), &free).await.expect_error(404, "NOT_FOUND");
    assert_eq!(job(f.key(), &held).await["hold"], hold);
    get(&format!("/api/evidence/runs/{held_run}"), f.key())
        .await
        .expect(200);

    // Released (twice: the second changes nothing), the next pass deletes it.
    let released = call(Method::DELETE, &hold_path(&held), Some(f.key()), None)
        .await
        .expect(200);
    assert!(released.get("hold").is_none(), "{released}");
    call(Method::DELETE, &hold_path(&held), Some(f.key()), None)
        .await
        .expect(200);
    let pass = pass_as_of(f.key(), now_ms() + 2 * DAY_MS).await;
    assert_eq!(pass["deleted"], 1, "{pass}");
    get_job(f.key(), &held).await.expect_error(404, "NOT_FOUND");
    post(&hold_path(&held), Some(f.key()), &why)
        .await
        .expect_error(404, "NOT_FOUND");

    // One event each, the organization's, naming the job; they outlive it.
    let detail = json!({ "jobId": held }).to_string();
    assert_eq!(
        hold_events(&f.org),
        vec![
            json!({"type": "job.held", "job_id": null, "reason": "audit 2026-12", "detail": detail}),
            json!({"type": "job.hold_released", "job_id": null, "reason": null, "detail": detail}),
        ]
    );
}

#[tokio::test]
async fn the_usage_view_counts_what_the_organization_stores() {
    let f = StagedPrompt::new(bootstrap_org("retention-usage")).await;
    let usage = || async { get(USAGE, f.key()).await.expect(200) };
    let empty = usage().await;
    assert_eq!(
        empty["jobs"],
        json!({"live": 0, "archived": 0, "held": 0, "expiring": 0, "deletedByRetention": 0})
    );
    assert_eq!(empty["r2"], json!({"objects": 0, "bundleBytes": 0}));
    assert_eq!(empty["oldestJobAt"], Value::Null);
    assert_eq!(empty["organizationId"], f.org.id.as_str());
    assert!(
        empty["d1"]["databaseBytes"].as_u64().is_some_and(|n| n > 0),
        "{empty}"
    );
    let cut = edgerunner_protocol::time::UnixMillis::parse_rfc3339(
        empty["retention"]["cut"].as_str().expect("a cut"),
    )
    .expect("a time")
    .get();
    assert!((cut - (now_ms() - 90 * DAY_MS)).abs() < 60_000, "{empty}");
    assert_eq!(empty["retention"]["retentionDays"], 90);
    assert_eq!(empty["retention"]["due"], 0);
    assert_eq!(empty["retention"]["dueCapped"], false);

    let (unarchived, _) = finished_job(&f, false).await;
    let (archived, _) = finished_job(&f, true).await;
    let (held, _) = finished_job(&f, true).await;
    f.new_job("usage-live").await;
    post(
        &hold_path(&held),
        Some(f.key()),
        &json!({ "reason": "kept" }),
    )
    .await
    .expect(200);
    let bundle_bytes = |detail: Value| detail["archive"]["bundleBytes"].as_i64().expect("bytes");
    let held_bytes = bundle_bytes(job(f.key(), &held).await);
    let archived_bytes = bundle_bytes(job(f.key(), &archived).await);
    let counted = usage().await;
    assert_eq!(
        counted["jobs"],
        json!({"live": 2, "archived": 2, "held": 1, "expiring": 0, "deletedByRetention": 0})
    );
    assert_eq!(
        counted["r2"],
        json!({"objects": 4, "bundleBytes": held_bytes + archived_bytes})
    );
    assert_eq!(
        counted["oldestJobAt"],
        job(f.key(), &unarchived).await["createdAt"]
    );

    // What a pass now would delete: with a day's retention, the archived job once it finished
    // two days ago (an operator moves its finish back), never the held one.
    let _turn = real_cut().lock().await;
    put_setting(f.key(), &json!({ "retentionDays": 1 }))
        .await
        .expect(200);
    assert_eq!(usage().await["retention"]["due"], 0);
    for id in [&archived, &held] {
        d1(&format!(
            "UPDATE archived_jobs SET finished_at = finished_at - {} WHERE id = {}",
            2 * DAY_MS,
            sql_text(id)
        ));
    }
    assert_eq!(usage().await["retention"]["due"], 1);
    let pass = post(RUN, Some(f.key()), &json!({})).await.expect(200);
    assert_eq!(pass["deleted"], 1, "{pass}");
    let after = usage().await;
    assert_eq!(
        after["jobs"],
        json!({"live": 2, "archived": 1, "held": 1, "expiring": 0, "deletedByRetention": 1})
    );
    assert_eq!(
        after["r2"],
        json!({"objects": 2, "bundleBytes": held_bytes})
    );
    assert_eq!(after["retention"]["due"], 0);

    // Each organization its own; an admin's view only.
    let other = bootstrap_org("retention-usage-other");
    assert_eq!(
        get(USAGE, &other.admin_key).await.expect(200)["jobs"]["live"],
        0
    );
    get(USAGE, &reader_key(&f.org).await)
        .await
        .expect_error(403, "FORBIDDEN");
}

#[tokio::test]
async fn a_job_marked_for_deletion_answers_as_unknown_until_it_is_gone() {
    let f = StagedPrompt::new(bootstrap_org("retention-expiring")).await;
    let (marked, _) = finished_job(&f, true).await;
    let (kept, _) = finished_job(&f, true).await;
    // A pass that marked the job and stopped before deleting it (a crash, R2 unreachable):
    // its expire batch, as the pass runs it (retention/expire.sql, then usage/job_expiring.sql).
    d1(&format!(
        "UPDATE archived_jobs SET expiring_at = {now} WHERE id = {job}; \
         UPDATE organization_usage SET jobs_archived = jobs_archived - 1, \
         jobs_expiring = jobs_expiring + 1 WHERE organization_id = {org} AND changes() = 1",
        now = now_ms(),
        job = sql_text(&marked),
        org = sql_text(&f.org.id),
    ));
    get_job(f.key(), &marked)
        .await
        .expect_error(404, "NOT_FOUND");
    for path in ["stream?after=0.-1", "bundle"] {
        get(
            &format!("/api/remote-runners/jobs/{marked}/{path}"),
            f.key(),
        )
        .await
        .expect_error(404, "NOT_FOUND");
    }
    post(
        &hold_path(&marked),
        Some(f.key()),
        &json!({ "reason": "too late" }),
    )
    .await
    .expect_error(404, "NOT_FOUND");
    let listed = get("/api/remote-runners/jobs?limit=10", f.key())
        .await
        .expect(200);
    let ids: Vec<&str> = listed["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert_eq!(ids, [kept.as_str()], "{listed}");
    let listed = get("/api/remote-runners/jobs?limit=10&state=succeeded", f.key())
        .await
        .expect(200);
    assert_eq!(
        listed["jobs"].as_array().expect("jobs").len(),
        1,
        "{listed}"
    );
    assert_eq!(get(USAGE, f.key()).await.expect(200)["jobs"]["expiring"], 1);

    // The next pass finishes it, whatever its cut.
    let pass = post(RUN, Some(f.key()), &json!({})).await.expect(200);
    assert_eq!(pass["deleted"], 1, "{pass}");
    let usage = get(USAGE, f.key()).await.expect(200);
    assert_eq!(usage["jobs"]["expiring"], 0, "{usage}");
    assert_eq!(usage["jobs"]["deletedByRetention"], 1, "{usage}");
    assert_eq!(job(f.key(), &kept).await["state"], "succeeded");
}

#[tokio::test]
async fn the_cli_holds_and_releases_a_job_and_shows_usage() {
    let f = StagedPrompt::new(bootstrap_org("retention-cli-hold")).await;
    let (id, _) = finished_job(&f, true).await;
    let admin = |args: &[&str]| {
        let output = admin_cli(f.key(), args);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let held = admin(&["jobs", "hold", &id, "--reason", "incident 12"]);
    assert!(held.contains("held"), "{held}");
    assert!(held.contains("incident 12"), "{held}");
    let listed = admin(&["jobs", "list"]);
    assert!(
        listed
            .lines()
            .any(|line| line.starts_with(&id) && line.contains("succeeded (held)")),
        "{listed}"
    );
    let usage = admin(&["usage"]);
    assert!(
        usage.contains(
            "jobs            0 live, 1 archived, 0 expiring (1 of them held); 0 deleted by retention"
        ),
        "{usage}"
    );
    assert!(usage.contains("R2              2 objects"), "{usage}");
    assert!(
        usage.contains("of a 1073741824 bytes quota (the deployment's default)"),
        "{usage}"
    );
    let released = admin(&["--json", "jobs", "unhold", &id]);
    let answer: Value = serde_json::from_str(&released).expect("JSON");
    assert!(answer.get("hold").is_none(), "{answer}");
    assert_eq!(get(USAGE, f.key()).await.expect(200)["jobs"]["held"], 0);
}

/// The organization's live D1 bytes, as its usage view says.
async fn organization_bytes(bearer: &str) -> i64 {
    get(USAGE, bearer).await.expect(200)["d1"]["organizationBytes"]
        .as_i64()
        .expect("organizationBytes")
}

/// `POST /api/remote-runners/jobs` for one job of `f`'s release asking `question`.
async fn enqueue_quota(f: &StagedPrompt, question: &str) -> Reply {
    let body = enqueue_body(
        &unique("quota"),
        &f.release,
        "staging",
        &json!({ "question": question }),
        &requirements("prompt"),
    );
    enqueue(f.key(), &body).await
}

/// An operator's quota for one organization (`wrangler d1 execute`, as `docs/API.md` says).
fn set_quota(org: &Org, bytes: i64) {
    wrangler_d1(&format!(
        "UPDATE organizations SET d1_quota_bytes = {bytes} WHERE id = {}",
        sql_text(&org.id)
    ));
}

#[tokio::test]
async fn an_organizations_data_is_held_to_its_quota_to_the_byte_and_nothing_is_half_written() {
    let f = StagedPrompt::new(bootstrap_org("retention-quota")).await;
    let usage = get(USAGE, f.key()).await.expect(200);
    assert_eq!(usage["d1"]["quotaBytes"], 1_073_741_824, "{usage}");
    assert_eq!(usage["d1"]["quotaIsDefault"], true, "{usage}");
    // What a job of this shape costs: measured on the first.
    let before = organization_bytes(f.key()).await;
    let first = enqueue_quota(&f, "aaaa").await.expect(201);
    let job_cost = organization_bytes(f.key()).await - before;
    assert!(
        job_cost > 1024,
        "a job costs its row and its input: {job_cost}"
    );

    // One byte short of room for another: refused whole, with its own code.
    let held = organization_bytes(f.key()).await;
    set_quota(&f.org, held + job_cost - 1);
    let usage = get(USAGE, f.key()).await.expect(200);
    assert_eq!(usage["d1"]["quotaBytes"], held + job_cost - 1, "{usage}");
    assert_eq!(usage["d1"]["quotaIsDefault"], false, "{usage}");
    enqueue_quota(&f, "bbbb")
        .await
        .expect_error(507, "QUOTA_EXCEEDED");
    assert_eq!(organization_bytes(f.key()).await, held);
    let listed = get("/api/remote-runners/jobs?limit=10", f.key())
        .await
        .expect(200);
    assert_eq!(
        listed["jobs"].as_array().expect("jobs").len(),
        1,
        "{listed}"
    );
    assert_eq!(get(USAGE, f.key()).await.expect(200)["jobs"]["live"], 1);
    // Exactly at the quota: taken.
    set_quota(&f.org, held + job_cost);
    enqueue_quota(&f, "cccc").await.expect(201);
    assert_eq!(organization_bytes(f.key()).await, held + job_cost);

    // A runner's chunk is charged too: one byte short, refused and not stored; then taken.
    let mut runner = f.runner(1).await;
    let claimed = runner.claim_job().await;
    assert_eq!(claimed.job_id(), id_of(&first));
    runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
    let mut writer = claimed.writer();
    let probe = writer.next(
        edgerunner_protocol::chunk::ChunkKind::Log,
        json!({"line": "one"}),
        timestamp_now(),
    );
    set_quota(&f.org, 1 << 40);
    let at = organization_bytes(f.key()).await;
    runner.stream(&probe.to_json()).await.expect(200);
    let chunk_cost = organization_bytes(f.key()).await - at;
    assert!(
        chunk_cost > 256,
        "a chunk costs its row and its payload: {chunk_cost}"
    );
    let chunk = writer.next(
        edgerunner_protocol::chunk::ChunkKind::Log,
        json!({"line": "two"}),
        timestamp_now(),
    );
    let held = organization_bytes(f.key()).await;
    set_quota(&f.org, held + chunk_cost - 1);
    runner
        .stream(&chunk.to_json())
        .await
        .expect_error(507, "QUOTA_EXCEEDED");
    assert_eq!(organization_bytes(f.key()).await, held);
    set_quota(&f.org, held + chunk_cost);
    runner.stream(&chunk.to_json()).await.expect(200);
    assert_eq!(organization_bytes(f.key()).await, held + chunk_cost);
    let page = get(
        &format!(
            "/api/remote-runners/jobs/{}/stream?after=0.-1",
            id_of(&first)
        ),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(
        page["chunks"].as_array().expect("chunks").len(),
        2,
        "{page}"
    );

    // Evidence too: a test result one byte past the quota is refused, and the run holds none.
    set_quota(&f.org, 1 << 40);
    let run = evaluation_run(f.key()).await;
    let results = format!("/api/evidence/runs/{}/test-results", run.key());
    let case = |name: &str| json!({ "name": name, "status": "passed", "score": 1 });
    let at = organization_bytes(f.key()).await;
    post(&results, Some(f.key()), &case("case-0001"))
        .await
        .expect(201);
    let result_cost = organization_bytes(f.key()).await - at;
    assert_eq!(result_cost, 256 + 9, "a result costs its name and a row");
    let held = organization_bytes(f.key()).await;
    set_quota(&f.org, held + result_cost - 1);
    post(&results, Some(f.key()), &case("case-0002"))
        .await
        .expect_error(507, "QUOTA_EXCEEDED");
    set_quota(&f.org, held + result_cost);
    post(&results, Some(f.key()), &case("case-0003"))
        .await
        .expect(201);
    let read = get(&format!("/api/evidence/runs/{}", run.key()), f.key())
        .await
        .expect(200);
    let names: Vec<&str> = read["testResults"]
        .as_array()
        .expect("testResults")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["case-0001", "case-0003"], "{read}");
}
