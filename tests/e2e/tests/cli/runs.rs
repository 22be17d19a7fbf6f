//! Real shell jobs from both identity models: output as a valid chain, a relative script, a key-pair runner approved.

use super::*;

#[tokio::test]
async fn a_bootstrap_token_runner_streams_real_shell_output_as_a_valid_chain() {
    let setup = Setup::new("bootstrap").await;
    let base = base_url();
    let (runner_id, token) = setup.register(2);
    let input = lexical(r#"{"label": "été ✨", "weight": 1.50, "tiny": 1e-07}"#);
    let ok = setup.enqueue(&input, &requirements("prompt")).await;
    let bad = setup
        .enqueue(&json!({"fail": true}), &requirements("prompt"))
        .await;
    let command = r#"echo "job=$EDGERUNNER_JOB_ID attempt=$EDGERUNNER_ATTEMPT"; cat "$EDGERUNNER_INPUT"; echo; test -f "$EDGERUNNER_ARTIFACT" && echo artifact-ok; if grep -q '"fail"' "$EDGERUNNER_INPUT"; then echo failing >&2; exit 3; fi; i=0; while [ $i -lt 60 ]; do echo "line $i"; i=$((i+1)); done; echo done >&2"#;
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &["--exec", command, "--exit-when-idle", "--batch-lines", "50"],
        &setup.env(&base, &runner_id, &token),
    );
    let status = runner.exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let completed: Vec<Value> = runner
        .events()
        .into_iter()
        .filter(|event| event["event"] == "job.completed")
        .collect();
    assert_eq!(completed.len(), 2, "{}", runner.log());

    // The successful job: its output, batched, chained and closed by the completion.
    let job_ok = job(&setup.org.admin_key, &ok).await;
    assert_eq!(job_ok["state"], "succeeded", "{job_ok}");
    let completion = accepted(&job_ok);
    assert_eq!(completion["status"], "succeeded");
    let (path, bundle) = setup.bundle(&ok);
    let payloads = payloads(&bundle);
    assert_eq!(payloads[0]["event"], "started", "{}", payloads[0]);
    let stdout = lines_of(&bundle, "stdout");
    assert_eq!(stdout[0], format!("job={ok} attempt=1"));
    let served: Value = serde_json::from_str(&stdout[1]).expect("the input file is JSON");
    assert_eq!(
        h(&served),
        h(&input),
        "the command read the input as enqueued"
    );
    assert_eq!(stdout[2], "artifact-ok");
    let expected: Vec<String> = (0..60).map(|i| format!("line {i}")).collect();
    assert_eq!(stdout[3..], expected[..]);
    assert_eq!(lines_of(&bundle, "stderr"), vec!["done".to_owned()]);
    let log_chunks: Vec<Vec<(String, String)>> = payloads.iter().filter_map(log_lines).collect();
    assert!(
        log_chunks.len() >= 2,
        "64 lines take more than one chunk of 50"
    );
    assert!(log_chunks.iter().all(|lines| lines.len() <= 50));
    let exit = exited(&bundle);
    assert_eq!(exit["exitCode"], 0);
    let stdout_bytes = format!("{}\n", stdout.join("\n"));
    let stdout_sha256 = sha256_hex(stdout_bytes.as_bytes());
    assert_eq!(exit["stdoutSha256"], stdout_sha256.as_str());
    assert_eq!(
        completion["resultHash"],
        h(&json!({"exitCode": 0, "stdoutSha256": stdout_sha256})).as_str(),
        "resultHash = H({{exitCode, stdoutSha256}})"
    );
    let last = bundle["stream"]
        .as_array()
        .and_then(|s| s.last())
        .expect("chunks");
    assert_eq!(completion["finalStreamChecksum"], last["checksum"]);
    let verified = setup.verify(&path, &[]);
    assert!(verified.status.success(), "{}", text(&verified));
    assert!(String::from_utf8_lossy(&verified.stdout).starts_with("OK job "));

    // Its evidence: a run the runner made, with the outcome recorded as a test result.
    let evidence = &completion["evidence"];
    let run_id = evidence["evaluationRunId"].as_str().expect("run id");
    let test_result = evidence["testResultIds"][0]
        .as_str()
        .expect("a test result");
    let run = get(
        &format!("/api/evidence/runs/{run_id}"),
        &setup.org.admin_key,
    )
    .await
    .expect(200);
    assert_eq!(run["testResults"][0]["id"], test_result);
    assert_eq!(run["testResults"][0]["status"], "passed");
    assert_eq!(run["attachedTo"]["jobId"], ok.as_str());

    // The failing job: exit 3 is `failed`, with its stderr streamed.
    let job_bad = job(&setup.org.admin_key, &bad).await;
    assert_eq!(job_bad["state"], "failed", "{job_bad}");
    assert_eq!(accepted(&job_bad)["status"], "failed");
    let (_, bundle) = setup.bundle(&bad);
    assert_eq!(exited(&bundle)["exitCode"], 3);
    assert_eq!(exited(&bundle)["ending"], "exited");
    assert!(lines_of(&bundle, "stderr").contains(&"failing".to_owned()));
}

