//! SIGTERM drains then hands back, a restart after SIGKILL, a completion refused for its evidence.

use super::*;

#[tokio::test]
async fn sigterm_drains_running_work_and_a_second_signal_gives_it_back() {
    let setup = Setup::new("shutdown").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let env = setup.env(&base, &runner_id, &token);

    // First: SIGTERM while a job runs lets it finish and complete, then the runner exits.
    let finishing = setup
        .enqueue(&json!({"task": "finish"}), &requirements("prompt"))
        .await;
    let pid_file = setup.scratch.path("pid-finishing");
    let command = format!("echo $$ > {}; sleep 2; echo finished", pid_file.display());
    let mut runner = RunnerProcess::start(&setup.scratch, &["--exec", &command], &env);
    eventually("the first command starts", Duration::from_secs(60), || {
        pid_file.exists()
    })
    .await;
    runner.signal("TERM");
    let status = runner.exit(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert!(runner.has_event("runner.draining"), "{}", runner.log());
    let finished = job(&setup.org.admin_key, &finishing).await;
    assert_eq!(
        finished["state"], "succeeded",
        "drained, not abandoned: {finished}"
    );

    // Then: a second signal stops the running command and gives the job back uncompleted;
    // its lease lapses and the server requeues it.
    let given_back = setup
        .enqueue(&json!({"task": "give back"}), &requirements("prompt"))
        .await;
    let pid_file = setup.scratch.path("pid-stubborn");
    let command = format!(
        "trap '' TERM; echo $$ > {}; while true; do sleep 0.2; done",
        pid_file.display()
    );
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &[
            "--exec",
            &command,
            "--grace",
            "1",
            "--lease-seconds",
            "15",
            "--heartbeat-interval",
            "2",
        ],
        &env,
    );
    let pid = started_command(&pid_file).await;
    runner.signal("TERM");
    eventually("the runner drains", Duration::from_secs(10), || {
        runner.has_event("runner.draining")
    })
    .await;
    assert!(pid_alive(&pid), "draining lets the job run");
    runner.signal("TERM");
    let status = runner.exit(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert!(runner.has_event("job.given_back"), "{}", runner.log());
    assert!(!pid_alive(&pid), "the command was stopped");
    // Handed back before the process exited: queued now, not after its 15 s lease, and the
    // runner is not marked lost.
    let requeued = handed_back(&setup.org, &given_back, &runner_id).await;
    assert_eq!(
        requeued["dispatchAttempt"], 1,
        "requeued for a new attempt: {requeued}"
    );
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active", "not lost: {record}");
}

#[tokio::test]
async fn a_runner_restarted_after_sigkill_hands_back_its_old_claim_and_claims_again() {
    let setup = Setup::new("restart").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let env = setup.env(&base, &runner_id, &token);
    let job_id = setup
        .enqueue(&json!({"task": "restart"}), &requirements("prompt"))
        .await;

    // The first process takes the job and is killed mid-run; its command goes with it.
    let pid_file = setup.scratch.path("pid-killed");
    let first_command = format!(
        "echo $$ > {}; while true; do sleep 0.2; done",
        pid_file.display()
    );
    let mut first = RunnerProcess::start(
        &setup.scratch,
        &["--exec", &first_command, "--lease-seconds", "120"],
        &env,
    );
    eventually("the first command starts", Duration::from_secs(60), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|pid| !pid.trim().is_empty())
    })
    .await;
    let pid = std::fs::read_to_string(&pid_file).expect("pid");
    first.signal("KILL");
    first.exit(Duration::from_secs(10)).await;
    let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
    let held = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(
        held["state"], "running",
        "the killed process still holds it: {held}"
    );

    // The second process, same identity and capacity 1: it hands the old claim back, claims
    // the job again at attempt 2 and completes it, long before the 120 s lease would lapse.
    let mut second = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo second", "--max-jobs", "1"],
        &env,
    );
    let status = second.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", second.log());
    let events = second.events();
    let handed = events
        .iter()
        .position(|e| e["event"] == "claim.handed_back")
        .unwrap_or_else(|| panic!("no hand-back: {}", second.log()));
    let claimed = events
        .iter()
        .position(|e| e["event"] == "job.claimed")
        .unwrap_or_else(|| panic!("no claim: {}", second.log()));
    assert!(
        handed < claimed,
        "hand back first, then claim: {}",
        second.log()
    );
    assert!(
        !events.iter().any(|e| e["code"] == "RUNNER_AT_CAPACITY"),
        "the restart never met its own old claim's capacity: {}",
        second.log()
    );
    let done = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["dispatchAttempt"], 2, "{done}");
    let timeline = done["events"].as_array().expect("events");
    let released: Vec<&Value> = timeline
        .iter()
        .filter(|e| e["type"] == "job.released")
        .collect();
    assert_eq!(released.len(), 1, "{done}");
    assert_eq!(released[0]["attempt"], 1, "{done}");
    assert!(
        released[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("restarted")),
        "{done}"
    );
    assert!(
        !timeline.iter().any(|e| e["type"] == "job.lease_lost"),
        "no lease had to lapse: {done}"
    );
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active", "never lost: {record}");
}

#[tokio::test]
async fn a_completion_refused_for_its_evidence_is_reported_and_the_claim_handed_back() {
    let setup = Setup::new("evidence-refused").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let env = setup.env(&base, &runner_id, &token);
    // Two jobs naming the same evaluation run: the first completion takes it into custody, so
    // the second one's completion is refused.
    let run = evaluation_run(&setup.org.admin_key).await;
    let first = setup
        .enqueue(
            &json!({"n": 1, "evaluationRunId": run.to_json()}),
            &requirements("prompt"),
        )
        .await;
    let second = setup
        .enqueue(
            &json!({"n": 2, "evaluationRunId": run.to_json()}),
            &requirements("prompt"),
        )
        .await;
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo done", "--max-jobs", "2"],
        &env,
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert_eq!(
        job(&setup.org.admin_key, &first).await["state"],
        "succeeded"
    );

    let refused = runner
        .events()
        .into_iter()
        .find(|e| e["event"] == "job.completion_failed")
        .unwrap_or_else(|| panic!("the refusal is reported: {}", runner.log()));
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("EVIDENCE_ALREADY_ATTACHED") && reason.contains(&first),
        "the refusal says whose custody the run is in: {refused}"
    );
    assert!(reason.contains("handed back"), "{refused}");
    let requeued = job(&setup.org.admin_key, &second).await;
    assert_eq!(
        requeued["state"], "queued",
        "handed back, not held: {requeued}"
    );
    assert!(
        requeued["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["type"] == "job.released"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("EVIDENCE_ALREADY_ATTACHED"))),
        "{requeued}"
    );
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["activeClaims"], 0, "its capacity is free: {record}");
}
