//! A job cancelled mid-run, one over its wall time, and `verify` of real and tampered bundles.

use super::*;

#[tokio::test]
async fn a_job_cancelled_mid_run_is_terminated_and_recorded_cancelled() {
    let setup = Setup::new("cancel").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let job_id = setup
        .enqueue(&json!({"task": "cancel"}), &requirements("prompt"))
        .await;
    let pid_file = setup.scratch.path("pid");
    // Ignores SIGTERM, so the runner must kill it after the grace period.
    let command = format!(
        "trap '' TERM; echo $$ > {}; echo started; while true; do sleep 0.2; done",
        pid_file.display()
    );
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &[
            "--exec",
            &command,
            "--exit-when-idle",
            "--heartbeat-interval",
            "0.5",
            "--grace",
            "1",
        ],
        &setup.env(&base, &runner_id, &token),
    );
    let pid = started_command(&pid_file).await;
    assert!(pid_alive(&pid));
    let cancelled_at = Instant::now();
    let answer = admin(
        &setup.scratch,
        &setup.org,
        &[
            "jobs",
            "cancel",
            &job_id,
            "--reason",
            "e2e: no longer needed",
        ],
    );
    assert_eq!(answer["state"], "cancel_requested", "{answer}");
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(20),
        "cancellation surfaced promptly"
    );
    assert!(!pid_alive(&pid), "the command was terminated");

    let job = job_in_state(&setup.org, &job_id, &["cancelled"], Duration::from_secs(10)).await;
    assert_eq!(accepted(&job)["status"], "cancelled");
    let (path, bundle) = setup.bundle(&job_id);
    let exit = exited(&bundle);
    assert_eq!(exit["ending"], "cancelled", "{exit}");
    assert_eq!(
        exit["killed"], true,
        "SIGTERM was ignored, so it was killed: {exit}"
    );
    assert_eq!(exit["cancelReason"], "e2e: no longer needed");
    assert_eq!(lines_of(&bundle, "stdout"), vec!["started".to_owned()]);
    let verified = setup.verify(&path, &[]);
    assert!(verified.status.success(), "{}", text(&verified));
}

#[tokio::test]
async fn a_job_over_its_wall_time_is_stopped_and_reported_failed() {
    let setup = Setup::new("walltime").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let job_id = setup
        .enqueue(&json!({"task": "slow"}), &requirements_with_wall(2))
        .await;
    let pid_file = setup.scratch.path("pid");
    let command = format!(
        "echo $$ > {}; echo sleeping; sleep 30; echo never",
        pid_file.display()
    );
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", &command, "--exit-when-idle", "--grace", "1"],
        &setup.env(&base, &runner_id, &token),
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let pid = std::fs::read_to_string(&pid_file).expect("the command ran");
    assert!(!pid_alive(&pid), "the command was stopped");

    let job = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(job["state"], "failed", "{job}");
    assert_eq!(accepted(&job)["status"], "failed");
    let (_, bundle) = setup.bundle(&job_id);
    let exit = exited(&bundle);
    assert_eq!(exit["ending"], "wall_time_exceeded", "{exit}");
    assert_eq!(exit["exitCode"], Value::Null, "ended by a signal: {exit}");
    let duration = exit["durationMs"].as_u64().expect("duration");
    assert!(
        (2000..15_000).contains(&duration),
        "stopped at the limit: {exit}"
    );
    assert_eq!(lines_of(&bundle, "stdout"), vec!["sleeping".to_owned()]);
}

#[tokio::test]
async fn verify_accepts_a_real_bundle_and_names_the_broken_link_in_a_tampered_one() {
    let setup = Setup::new("verify").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let job_id = setup
        .enqueue(&json!({"task": "verify"}), &requirements("prompt"))
        .await;
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", "echo one; echo two", "--exit-when-idle"],
        &setup.env(&base, &runner_id, &token),
    );
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let (path, bundle) = setup.bundle(&job_id);
    assert!(
        bundle["stream"].as_array().map_or(0, Vec::len) >= 3,
        "{bundle}"
    );

    let verified = setup.verify(&path, &[]);
    assert!(verified.status.success(), "{}", text(&verified));
    // With the runner's job-signing secret, the envelope's HMAC is checked too.
    let session = jobs::Runner::connect(&runner_id, &token).await;
    let secret = session.signing.secret.expose().to_owned();
    let secret_file = setup.scratch.path("signing-secret");
    std::fs::write(&secret_file, format!("{secret}\n")).expect("write the secret");
    let signed = setup.verify(
        &path,
        &[
            "--signing-secret-file",
            secret_file.to_str().expect("UTF-8"),
        ],
    );
    assert!(signed.status.success(), "{}", text(&signed));
    // On the command line, where every local user reads it: refused, and the secret unused.
    let refused = setup.verify(&path, &["--signing-secret", &secret]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--signing-secret-file"),
        "{}",
        text(&refused)
    );
    assert!(
        String::from_utf8_lossy(&signed.stdout).contains("1 signature verified"),
        "{}",
        text(&signed)
    );
    let json_report = setup.verify(&path, &["--json"]);
    let report: Value = serde_json::from_slice(&json_report.stdout).expect("JSON report");
    assert_eq!(report["valid"], true, "{report}");

    // A forged log chunk, re-hashed so that it is consistent in itself: the next link breaks.
    let mut forged = bundle.clone();
    forged["stream"][1]["payload"]["segments"][0]["text"] = "forged\n".into();
    let mut chunk = StreamChunk::from_json(&forged["stream"][1]).expect("a chunk");
    chunk.payload_hash = payload_hash(&chunk.payload);
    chunk.checksum = chunk.expected_checksum();
    forged["stream"][1] = chunk.to_json();
    let forged_path = setup.scratch.path("forged.json");
    std::fs::write(&forged_path, forged.to_string()).expect("write");
    let refused = setup.verify(&forged_path, &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(stdout.starts_with("FAILED job "), "{}", text(&refused));
    assert!(
        stdout.contains(
            "stream attempt 1 sequence 2: previousChecksum does not match sequence 1's checksum"
        ),
        "{}",
        text(&refused)
    );

    // A changed envelope is named by its claim.
    let mut altered = bundle.clone();
    altered["claims"][0]["signedJob"]["envelope"]["inputHash"] =
        stable_json::hash(&json!("another input")).as_str().into();
    let altered_path = setup.scratch.path("altered.json");
    std::fs::write(&altered_path, altered.to_string()).expect("write");
    let refused = setup.verify(&altered_path, &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let claim_id = bundle["claims"][0]["id"].as_str().expect("claim id");
    assert!(
        String::from_utf8_lossy(&refused.stdout)
            .contains(&format!("claim {claim_id} (attempt 1): payloadHash ")),
        "{}",
        text(&refused)
    );
}
