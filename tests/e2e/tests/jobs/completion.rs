//! Completion refusals that store nothing, evidence custody, and evidence made by the runner holding the job.

use super::*;

/// The job still runs, with no completion stored and no evidence attached.
async fn assert_untouched(key: &str, job_id: &str, why: &str) {
    let stored = job(key, job_id).await;
    assert_eq!(stored["state"], "running", "{why}: {stored}");
    assert!(
        array_of(&stored, "completions").is_empty(),
        "{why}: a refused completion was stored: {stored}"
    );
    assert!(
        array_of(&stored, "evidence").is_empty(),
        "{why}: evidence attached: {stored}"
    );
}

/// Refusals checked against API.md. A request that was not refused at all fails the test at
/// once (what follows would be meaningless); a refusal with another status or code is recorded,
/// and every such mismatch is reported together at the end.
#[derive(Default)]
struct Refusals(Vec<String>);

impl Refusals {
    fn check(&mut self, why: &str, reply: &Reply, status: u16, code: Option<&str>) {
        assert!(
            reply.status >= 400,
            "{why}: not refused (API.md: {status} {code:?}): {reply:?}"
        );
        let body = reply.json();
        let got = body["error"]["code"].as_str();
        assert!(got.is_some(), "{why}: not an error body: {reply:?}");
        if reply.status != status || code.is_some_and(|code| got != Some(code)) {
            self.0.push(format!(
                "{why}: API.md says {status} {}, the server answered {reply:?}",
                code.unwrap_or("(any code)")
            ));
        }
    }

    fn assert_none(self) {
        assert!(
            self.0.is_empty(),
            "refusals that differ from API.md:\n  {}",
            self.0.join("\n  ")
        );
    }
}

#[tokio::test]
async fn completion_refusals_store_nothing() {
    let f = StagedPrompt::new(org("jobs-complete").await).await;
    let key = f.key().to_owned();
    let mut first_runner = f.runner(1).await;
    let mut second_runner = f.runner(1).await;
    let mut refusals = Refusals::default();

    f.enqueue(&json!({ "case": 1 })).await;
    let first = claim_running(&mut first_runner).await;
    let first_job = first.job_id();
    let mut writer = first.writer();
    let c0 = writer.next(ChunkKind::Log, json!({ "n": 0 }), timestamp_now());
    let c1 = writer.next(ChunkKind::Trajectory, json!({ "n": 1 }), timestamp_now());
    for (n, chunk) in [&c0, &c1].into_iter().enumerate() {
        expect_chunk_accepted(
            &first_runner.stream(&chunk.to_json()).await,
            n as u64,
            &chunk.checksum,
        );
    }
    let evidence = full_evidence(&key).await;

    // The final stream checksum must be the last stored one.
    for (why, final_checksum) in [
        (
            "final checksum of an earlier chunk",
            Some(c0.checksum.clone()),
        ),
        ("final checksum null after two chunks", None),
        (
            "final checksum of no chunk",
            Some(stable_json::hash(&json!("x"))),
        ),
    ] {
        let completion = Completion::seal(first.fields(
            CompletionStatus::Succeeded,
            Some(stable_json::hash(&json!("result"))),
            final_checksum,
            evidence.clone(),
        ));
        let reply = first_runner.complete(&completion.to_json()).await;
        refusals.check(
            why,
            &reply,
            409,
            Some("COMPLETION_STREAM_CHECKSUM_MISMATCH"),
        );
        assert_untouched(&key, &first_job, why).await;
    }

    // The input hash must be the job's.
    let mut fields = first.fields(
        CompletionStatus::Succeeded,
        Some(stable_json::hash(&json!("result"))),
        Some(c1.checksum.clone()),
        evidence.clone(),
    );
    fields.input_hash = stable_json::hash(&json!({ "case": 2 }));
    let reply = first_runner
        .complete(&Completion::seal(fields).to_json())
        .await;
    refusals.check(
        "wrong input hash",
        &reply,
        409,
        Some("COMPLETION_INPUT_HASH_MISMATCH"),
    );
    assert_untouched(&key, &first_job, "wrong input hash").await;

    // The checksum must cover the fields.
    let mut unsealed = first.succeeded(Some(&c1.checksum), evidence.clone());
    unsealed["completionChecksum"] = json!(stable_json::hash(&json!("forged")).as_str());
    let reply = first_runner.complete(&unsealed).await;
    refusals.check("completion checksum mismatch", &reply, 422, None);
    assert_untouched(&key, &first_job, "bad checksum").await;

    // Evidence must exist and be in the named run: a row of another run, a row that does not
    // exist, a run that does not exist, another organization's run.
    let other_run = evaluation_run(&key).await;
    let stray = test_result(&key, &other_run).await;
    let mut wrong_run = evidence.clone();
    wrong_run.test_result_ids.push(stray);
    let mut missing_row = evidence.clone();
    missing_row.model_call_ids = vec![EvidenceId::Text("mc_does_not_exist".into())];
    let mut missing_run = bare_evidence(&key).await;
    missing_run.evaluation_run_id = EvidenceId::Text("run_does_not_exist".into());
    let foreign = org("jobs-complete-foreign").await;
    let foreign_run = bare_evidence(&foreign.admin_key).await;
    for (why, evidence) in [
        ("a test result of another run", wrong_run),
        ("a model call that does not exist", missing_row),
        ("an evaluation run that does not exist", missing_run),
        ("another organization's evaluation run", foreign_run),
    ] {
        let completion = first.succeeded(Some(&c1.checksum), evidence);
        let reply = first_runner.complete(&completion).await;
        refusals.check(why, &reply, 422, Some("EVIDENCE_NOT_IN_RUN"));
        assert_untouched(&key, &first_job, why).await;
    }

    // Control: the same completion, every defect removed, is accepted.
    let completion = first.succeeded(Some(&c1.checksum), evidence.clone());
    let decision = first_runner.complete(&completion).await.expect(200);
    assert_eq!(decision["decision"], "accepted", "{decision}");
    let completion_id = str_of(&decision, "completionId").to_owned();
    let done = job(&key, &first_job).await;
    assert_eq!(attached_evidence(&done, &completion_id), rows(&evidence));

    // A second job may not take custody of the first job's evidence.
    f.enqueue(&json!({ "case": 2 })).await;
    let second = claim_running(&mut second_runner).await;
    let second_job = second.job_id();
    assert_ne!(second_job, first_job);
    let reply = second_runner
        .complete(&second.succeeded(None, evidence.clone()))
        .await;
    refusals.check(
        "evidence attached to another job's accepted completion",
        &reply,
        409,
        Some("EVIDENCE_ALREADY_ATTACHED"),
    );
    // It says which row is taken, and by which job (the run itself, here).
    assert!(
        reply.text.contains(&first_job) && reply.text.contains("in the custody of"),
        "the refusal names the job holding the run: {reply:?}"
    );
    assert_untouched(&key, &second_job, "evidence already attached").await;
    let first_after = job(&key, &first_job).await;
    assert_eq!(
        attached_evidence(&first_after, &completion_id),
        rows(&evidence),
        "custody moved: {first_after}"
    );
    let record = runner_record(&key, &second_runner.id).await;
    assert_eq!(record["activeClaims"], 1, "{record}");

    // Control: with its own evidence the second job completes.
    let own = full_evidence(&key).await;
    let decision = second_runner
        .complete(&second.succeeded(None, own.clone()))
        .await
        .expect(200);
    assert_eq!(decision["decision"], "accepted", "{decision}");
    let done = job(&key, &second_job).await;
    assert_eq!(done["state"], "succeeded");
    assert_eq!(
        attached_evidence(&done, str_of(&decision, "completionId")),
        rows(&own)
    );

    refusals.assert_none();
}

