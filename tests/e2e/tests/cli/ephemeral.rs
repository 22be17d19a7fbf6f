//! Ephemeral runners (`--ephemeral`, registered ephemeral) and `--idle-exit`.

use super::*;

#[tokio::test]
async fn an_ephemeral_runner_takes_exactly_one_job_and_exits_0_whatever_its_outcome() {
    let setup = Setup::new("ephemeral").await;
    let base = base_url();
    // Declared capacity 3: --ephemeral takes one job all the same.
    let (runner_id, token) = setup.register(3);
    let env = setup.env(&base, &runner_id, &token);
    let first = setup
        .enqueue(&json!({"n": 1}), &requirements("prompt"))
        .await;
    let second = setup
        .enqueue(&json!({"n": 2}), &requirements("prompt"))
        .await;
    let mut runner =
        RunnerProcess::start(&setup.scratch, &["--exec", "exit 3", "--ephemeral"], &env);
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(
        status.success(),
        "exit 0 although its job failed: {status}: {}",
        runner.log()
    );
    let claimed = runner
        .events()
        .into_iter()
        .filter(|e| e["event"] == "job.claimed")
        .count();
    assert_eq!(claimed, 1, "{}", runner.log());
    assert_eq!(job(&setup.org.admin_key, &first).await["state"], "failed");
    assert_eq!(
        job(&setup.org.admin_key, &second).await["state"],
        "queued",
        "the next job is the next runner's"
    );
    let stopped = runner
        .events()
        .into_iter()
        .find(|e| e["event"] == "runner.stopped")
        .unwrap_or_else(|| panic!("no stop line: {}", runner.log()));
    assert_eq!(stopped["claimed"], 1, "{stopped}");
    assert_eq!(stopped["failed"], 1, "{stopped}");
}

#[tokio::test]
async fn a_runner_exits_0_once_no_job_came_for_its_idle_time_counted_from_its_last_job() {
    let setup = Setup::new("idle-exit").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let env = setup.env(&base, &runner_id, &token);
    // Queued before it starts: the runner runs it, then waits its idle time from its end.
    let queued = setup
        .enqueue(&json!({"task": "one"}), &requirements("prompt"))
        .await;
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo done", "--idle-exit", "2"],
        &env,
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert_eq!(
        job(&setup.org.admin_key, &queued).await["state"],
        "succeeded"
    );
    let events: Vec<String> = runner
        .events()
        .iter()
        .filter_map(|e| e["event"].as_str().map(str::to_owned))
        .collect();
    let completed = events
        .iter()
        .position(|e| e == "job.completed")
        .unwrap_or_else(|| panic!("the job completed: {}", runner.log()));
    let idle = events
        .iter()
        .position(|e| e == "runner.idle_exit")
        .unwrap_or_else(|| panic!("it left for being idle: {}", runner.log()));
    assert!(
        completed < idle,
        "idle only after its job: {}",
        runner.log()
    );
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "active", "left, not lost: {record}");
}

#[tokio::test]
async fn sigterm_hands_an_ephemeral_runners_job_back_at_once() {
    let setup = Setup::new("ephemeral-sigterm").await;
    let base = base_url();
    // Registered for one job as well: the hand-back spends its identity all the same.
    let (runner_id, token) = setup.register_with(&["--ephemeral"]);
    let env = setup.env(&base, &runner_id, &token);
    let given_back = setup
        .enqueue(&json!({"task": "give back"}), &requirements("prompt"))
        .await;
    let pid_file = setup.scratch.path("pid-ephemeral");
    let command = format!(
        "echo $$ > {}; while true; do sleep 0.2; done",
        pid_file.display()
    );
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &[
            "--exec",
            &command,
            "--ephemeral",
            "--idle-exit",
            "60",
            "--drain-timeout",
            "0",
            "--grace",
            "1",
        ],
        &env,
    );
    let pid = started_command(&pid_file).await;
    runner.signal("TERM");
    let status = runner.exit(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert!(runner.has_event("job.given_back"), "{}", runner.log());
    assert!(!pid_alive(&pid), "the command was stopped");
    handed_back(&setup.org, &given_back, &runner_id).await;
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "draining", "{record}");
    assert_eq!(record["activeClaims"], 0, "{record}");
    edgerunner_e2e::recovery::fire_cron().await;
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(record["state"], "revoked", "{record}");
    assert_eq!(
        job(&setup.org.admin_key, &given_back).await["state"],
        "queued",
        "its job waits for the next runner"
    );
}