#[tokio::test]
async fn exec_runs_a_relative_script_where_runner_start_was_invoked_with_the_job_dir_in_env() {
    use std::os::unix::fs::PermissionsExt as _;

    let setup = Setup::new("execdir").await;
    let base = base_url();
    let (runner_id, token) = setup.register(1);
    let job_id = setup
        .enqueue(&json!({"task": "relative"}), &requirements("prompt"))
        .await;
    // A project directory holding the evaluation script, as an operator would run it.
    let project = setup.scratch.path("project");
    std::fs::create_dir_all(&project).expect("project directory");
    let script = project.join("evaluate.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         set -e\n\
         echo \"cwd=$(pwd -P)\"\n\
         echo \"workdir=$EDGERUNNER_WORKDIR\"\n\
         test \"$(dirname \"$EDGERUNNER_INPUT\")\" = \"$EDGERUNNER_WORKDIR\"\n\
         test \"$(dirname \"$EDGERUNNER_ARTIFACT\")\" = \"$EDGERUNNER_WORKDIR\"\n\
         grep -q relative \"$EDGERUNNER_INPUT\"\n\
         echo scratch > \"$EDGERUNNER_WORKDIR/result.txt\"\n\
         echo evaluated\n",
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    let mut runner = RunnerProcess::start_in(
        &setup.scratch,
        Some(&project),
        &["--exec", "./evaluate.sh", "--exit-when-idle"],
        &setup.env(&base, &runner_id, &token),
    );
    let status = runner.exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let job = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(job["state"], "succeeded", "{job}\n{}", runner.log());
    assert_eq!(exited_of(&setup, &job_id)["exitCode"], 0);

    let (_, bundle) = setup.bundle(&job_id);
    let stdout = lines_of(&bundle, "stdout");
    assert_eq!(stdout.len(), 3, "{stdout:?}");
    let project_real = project.canonicalize().expect("canonical");
    assert_eq!(
        stdout[0],
        format!("cwd={}", project_real.display()),
        "the command ran where runner start was invoked"
    );
    let workdir = stdout[1]
        .strip_prefix("workdir=")
        .expect("EDGERUNNER_WORKDIR was printed");
    assert!(!workdir.is_empty(), "EDGERUNNER_WORKDIR was set");
    let workdir = Path::new(workdir);
    assert!(
        workdir.starts_with(setup.scratch.path("work")),
        "the job's own directory is in the runner's private one: {}",
        workdir.display()
    );
    assert!(!workdir.starts_with(&project), "{}", workdir.display());
    assert!(!workdir.exists(), "removed after the job");
    assert!(
        !project.join("result.txt").exists(),
        "the job's files went to its own directory"
    );
    assert_eq!(stdout[2], "evaluated");
}

fn exited_of(setup: &Setup, job_id: &str) -> Value {
    exited(&setup.bundle(job_id).1)
}

#[tokio::test]
async fn a_key_pair_runner_enrolls_waits_for_approval_then_runs_its_job() {
    let setup = Setup::new("keypair").await;
    let base = base_url();
    let run_id = evaluation_run(&setup.org.admin_key).await;
    let job_id = setup
        .enqueue(
            &json!({"evaluationRunId": run_id.to_json(), "task": "keypair"}),
            &requirements("prompt"),
        )
        .await;
    let config = setup.scratch.path("config/runner.json");
    let config_arg = config.to_str().expect("UTF-8").to_owned();
    let name = unique("cli-keypair");
    let enroll_args = [
        "runner",
        "enroll",
        "--server",
        base.as_str(),
        "--organization",
        setup.org.id.as_str(),
        "--config",
        config_arg.as_str(),
        "--name",
        name.as_str(),
        "--execution-kind",
        "prompt",
        "--runtime",
        RUNTIME,
        "--json",
    ];
    let output = run(&setup.scratch, &enroll_args, &[]);
    assert!(output.status.success(), "{}", text(&output));
    let enrolled: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        enrolled["runner"]["state"], "pending_approval",
        "{enrolled}"
    );
    assert_eq!(enrolled["keyCreated"], true);
    let runner_id = enrolled["runner"]["id"].as_str().expect("id").to_owned();
    let fingerprint = enrolled["fingerprint"]
        .as_str()
        .expect("fingerprint")
        .to_owned();
    let key_file = PathBuf::from(enrolled["keyFile"].as_str().expect("key file"));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&key_file), 0o600, "the key is owner-only");
    assert_eq!(mode(&config), 0o600, "the config is owner-only");
    let record = runner_record(&setup.org.admin_key, &runner_id).await;
    assert_eq!(
        record["fingerprint"],
        fingerprint.as_str(),
        "the admin sees the same fingerprint"
    );
    assert_eq!(record["identityModel"], "keypair");

    // The same key twice is refused, and the key is not replaced.
    let again = run(&setup.scratch, &enroll_args, &[]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already enrolled"),
        "{}",
        text(&again)
    );

    // It waits for approval, then claims, runs and completes with the job's own evidence.
    let mut runner = RunnerProcess::start(
        &setup.scratch,
        &[
            "--config",
            config_arg.as_str(),
            "--exec",
            "echo hello from $EDGERUNNER_JOB_ID",
            "--exit-when-idle",
        ],
        &[],
    );
    eventually(
        "the runner reports that it awaits approval",
        Duration::from_secs(30),
        || runner.has_event("runner.pending_approval"),
    )
    .await;
    assert_eq!(job(&setup.org.admin_key, &job_id).await["state"], "queued");
    let approved = admin(
        &setup.scratch,
        &setup.org,
        &[
            "runners",
            "approve",
            &runner_id,
            "--fingerprint",
            &fingerprint,
            "--reason",
            "fingerprint checked by e2e",
        ],
    );
    assert_eq!(approved["state"], "active", "{approved}");
    let status = runner.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {}", runner.log());
    let job = job(&setup.org.admin_key, &job_id).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let completion = accepted(&job);
    assert_eq!(completion["runnerId"], runner_id.as_str());
    assert_eq!(completion["evidence"]["evaluationRunId"], run_id.to_json());
    let (_, bundle) = setup.bundle(&job_id);
    assert_eq!(
        lines_of(&bundle, "stdout"),
        vec![format!("hello from {job_id}")]
    );

    // A key that others could read is not used.
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let refused = run(
        &setup.scratch,
        &["runner", "whoami", "--config", config_arg.as_str()],
        &[],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("others could read it"),
        "{}",
        text(&refused)
    );
}