// ---------------------------------------------------------------------------------------------
// Evidence made by the runner holding the job
// ---------------------------------------------------------------------------------------------

/// A runner can make the evaluation run (and its test results) for the job it holds, and
/// complete with them, without an API key; nobody else can add to that run.
#[tokio::test]
async fn the_holder_of_a_job_makes_its_evidence_and_completes_with_it() {
    let f = StagedPrompt::new(org("jobs-runner-evidence").await).await;
    let job = f.enqueue(&json!({ "evidence": "by the runner" })).await;
    let other_job = f.enqueue(&json!({ "evidence": "elsewhere" })).await;
    let mut holder = f.runner(2).await;
    let mut bystander = f.runner(1).await;
    let claimed = claim_running(&mut holder).await;
    let job_id = claimed.job_id();
    assert_eq!(job_id, str_of(&job, "id"));
    let other = bystander.claim_job().await;
    assert_eq!(other.job_id(), str_of(&other_job, "id"));

    let runs = format!("/api/remote-runners/jobs/{job_id}/evidence/runs");
    // Only the holder: another runner, and an API key, are refused.
    post(&runs, Some(&bystander.token), &json!({}))
        .await
        .expect_error(404, "NOT_FOUND");
    post(&runs, Some(f.key()), &json!({}))
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    let run = post(
        &runs,
        Some(&holder.token),
        &json!({ "name": "by the runner" }),
    )
    .await
    .expect(201);
    let run_id = str_of(&run, "id").to_owned();
    let results = format!("{runs}/{run_id}/test-results");
    let result = post(
        &results,
        Some(&holder.token),
        &json!({ "name": "exit 0", "status": "passed" }),
    )
    .await
    .expect(201);
    // The bystander cannot add to it through the job it holds either.
    let sideways = format!(
        "/api/remote-runners/jobs/{}/evidence/runs/{run_id}/test-results",
        other.job_id()
    );
    post(
        &sideways,
        Some(&bystander.token),
        &json!({ "name": "x", "status": "passed" }),
    )
    .await
    .expect_error(404, "NOT_FOUND");

    let evidence = Evidence {
        evaluation_run_id: EvidenceId::Text(run_id.clone()),
        test_result_ids: vec![EvidenceId::Text(str_of(&result, "id").to_owned())],
        cost_record_ids: Vec::new(),
        model_call_ids: Vec::new(),
        trace_id: None,
        extra: serde_json::Map::new(),
    };
    let fields = claimed.fields(
        CompletionStatus::Succeeded,
        Some(stable_json::hash(&json!("done"))),
        None,
        evidence,
    );
    let answer = holder
        .complete(&Completion::seal(fields).to_json())
        .await
        .expect(200);
    assert_eq!(answer["decision"], "accepted", "{answer}");
    let shown = get_job(f.key(), &job_id).await.expect(200);
    assert_eq!(array_of(&shown, "evidence").len(), 2, "{shown}");
}