#[tokio::test]
async fn a_runner_registered_ephemeral_takes_one_job_and_the_server_retires_it() {
    let setup = Setup::new("ephemeral-registered").await;
    let base = base_url();
    let key = setup.org.admin_key.clone();
    // One job needs a capacity of one, and the flag is a boolean.
    for body in [
        json!({"ephemeral": true, "maxConcurrentJobs": 2}),
        json!({"ephemeral": "yes"}),
    ] {
        let mut registration = json!({
            "name": unique("one-job"), "runnerKey": unique("one-job"),
            "capabilities": {"executionKinds": ["prompt"], "runtimes": [RUNTIME]},
        });
        for (field, value) in body.as_object().expect("an object") {
            registration[field] = value.clone();
        }
        post("/api/remote-runners", Some(&key), &registration)
            .await
            .expect_error(422, "INVALID_FIELD");
    }
    let (runner_id, token) = setup.register_with(&["--ephemeral"]);
    let record = runner_record(&key, &runner_id).await;
    assert_eq!(record["ephemeral"], true, "{record}");
    assert_eq!(record["maxConcurrentJobs"], 1, "{record}");
    // Beside its admin state: whether it talks to the server.
    assert_eq!(
        record["connection"],
        json!({"status": "never_connected", "since": null}),
        "{record}"
    );
    let first = setup
        .enqueue(&json!({"n": 1}), &requirements("prompt"))
        .await;
    let second = setup
        .enqueue(&json!({"n": 2}), &requirements("prompt"))
        .await;
    let env = setup.env(&base, &runner_id, &token);
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo done", "--ephemeral"],
        &env,
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert_eq!(job(&key, &first).await["state"], "succeeded");
    assert_eq!(job(&key, &second).await["state"], "queued");

    // Its grant drained it: spent, it is offered nothing, and no admin puts it back to work.
    let record = runner_record(&key, &runner_id).await;
    assert_eq!(record["state"], "draining", "{record}");
    assert_eq!(
        record["stateReason"], "ephemeral: took its one job",
        "{record}"
    );
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["actions"], json!(["rotate", "revoke"]), "{record}");
    assert_eq!(record["connection"]["status"], "online", "{record}");
    patch(
        &format!("/api/remote-runners/{runner_id}"),
        &key,
        &json!({"status": "active", "reason": "one more job"}),
    )
    .await
    .expect_error(409, "ILLEGAL_RUNNER_TRANSITION");

    // The cron pass retires it, with its event; its token opens no session again.
    edgerunner_e2e::recovery::fire_cron().await;
    let record = runner_record(&key, &runner_id).await;
    assert_eq!(record["state"], "revoked", "{record}");
    assert_eq!(
        record["stateReason"], "ephemeral: its one job ended",
        "{record}"
    );
    let events = get(&format!("/api/remote-runners/{runner_id}/events"), &key)
        .await
        .expect(200);
    let revoked: Vec<&Value> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "runner.revoked")
        .collect();
    assert_eq!(revoked.len(), 1, "{events}");
    assert_eq!(revoked[0]["actor"], "system:cron", "{events}");
    let mut again = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo again", "--ephemeral"],
        &env,
    );
    let status = again.exit(Duration::from_secs(60)).await;
    assert!(
        !status.success(),
        "a revoked runner started: {}",
        again.log()
    );
    assert_eq!(job(&key, &second).await["state"], "queued");

    // Not seen for 20 minutes (moved back here): offline since its last sight.
    let moved = d1_rows(&d1(&format!(
        "UPDATE runners SET last_seen_at = last_seen_at - 20 * 60000 WHERE id = {} RETURNING id",
        sql_text(&runner_id)
    )));
    assert_eq!(moved.len(), 1, "{moved:?}");
    let record = runner_record(&key, &runner_id).await;
    assert_eq!(record["connection"]["status"], "offline", "{record}");
    assert_eq!(
        record["connection"]["since"], record["lastSeenAt"],
        "{record}"
    );

    // Its record stays for its day; once its job is archived and the day is over (moved back
    // here), the cron pass deletes it.
    edgerunner_e2e::archive::archive(&key, &first)
        .await
        .expect(200);
    edgerunner_e2e::recovery::fire_cron().await;
    assert_eq!(
        get_runner(&key, &runner_id).await.status,
        200,
        "kept for its day"
    );
    let moved = d1_rows(&d1(&format!(
        "UPDATE runners SET revoked_at = revoked_at - 2 * 86400000 WHERE id = {} RETURNING id",
        sql_text(&runner_id)
    )));
    assert_eq!(moved.len(), 1, "{moved:?}");
    edgerunner_e2e::recovery::fire_cron().await;
    assert_eq!(get_runner(&key, &runner_id).await.status, 404, "deleted");

    // For a pod's init container: the identity as files, the token never printed.
    use std::os::unix::fs::PermissionsExt as _;
    let dir = setup.scratch.path("identity");
    std::fs::create_dir_all(&dir).expect("identity dir");
    let register = registration(&[
        "--ephemeral",
        "--identity-dir",
        dir.to_str().expect("UTF-8 path"),
    ]);
    let register: Vec<&str> = register.iter().map(String::as_str).collect();
    let answer = admin(&setup.scratch, &setup.org, &register);
    assert_eq!(answer.get("bootstrapToken"), None, "{answer}");
    let id = std::fs::read_to_string(dir.join("runner-id")).expect("runner-id");
    assert_eq!(answer["runner"]["id"], id.as_str(), "{answer}");
    assert_eq!(answer["runner"]["ephemeral"], true, "{answer}");
    let token_file = dir.join("bootstrap-token");
    let mode = std::fs::metadata(&token_file)
        .expect("token")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let whoami = run(
        &setup.scratch,
        &[
            "runner",
            "whoami",
            "--server",
            &base,
            "--runner-id",
            &id,
            "--bootstrap-token-file",
            token_file.to_str().expect("UTF-8 path"),
        ],
        &[],
    );
    assert!(whoami.status.success(), "{}", text(&whoami));
    // An identity is never overwritten, and nothing is registered then.
    let count = |answer: Value| answer["runners"].as_array().map(Vec::len);
    let before = count(
        get("/api/remote-runners?limit=1000", &key)
            .await
            .expect(200),
    );
    let mut again = vec!["admin", "--server", base.as_str(), "--json"];
    again.extend_from_slice(&register);
    let refused = run(&setup.scratch, &again, &[("EDGERUNNER_API_KEY", &key)]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("holds an identity already"),
        "{}",
        text(&refused)
    );
    let after = count(
        get("/api/remote-runners?limit=1000", &key)
            .await
            .expect(200),
    );
    assert_eq!(before, after);
}
