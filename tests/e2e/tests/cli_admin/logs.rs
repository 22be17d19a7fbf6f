//! `admin jobs logs` following a running job.

use super::*;

#[tokio::test]
async fn logs_follow_prints_a_running_jobs_lines_in_order_and_exits_zero_when_it_succeeds() {
    let org = bootstrap_org("cli-admin-logs-ok");
    let scratch = Scratch::new("logs-ok");
    let mut job = RunningJob::start(&org).await;
    let id = job.id();
    job.send(
        ChunkKind::Log,
        json!({ "event": "started", "command": "./evaluate.sh", "wallSeconds": 120 }),
    )
    .await;
    job.lines(&[
        ("stdout", "out 1"),
        ("stderr", "err 1"),
        ("stdout", "out 2"),
    ])
    .await;

    let mut follow = Background::start(
        &org,
        &scratch,
        &["jobs", "logs", &id, "--follow", "--interval", "0.2"],
    );
    // What is stored already is printed, while the job still runs.
    follow
        .until("the first lines", Duration::from_secs(20), |out, err| {
            out.contains("out 2") && err.contains("err 1")
        })
        .await;

    // Without --follow, a running job prints what is there and exits 3 (not finished).
    let snapshot = run(&org, &["jobs", "logs", &id]);
    assert_eq!(snapshot.status.code(), Some(3), "{}", shown(&snapshot));
    assert_eq!(stdout(&snapshot), "out 1\nout 2\n", "{}", shown(&snapshot));
    assert_eq!(
        stderr(&snapshot),
        "[attempt 1] started: ./evaluate.sh\nerr 1\n",
        "{}",
        shown(&snapshot)
    );

    // New chunks reach the follower as they are stored.
    let step: Value = serde_json::from_str(r#"{"step": 1, "score": 0.50}"#).expect("JSON");
    job.send(ChunkKind::Trajectory, step).await;
    // The runner's compact shape after the one-object-per-line shape: both read alike.
    job.segments(&[("stdout", "out 3"), ("stderr", "err 2")])
        .await;
    follow
        .until("the later lines", Duration::from_secs(20), |out, err| {
            out.contains("out 3") && err.contains("err 2")
        })
        .await;
    job.send(
        ChunkKind::Log,
        json!({ "event": "exited", "ending": "exited", "exitCode": 0, "signal": null,
                "killed": false, "durationMs": 42 }),
    )
    .await;
    job.complete(&org, CompletionStatus::Succeeded).await;

    let status = follow.exit(Duration::from_secs(20)).await;
    assert_eq!(
        status.code(),
        Some(0),
        "succeeded: {}\n{}",
        follow.out(),
        follow.err()
    );
    assert_eq!(
        follow.out(),
        "out 1\nout 2\n[trajectory] {\"score\":0.50,\"step\":1}\nout 3\n",
        "stdout: the job's stdout and trajectory, in order, each once"
    );
    assert_eq!(
        follow.err(),
        format!(
            "[attempt 1] started: ./evaluate.sh\nerr 1\nerr 2\n\
             [attempt 1] exited: exitCode=0 · 42 ms\n[job {id}] succeeded\n"
        ),
        "stderr: the job's stderr and the runner's events, in order, each once"
    );

    // `--json`: one object per line or chunk, in stream order, all on stdout.
    let output = run(&org, &["--json", "jobs", "logs", &id]);
    assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
    let objects: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let summary: Vec<(u64, String)> = objects
        .iter()
        .map(|o| {
            let what = match (&o["stream"], &o["event"]) {
                (Value::String(stream), _) => {
                    format!("{stream}:{}", o["line"].as_str().unwrap_or(""))
                }
                (_, Value::String(event)) => format!("event:{event}"),
                _ => format!("{}:{}", o["kind"].as_str().unwrap_or(""), o["payload"]),
            };
            (o["sequence"].as_u64().expect("sequence"), what)
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, "event:started".to_owned()),
            (1, "stdout:out 1".to_owned()),
            (1, "stderr:err 1".to_owned()),
            (1, "stdout:out 2".to_owned()),
            (2, "trajectory:{\"score\":0.50,\"step\":1}".to_owned()),
            (3, "stdout:out 3".to_owned()),
            (3, "stderr:err 2".to_owned()),
            (4, "event:exited".to_owned()),
        ],
        "{}",
        shown(&output)
    );
    assert!(objects.iter().all(|o| o["attempt"] == 1), "{objects:?}");

    // One attempt's stream: attempt 1 is all of it, attempt 2 never ran.
    let first = run(&org, &["jobs", "logs", &id, "--attempt", "1"]);
    assert_eq!(stdout(&first), follow.out(), "{}", shown(&first));
    let second = run(&org, &["jobs", "logs", &id, "--attempt", "2"]);
    assert_eq!(second.status.code(), Some(0), "{}", shown(&second));
    assert_eq!(stdout(&second), "", "{}", shown(&second));

    // Archived (its rows leave D1 for R2, issue 40), the job's logs read exactly as before.
    let plain = run(&org, &["jobs", "logs", &id]);
    let archived = post(
        &format!("/api/remote-runners/jobs/{id}/archive"),
        Some(&org.admin_key),
        &json!({}),
    )
    .await
    .expect(200);
    assert_eq!(archived["state"], "pruned", "{archived}");
    let again = run(&org, &["jobs", "logs", &id]);
    assert_eq!(again.status.code(), Some(0), "{}", shown(&again));
    assert_eq!(stdout(&again), stdout(&plain), "{}", shown(&again));
    assert_eq!(stderr(&again), stderr(&plain), "{}", shown(&again));
    let json_again = run(&org, &["--json", "jobs", "logs", &id]);
    assert_eq!(
        stdout(&json_again),
        stdout(&output),
        "{}",
        shown(&json_again)
    );
}

