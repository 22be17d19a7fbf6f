//! A finished job's own alarm archives it (issue 40), on a server of its own whose grace period
//! is 5 s instead of 15 minutes (`tests/e2e/own-server/archive_alarm.vars`, honoured only by a
//! local test server). Nothing else archives here: `wrangler dev` runs no cron pass unless asked
//! and no test asks, and no admin request is made.

use edgerunner_e2e::archive::*;
use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::ChunkKind;
use serde_json::{json, Value};

/// The grace period the suite's server runs with: `ARCHIVE_GRACE_SECONDS` in its variables.
fn grace_ms() -> i64 {
    let path = repo_root().join("tests/e2e/own-server/archive_alarm.vars");
    let vars = std::fs::read_to_string(&path).expect("the suite's server variables");
    let seconds = vars
        .lines()
        .find_map(|line| line.strip_prefix("ARCHIVE_GRACE_SECONDS="))
        .and_then(|value| value.trim().parse::<i64>().ok())
        .expect("ARCHIVE_GRACE_SECONDS=<seconds> in the suite's server variables");
    seconds * 1_000
}

/// Polls the jobs' details until each is archived; bounded (0.5 s apart, for two minutes past
/// the grace period).
async fn archived_by_alarm(bearer: &str, jobs: &[String]) -> Vec<Value> {
    let polls = 240 + grace_ms() / 500;
    for _ in 0..polls {
        let mut details = Vec::new();
        for id in jobs {
            details.push(job(bearer, id).await);
        }
        if details.iter().all(|d| d["archive"]["state"] == "pruned") {
            return details;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!(
        "{jobs:?} were not archived within two minutes of their grace period; does \
         tests/e2e/own-server/archive_alarm.vars reach this server?"
    );
}

#[tokio::test]
async fn a_finished_jobs_own_alarm_archives_it_once_its_grace_period_is_over() {
    let f = StagedPrompt::new(bootstrap_org("archive-alarm")).await;
    // One job runs, streams and succeeds; another is cancelled while queued (never claimed).
    let (runner, claimed) = f.claimed_job(1).await;
    let ran = claimed.job_id();
    let mut writer = claimed.writer();
    let mut last = None;
    for n in 0..6 {
        let chunk = writer.next(ChunkKind::Log, json!({ "line": n }), timestamp_now());
        runner.stream(&chunk.to_json()).await.expect(200);
        last = Some(chunk.checksum.clone());
    }
    let completion = claimed.succeeded(last.as_ref(), bare_evidence(f.key()).await);
    runner.complete(&completion).await.expect(200);
    let bundle_before = bundle(f.key(), &ran).await;
    let cancelled = f.new_job("archive-alarm-cancelled").await;
    cancel_job(f.key(), &cancelled, "no longer needed")
        .await
        .expect(200);

    let grace = grace_ms();
    let jobs = [ran.clone(), cancelled.clone()];
    let details = archived_by_alarm(f.key(), &jobs).await;
    for detail in &details {
        let finished = parse_time(detail["finishedAt"].as_str().expect("finishedAt"));
        let archived = parse_time(
            detail["archive"]["archivedAt"]
                .as_str()
                .expect("archivedAt"),
        );
        // Never before its grace period is over.
        assert!(
            archived >= finished + grace,
            "archived {} ms after its finish: {detail}",
            archived - finished
        );
        eprintln!(
            "{}: {} archived {} ms after it was due",
            detail["id"],
            detail["state"],
            archived - finished - grace
        );
    }

    // The ran job reads as before, from R2, and its bundle still verifies.
    assert_eq!(details[0]["archive"]["streamChunks"], 6);
    let bundle_after = bundle(f.key(), &ran).await;
    assert!(
        bundle_after == bundle_before,
        "the bundle changed when archived"
    );
    assert_eq!(
        details[0]["archive"]["bundleSha256"],
        sha256_hex(bundle_after.as_bytes())
    );
    verify(&bundle_after, &ran, runner.signing.secret.expose());
    let pages = pages(f.key(), &ran, "limit=4").await;
    let chunks: usize = pages
        .iter()
        .map(|page| page["chunks"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(chunks, 6, "{pages:?}");

    // D1 keeps the archived rows (the ran job's holding its run, migration 0019), nothing else.
    let rows = |id: &str| -> u64 { d1_footprint(id).iter().map(|(_, rows, _)| rows).sum() };
    assert_eq!(rows(&ran), 1, "{:?}", d1_footprint(&ran));
    assert_eq!(rows(&cancelled), 1, "{:?}", d1_footprint(&cancelled));
}
