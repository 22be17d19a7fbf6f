//! Archive on finish (issue 40), against local workerd with its real D1 and R2: a finished job
//! archived (`POST …/jobs/{id}/archive`) reads exactly as before — its detail, every stream
//! page, its bundle byte for byte, which `edgerunner verify` still accepts — while D1 keeps its
//! compact archived row (migration 0018) and its evidence custody only; a completion that
//! arrives afterwards is counted on that row and the archived bytes stay; its idempotency key
//! answers an enqueue and the lists show it as before; a bundle past one R2 `put` goes up in
//! parts.

use edgerunner_e2e::archive::*;
use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use edgerunner_protocol::chunk::ChunkKind;
use edgerunner_protocol::completion::Completion;
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Value};

#[tokio::test]
async fn an_archived_job_reads_byte_for_byte_as_before_and_d1_keeps_its_row_and_custody() {
    let f = StagedPrompt::new(bootstrap_org("archive-reads")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let job_id = claimed.job_id();
    let mut writer = claimed.writer();
    let mut last = None;
    for n in 0..23 {
        let kind = if n % 5 == 4 {
            ChunkKind::Trajectory
        } else {
            ChunkKind::Log
        };
        // Number lexemes the bytes must keep as sent.
        let payload = json!({ "line": n, "text": format!("line {n} {}", "x".repeat(n * 40)),
                              "weight": lexical("1.50") });
        let chunk = writer.next(kind, payload, timestamp_now());
        runner.stream(&chunk.to_json()).await.expect(200);
        last = Some(chunk.checksum.clone());
    }
    let evidence = bare_evidence(f.key()).await;
    let run_id = evidence.evaluation_run_id.key();
    let completion = claimed.succeeded(last.as_ref(), evidence.clone());
    runner.complete(&completion).await.expect(200);

    let detail = job(f.key(), &job_id).await;
    assert_eq!(detail["archive"], Value::Null);
    let queries = ["limit=7", "limit=500", "attempt=1&limit=3"];
    let mut before = Vec::new();
    for query in queries {
        before.push(pages(f.key(), &job_id, query).await);
    }
    let bundle_before = bundle(f.key(), &job_id).await;
    let d1_before = d1_footprint(&job_id);

    let archived = archive(f.key(), &job_id).await.expect(200);
    assert_eq!(archived["state"], "pruned", "{archived}");
    assert_eq!(
        archived["bundleSha256"],
        sha256_hex(bundle_before.as_bytes())
    );
    assert_eq!(
        archived["bundleKey"],
        format!("bundles/{}", sha256_hex(bundle_before.as_bytes()))
    );
    assert_eq!(archived["bundleBytes"], bundle_before.len());
    assert_eq!(archived["streamChunks"], 23);
    assert_eq!(
        archived["streamHead"],
        last.as_ref().map(Sha256Hex::as_str).unwrap()
    );

    // Every read answers as before, now from R2.
    let after = job(f.key(), &job_id).await;
    assert_eq!(after["archive"], archived);
    assert_eq!(without_archive(after), without_archive(detail));
    for (query, pages_before) in queries.iter().zip(&before) {
        assert_eq!(
            &pages(f.key(), &job_id, query).await,
            pages_before,
            "{query}"
        );
    }
    let bundle_after = bundle(f.key(), &job_id).await;
    assert!(
        bundle_after == bundle_before,
        "the bundle changed when archived"
    );
    verify(&bundle_after, &job_id, runner.signing.secret.expose());

    // D1 keeps the job's archived row (migration 0018), holding the evaluation run its
    // completion took into custody (migration 0019), and nothing else.
    let d1_after = d1_footprint(&job_id);
    let rows: u64 = d1_after.iter().map(|(_, rows, _)| rows).sum();
    let bytes: u64 = d1_after.iter().map(|(_, _, bytes)| bytes).sum();
    let before_rows: u64 = d1_before.iter().map(|(_, rows, _)| rows).sum();
    eprintln!(
        "D1 before archiving: {d1_before:?}\nD1 after: {d1_after:?} ({rows} rows, {bytes} bytes)"
    );
    assert!(before_rows > 23, "{d1_before:?}");
    for (table, count, _) in &d1_after {
        let expected = match table.as_str() {
            "archived_jobs" => 1,
            _ => 0,
        };
        assert_eq!(*count, expected, "{table}: {d1_after:?}");
    }
    assert!(
        bytes <= 1024,
        "{bytes} bytes of D1 for an archived job: {d1_after:?}"
    );
    let held = d1_rows(&d1(&format!(
        "SELECT custody_run_id FROM archived_jobs WHERE id = {}",
        sql_text(&job_id)
    )));
    assert_eq!(held[0]["custody_run_id"], run_id.as_str(), "{held:?}");
    // Still held: another job's completion naming the run is refused, naming this job.
    let (other_runner, other) = f.claimed_job(0).await;
    let reply = other_runner
        .complete(&other.succeeded(None, evidence))
        .await;
    reply.expect_error(409, "EVIDENCE_ALREADY_ATTACHED");
    assert!(reply.text.contains(&job_id), "{reply:?}");

    // Archiving again changes nothing.
    assert_eq!(archive(f.key(), &job_id).await.expect(200), archived);
    assert!(bundle(f.key(), &job_id).await == bundle_before);
}

#[tokio::test]
async fn a_completion_after_archiving_is_counted_and_the_archived_bytes_stay() {
    let f = StagedPrompt::new(bootstrap_org("archive-late")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let job_id = claimed.job_id();
    let completion = claimed.succeeded(None, bare_evidence(f.key()).await);
    runner.complete(&completion).await.expect(200);
    let archived = archive(f.key(), &job_id).await.expect(200);
    let bundle_archived = bundle(f.key(), &job_id).await;

    // The same completion again (its answer was lost, say): a duplicate, counted on the job.
    let again = runner.complete(&completion).await.expect(200);
    assert_eq!(again["decision"], "duplicate", "{again}");
    assert_eq!(again["completionId"], Value::Null, "{again}");
    // Another result for the same attempt: a conflict, refused and counted.
    let other = Completion::seal(claimed.fields(
        CompletionStatus::Failed,
        Some(stable_json::hash(&json!({ "other": true }))),
        None,
        bare_evidence(f.key()).await,
    ))
    .to_json();
    runner
        .complete(&other)
        .await
        .expect_error(409, "COMPLETION_CONFLICT");

    let detail = job(f.key(), &job_id).await;
    assert_eq!(detail["unstoredDecisions"]["count"], 2, "{detail}");
    assert_eq!(detail["unstoredDecisions"]["lastDecision"], "conflict");
    assert_eq!(detail["completions"].as_array().map(Vec::len), Some(1));
    assert_eq!(detail["archive"], archived);
    assert!(
        bundle(f.key(), &job_id).await == bundle_archived,
        "a late completion changed the archived bundle"
    );
    // One row: the archived job, holding its run (migration 0019).
    let rows: u64 = d1_footprint(&job_id).iter().map(|(_, rows, _)| rows).sum();
    assert_eq!(rows, 1, "{:?}", d1_footprint(&job_id));
}

#[tokio::test]
async fn only_a_finished_job_of_the_callers_organization_is_archived_by_an_admin() {
    let f = StagedPrompt::new(bootstrap_org("archive-refusals")).await;
    let queued = f.new_job("archive-queued").await;
    archive(f.key(), &queued)
        .await
        .expect_error(409, "JOB_NOT_FINISHED");
    assert_eq!(job(f.key(), &queued).await["state"], "queued");
    archive(f.key(), "job_000000000000000000000000")
        .await
        .expect_error(404, "NOT_FOUND");
    let stranger = bootstrap_org("archive-stranger");
    archive(&stranger.admin_key, &queued)
        .await
        .expect_error(404, "NOT_FOUND");
    post(
        &format!("/api/remote-runners/jobs/{queued}/archive"),
        Some(f.key()),
        &json!({ "now": true }),
    )
    .await
    .expect_error(422, "UNKNOWN_FIELD");
    // The body is bounded before it is read (16 KiB), and must be a JSON object.
    post(
        &format!("/api/remote-runners/jobs/{queued}/archive"),
        Some(f.key()),
        &json!({ "pad": "x".repeat(17 * 1024) }),
    )
    .await
    .expect_error(413, "BODY_TOO_LARGE");
    post(
        &format!("/api/remote-runners/jobs/{queued}/archive"),
        Some(f.key()),
        &json!([1]),
    )
    .await
    .expect_error(400, "INVALID_BODY");
    let reader = new_api_key(
        f.key(),
        &json!({ "name": "reader", "scopes": ["runs:read"] }),
    )
    .await;
    archive(reader["apiKey"].as_str().expect("apiKey"), &queued)
        .await
        .expect_error(403, "FORBIDDEN");
}

#[tokio::test]
async fn a_bundle_larger_than_one_put_goes_up_in_parts_and_reads_back_whole() {
    let f = StagedPrompt::new(bootstrap_org("archive-parts")).await;
    let (runner, claimed) = f.claimed_job(1).await;
    let job_id = claimed.job_id();
    // 10 MiB of payload in 256 KiB chunks: past the 8 MiB of one put, two parts and a tail.
    let mut writer = claimed.writer();
    let mut last = None;
    for n in 0..40 {
        let payload = Value::String(format!("{n:08}{}", "p".repeat(256 * 1024 - 10)));
        let chunk = writer.next(ChunkKind::Log, payload, timestamp_now());
        runner.stream(&chunk.to_json()).await.expect(200);
        if n % 16 == 15 {
            runner.heartbeat(&claimed.claim_id(), 60).await.expect(200);
        }
        last = Some(chunk.checksum.clone());
    }
    let completion = claimed.succeeded(last.as_ref(), bare_evidence(f.key()).await);
    runner.complete(&completion).await.expect(200);
    let before = bundle(f.key(), &job_id).await;
    let pages_before = pages(f.key(), &job_id, "limit=500").await;
    assert!(pages_before.len() > 2, "{} pages", pages_before.len());

    let archived = archive(f.key(), &job_id).await.expect(200);
    assert_eq!(archived["bundleBytes"], before.len());
    assert!(before.len() > 8 * 1024 * 1024);
    assert_eq!(archived["bundleSha256"], sha256_hex(before.as_bytes()));
    let after = bundle(f.key(), &job_id).await;
    assert!(after == before, "the bundle changed when archived in parts");
    assert_eq!(pages(f.key(), &job_id, "limit=500").await, pages_before);
    verify(&after, &job_id, runner.signing.secret.expose());
}

#[tokio::test]
async fn the_cron_pass_archives_finished_jobs_whose_grace_is_over_and_leaves_the_rest() {
    let f = StagedPrompt::new(bootstrap_org("archive-cron")).await;
    let mut finished = Vec::new();
    for _ in 0..3 {
        let (runner, claimed) = f.claimed_job(1).await;
        let completion = claimed.succeeded(None, bare_evidence(f.key()).await);
        runner.complete(&completion).await.expect(200);
        finished.push(claimed.job_id());
    }
    // Two finished long ago (as jobs that finished before archiving existed did: their objects
    // hold no archive alarm), written so through D1 as an operator could; the third just now.
    // The oldest finish comes first in a pass, so other suites' jobs do not crowd these out.
    // 80 days ago: inside the default retention (90 days), or the same cron invocation's
    // retention pass would delete them as soon as they are archived.
    let old = &finished[..2];
    let ids = old
        .iter()
        .map(|id| sql_text(id))
        .collect::<Vec<_>>()
        .join(", ");
    let moved = d1_rows(&d1(&format!(
        "UPDATE jobs SET finished_at = {} WHERE id IN ({ids}) RETURNING id",
        now_ms() - 80 * 86_400_000
    )));
    assert_eq!(moved.len(), 2, "{moved:?}");
    let queued = f.new_job("archive-cron-queued").await;

    // Bounded: a pass takes up to 25 due jobs, these first.
    let mut archived = false;
    for _ in 0..5 {
        edgerunner_e2e::recovery::fire_cron().await;
        let states: Vec<Value> = archive_states(f.key(), old).await;
        if states.iter().all(|s| s == "pruned") {
            archived = true;
            break;
        }
    }
    assert!(archived, "the cron pass did not archive {old:?}");
    for id in old {
        // The archived row alone, holding the job's run (migration 0019).
        let rows: u64 = d1_footprint(id).iter().map(|(_, rows, _)| rows).sum();
        assert_eq!(rows, 1, "{id}: {:?}", d1_footprint(id));
    }
    // Inside its grace period, or not finished: untouched.
    assert_eq!(job(f.key(), &finished[2]).await["archive"], Value::Null);
    assert_eq!(job(f.key(), &queued).await["archive"], Value::Null);
    assert!(
        d1_footprint(&finished[2])
            .iter()
            .map(|(_, rows, _)| rows)
            .sum::<u64>()
            > 2
    );
}

/// The archive state of each of `jobs` (`null` when not archived).
async fn archive_states(bearer: &str, jobs: &[String]) -> Vec<Value> {
    let mut states = Vec::new();
    for id in jobs {
        states.push(job(bearer, id).await["archive"]["state"].clone());
    }
    states
}

#[tokio::test]
async fn a_retention_pass_cannot_move_the_clock_outside_a_local_test_server() {
    // This suite's server is not one (no EDGERUNNER_LOCAL_HOOKS): `asOf` is refused whole.
    let org = bootstrap_org("retention-as-of");
    let run = "/api/developer/retention/run";
    post(
        run,
        Some(&org.admin_key),
        &json!({ "asOf": "2099-01-01T00:00:00Z" }),
    )
    .await
    .expect_error(403, "LOCAL_HOOKS_ONLY");
    // At the server's own time a pass runs, and nothing of this organization is due.
    let pass = post(run, Some(&org.admin_key), &json!({}))
        .await
        .expect(200);
    assert_eq!(
        pass,
        json!({"expired": 0, "deleted": 0, "unfinished": 0, "more": false})
    );
}

#[tokio::test]
async fn an_archived_jobs_key_answers_an_enqueue_as_before_and_the_lists_show_it() {
    let f = StagedPrompt::new(bootstrap_org("archive-key")).await;
    let input = json!({ "question": "an archived key", "weight": lexical("0.25") });
    let body = enqueue_body(
        &unique("archived-key"),
        &f.release,
        "staging",
        &input,
        &requirements("prompt"),
    );
    let enqueued = enqueue(f.key(), &body).await.expect(201);
    let id = enqueued["id"].as_str().expect("an id").to_owned();
    cancel_job(f.key(), &id, "archived for the test")
        .await
        .expect(200);
    let archived = archive(f.key(), &id).await.expect(200);
    assert_eq!(archived["state"], "pruned", "{archived}");
    assert_eq!(
        d1_footprint(&id)
            .iter()
            .map(|(table, rows, _)| (table.as_str(), *rows))
            .filter(|(_, rows)| *rows > 0)
            .collect::<Vec<_>>(),
        vec![("archived_jobs", 1)],
        "its row moved to archived_jobs"
    );
    let detail = job(f.key(), &id).await;

    // The same key and intent: the archived job, as a replay answers it (the list's shape).
    let replay = enqueue(f.key(), &body).await.expect(200);
    assert_eq!(replay["id"], id.as_str(), "{replay}");
    assert_eq!(replay["state"], "cancelled", "{replay}");
    for field in [
        "idempotencyKey",
        "subject",
        "inputHash",
        "requirements",
        "createdAt",
        "finishedAt",
        "cancelReason",
    ] {
        assert_eq!(replay[field], detail[field], "{field}: {replay} / {detail}");
    }
    // The same key for another job: refused, as before the archive.
    let mut other = body.clone();
    other["input"] = json!({ "question": "another job" });
    enqueue(f.key(), &other)
        .await
        .expect_error(409, "IDEMPOTENCY_CONFLICT");

    // Listed (all states, and its own), counted, and its page's row is the replay's.
    let listed = get("/api/remote-runners/jobs?limit=50", f.key())
        .await
        .expect(200);
    let row = listed["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("listed: {listed}"));
    assert_eq!(row, replay);
    assert_eq!(listed["counts"]["cancelled"], 1, "{listed}");
    let cancelled = get("/api/remote-runners/jobs?state=cancelled&limit=50", f.key())
        .await
        .expect(200);
    assert_eq!(
        cancelled["jobs"].as_array().map(Vec::len),
        Some(1),
        "{cancelled}"
    );
}