#[tokio::test]
async fn logs_follow_exits_one_when_the_job_fails() {
    let org = bootstrap_org("cli-admin-logs-failed");
    let scratch = Scratch::new("logs-failed");
    let mut job = RunningJob::start(&org).await;
    let id = job.id();
    let mut follow = Background::start(
        &org,
        &scratch,
        &["jobs", "logs", &id, "--follow", "--interval", "0.2"],
    );
    job.lines(&[("stderr", "Traceback: boom"), ("stdout", "partial")])
        .await;
    follow
        .until("the lines", Duration::from_secs(20), |out, err| {
            out.contains("partial") && err.contains("boom")
        })
        .await;
    job.lines(&[("stderr", "last words")]).await;
    job.complete(&org, CompletionStatus::Failed).await;

    let status = follow.exit(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(1), "failed: {}", follow.err());
    assert_eq!(follow.out(), "partial\n");
    assert_eq!(
        job_lines(&follow.err()),
        vec!["Traceback: boom", "last words"],
        "{}",
        follow.err()
    );
    assert!(
        follow.err().ends_with(&format!("[job {id}] failed\n")),
        "{}",
        follow.err()
    );

    // Read again after the end: the same lines, the same status.
    let again = run(&org, &["jobs", "logs", &id]);
    assert_eq!(again.status.code(), Some(1), "{}", shown(&again));
    assert_eq!(stdout(&again), "partial\n");

    // Another organization's job, or none at all: a clear refusal.
    let other = bootstrap_org("cli-admin-logs-other");
    let foreign = run(&other, &["jobs", "logs", &id]);
    assert_eq!(foreign.status.code(), Some(1), "{}", shown(&foreign));
    assert!(
        stderr(&foreign).contains("404 NOT_FOUND"),
        "{}",
        shown(&foreign)
    );
}

#[tokio::test]
async fn stream_pages_carry_the_jobs_state_as_of_the_page() {
    let org = bootstrap_org("cli-admin-stream-state");
    let mut job = RunningJob::start(&org).await;
    let id = job.id();
    let page = |after: &str| format!("/api/remote-runners/jobs/{id}/stream?after={after}");
    let read = get(&page("0.-1"), &org.admin_key).await.expect(200);
    assert_eq!(read["state"], "running", "{read}");
    assert_eq!(read["dispatchAttempt"], 1, "{read}");
    assert_eq!(read["chunks"], json!([]), "{read}");
    assert_eq!(read["cursor"], "0.-1", "{read}");

    job.lines(&[("stdout", "x")]).await;
    job.complete(&org, CompletionStatus::Succeeded).await;
    let read = get(&page("0.-1"), &org.admin_key).await.expect(200);
    assert_eq!(read["state"], "succeeded", "{read}");
    assert_eq!(read["more"], false, "{read}");
    assert_eq!(read["cursor"], "1.0", "{read}");
    let after = get(&page("1.0"), &org.admin_key).await.expect(200);
    assert_eq!(after["chunks"], json!([]), "{after}");
    assert_eq!(after["state"], "succeeded", "{after}");
}
