//! The whole lifecycle of one job, from enqueue to an accepted completion, every answer checked.

use super::*;

#[tokio::test]
async fn full_lifecycle_from_enqueue_to_accepted_completion() {
    let f = StagedPrompt::new(org("jobs-lifecycle").await).await;
    let mut runner = f.runner(1).await;
    let other = f.runner(1).await;

    // Enqueue: floats, big integers and non-ASCII text, hashed over the lexemes as sent.
    let input = lexical(
        r#"{"question": "¿Qué tal? 🌍", "weights": [0.1, 1e-07, 1.50, 1e+16], "big": 12345678901234567890123, "nested": {"b": 1, "a": null}}"#,
    );
    let idempotency_key = unique("lifecycle");
    let body = enqueue_body(
        &idempotency_key,
        &f.release,
        "staging",
        &input,
        &requirements("prompt"),
    );
    let before = now_ms();
    let enqueued = enqueue(f.key(), &body).await.expect(201);
    assert_job_shape(&enqueued);
    let job_id = str_of(&enqueued, "id").to_owned();
    assert_eq!(enqueued["organizationId"], f.org.id.as_str());
    assert_eq!(enqueued["idempotencyKey"], idempotency_key.as_str());
    assert_eq!(enqueued["state"], "queued");
    assert_eq!(enqueued["dispatchAttempt"], 0);
    assert_eq!(enqueued["activeClaimId"], Value::Null);
    assert_eq!(enqueued["inputHash"], h(&input).as_str());
    assert_eq!(
        enqueued["subject"],
        json!({
            "kind": "prompt",
            "artifactId": f.release.artifact_id,
            "artifactName": f.release.artifact_name,
            "versionId": f.release.version_id,
            "contentHash": f.release.content_hash,
            "environment": "staging",
        })
    );
    assert!(parse_time(str_of(&enqueued, "createdAt")) >= before - SKEW_MS);

    // Claim, and verify the assignment exactly as the SDK does (key id, organization, claim
    // identity, validity window, payload hash, HMAC, nonce).
    let reply = runner.claim().await;
    let claimed = runner
        .verify(&reply, &[])
        .unwrap_or_else(|e| panic!("assignment refused ({e}): {reply:?}"));
    let claim = &claimed.assignment["claim"];
    let claim_id = claimed.claim_id();
    let envelope = claimed.verified.envelope();
    assert_eq!(envelope.job_id.as_str(), job_id);
    assert_eq!(envelope.organization_id.as_str(), f.org.id);
    assert_eq!(envelope.runner_id.as_str(), runner.id);
    assert_eq!(envelope.dispatch_attempt, DispatchAttempt::FIRST);
    assert_eq!(envelope.idempotency_key.as_str(), idempotency_key);
    assert_eq!(envelope.subject.kind.as_str(), "prompt");
    assert_eq!(envelope.subject.artifact_id.as_str(), f.release.artifact_id);
    assert_eq!(envelope.subject.version_id, f.release.version_id);
    assert_eq!(
        envelope.subject.content_hash.as_str(),
        f.release.content_hash
    );
    assert_eq!(envelope.subject.environment.as_str(), "staging");
    assert_eq!(envelope.input_hash.as_str(), h(&input));
    assert_eq!(envelope.requirements.as_map()["executionKind"], "prompt");
    assert_eq!(envelope.requirements.as_map()["runtime"], RUNTIME);
    assert!(
        claimed.assignment["signedJob"]["envelope"]
            .get("input")
            .is_none(),
        "the input travels by hash, not inline: {reply:?}"
    );
    let issued = envelope.issued_at.instant().get();
    let expires = envelope.expires_at.instant().get();
    assert_eq!(
        expires - issued,
        5 * 60 * 1000,
        "envelope window: {reply:?}"
    );
    assert!(
        (before - SKEW_MS..=now_ms() + SKEW_MS).contains(&issued),
        "issuedAt is not now: {reply:?}"
    );
    assert_eq!(claim["runnerId"], runner.id.as_str());
    assert_eq!(claim["jobId"], job_id.as_str());
    let lease = parse_time(str_of(claim, "leaseExpiresAt"));
    assert!(
        (issued + 60_000 - SKEW_MS..=issued + 60_000 + SKEW_MS).contains(&lease),
        "the first lease runs 60 s from the claim: {reply:?}"
    );
    // The nonce is single use on the runner's side too.
    assert!(
        runner.verify(&reply, &[]).is_err(),
        "a replayed nonce verified"
    );

    // Nothing left for the other runner.
    let none = other.claim().await;
    assert_eq!(none.status, 204, "{none:?}");

    // Job-bound reads: only the holder of the active claim.
    let read = runner.input(&job_id).await;
    assert_eq!(read.status, 200, "{read:?}");
    assert!(
        read.content_type().starts_with("application/json"),
        "{read:?}"
    );
    assert_eq!(read.json(), input, "the input is not exactly as enqueued");
    assert_eq!(h(&read.json()), h(&input));
    let artifact = runner.artifact(&job_id).await.expect(200);
    assert_eq!(artifact["versionId"].as_u64(), Some(f.release.version_id));
    assert_eq!(artifact["contentHash"], f.release.content_hash.as_str());
    assert_eq!(artifact["content"], f.release.content);
    assert_eq!(h(&artifact["content"]), f.release.content_hash);
    other.input(&job_id).await.expect_error(404, "NOT_FOUND");
    other.artifact(&job_id).await.expect_error(404, "NOT_FOUND");
    for path in ["input", "artifact"] {
        get(
            &format!("/api/remote-runners/jobs/{job_id}/{path}"),
            f.key(),
        )
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    }
    // A runner of another organization: the job does not exist for it.
    let foreign = org("jobs-lifecycle-foreign").await;
    let outsider = Runner::simple(&foreign, &["prompt"], 1).await;
    outsider.input(&job_id).await.expect_error(404, "NOT_FOUND");
    outsider
        .artifact(&job_id)
        .await
        .expect_error(404, "NOT_FOUND");
    // Runner endpoints refuse an API key; job administration refuses a runner credential.
    for path in ["claim", "heartbeat", "stream", "complete"] {
        post(
            &format!("/api/remote-runners/{path}"),
            Some(f.key()),
            &json!({}),
        )
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    }
    get_job(&runner.token, &job_id)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
    cancel_job(&runner.token, &job_id, "a runner cannot cancel")
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");

    // Heartbeat: claimed → running.
    assert_eq!(job(f.key(), &job_id).await["state"], "claimed");
    let beat = runner.heartbeat(&claim_id, 60).await.expect(200);
    assert_eq!(beat["cancelRequested"], false, "{beat}");
    assert_eq!(beat["cancelReason"], Value::Null, "{beat}");
    assert_eq!(beat["state"], "running", "{beat}");
    let lease = parse_time(str_of(&beat, "leaseExpiresAt"));
    assert!((now_ms() + 60_000 - SKEW_MS * 2..=now_ms() + 60_000 + SKEW_MS).contains(&lease));
    let running = job(f.key(), &job_id).await;
    assert_eq!(running["state"], "running");
    assert_eq!(running["activeClaimId"], claim_id.as_str());

    // Three chunks, unicode and float payloads.
    let payloads = [
        (
            ChunkKind::Log,
            lexical(r#"{"message": "héllo 🌍", "score": 0.1, "tiny": 1e-07, "big": 1e+16}"#),
        ),
        (
            ChunkKind::Trajectory,
            lexical(
                r#"{"step": 1, "tool": "search", "args": {"q": "日本語 \"quoted\"\n\ttab", "temperature": 0.70}, "ok": true, "none": null}"#,
            ),
        ),
        (
            ChunkKind::Log,
            lexical(
                r#"{"message": "done ✓", "values": [1.0, -0.0, 12345678901234567890123], "ratio": 0.3333333333333333}"#,
            ),
        ),
    ];
    let mut writer = claimed.writer();
    let mut sent = Vec::new();
    for (sequence, (kind, payload)) in payloads.iter().enumerate() {
        let chunk = writer.next(*kind, payload.clone(), timestamp_now());
        let reply = runner.stream(&chunk.to_json()).await;
        expect_chunk_accepted(&reply, sequence as u64, &chunk.checksum);
        sent.push(chunk);
    }

    // Complete with real evidence.
    let evidence = full_evidence(f.key()).await;
    let completion = claimed.succeeded(writer.final_checksum(), evidence.clone());
    let reply = runner.complete(&completion).await;
    let decision = reply.expect(200);
    assert_eq!(decision["decision"], "accepted", "{reply:?}");
    assert_eq!(decision["jobState"], "succeeded", "{reply:?}");
    assert!(decision["rationale"].is_string(), "{reply:?}");
    let completion_id = str_of(&decision, "completionId").to_owned();

    // The job's whole record.
    let done = job(f.key(), &job_id).await;
    assert_job_shape(&done);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["dispatchAttempt"], 1, "{done}");
    assert_eq!(done["activeClaimId"], Value::Null, "{done}");
    assert_eq!(done["leaseExpiresAt"], Value::Null, "{done}");
    assert!(done["finishedAt"].is_string(), "{done}");

    let claims = array_of(&done, "claims");
    assert_eq!(claims.len(), 1, "{done}");
    assert_eq!(claims[0]["id"], claim_id.as_str());
    assert_eq!(claims[0]["runnerId"], runner.id.as_str());
    assert_eq!(claims[0]["dispatchAttempt"], 1);
    assert_eq!(claims[0]["state"], "released", "{done}");
    assert_eq!(claims[0]["keyId"], runner.signing.key_id.as_str());
    assert!(claims[0]["startedAt"].is_string(), "{done}");
    assert!(claims[0]["endedAt"].is_string(), "{done}");

    assert_events_ordered(&done);
    let types = event_types(&done);
    assert_eq!(
        types.first().map(String::as_str),
        Some("job.enqueued"),
        "{done}"
    );
    let claimed_at = types
        .iter()
        .position(|t| t == "job.claimed")
        .unwrap_or_else(|| panic!("no job.claimed event: {done}"));
    assert!(
        claimed_at + 1 < types.len(),
        "no event after the claim (start, completion): {types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "job.enqueued").count(),
        1,
        "{types:?}"
    );

    let stream = array_of(&done, "stream");
    assert_eq!(stream.len(), 3, "{done}");
    for (i, (row, chunk)) in stream.iter().zip(&sent).enumerate() {
        assert_eq!(row["sequence"].as_u64(), Some(i as u64), "{done}");
        assert_eq!(row["dispatchAttempt"], 1, "{done}");
        assert_eq!(row["kind"], chunk.kind.as_str(), "{done}");
        assert_eq!(row["checksum"], chunk.checksum.as_str(), "{done}");
        assert_eq!(row["payloadHash"], chunk.payload_hash.as_str(), "{done}");
        assert_eq!(row["emittedAt"], chunk.emitted_at.as_str(), "{done}");
        let previous = i
            .checked_sub(1)
            .map_or(Value::Null, |p| Value::from(sent[p].checksum.as_str()));
        assert_eq!(row["previousChecksum"], previous, "chain broken: {done}");
    }

    let completions = array_of(&done, "completions");
    assert_eq!(completions.len(), 1, "{done}");
    let accepted = &completions[0];
    assert_eq!(accepted["id"], completion_id.as_str());
    assert_eq!(accepted["decision"], "accepted");
    assert_eq!(accepted["status"], "succeeded");
    assert_eq!(accepted["claimId"], claim_id.as_str());
    assert_eq!(accepted["runnerId"], runner.id.as_str());
    assert_eq!(accepted["dispatchAttempt"], 1);
    assert_eq!(
        accepted["completionChecksum"],
        completion["completionChecksum"]
    );
    assert_eq!(accepted["inputHash"], h(&input).as_str());
    assert_eq!(accepted["resultHash"], completion["resultHash"]);
    assert_eq!(
        accepted["finalStreamChecksum"],
        sent[2].checksum.as_str(),
        "{done}"
    );
    assert_eq!(accepted["completedAt"], completion["completedAt"]);
    assert_eq!(accepted["evidence"], evidence.to_json(), "{done}");
    assert_eq!(
        attached_evidence(&done, &completion_id),
        rows(&evidence),
        "evidence custody: {done}"
    );

    let record = runner_record(f.key(), &runner.id).await;
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["completedJobs"], 1, "{record}");
    assert!(record["lastHeartbeatAt"].is_string(), "{record}");

    // Exact replay: duplicate, stored.
    let reply = runner.complete(&completion).await;
    let replay = reply.expect(200);
    assert_eq!(replay["decision"], "duplicate", "{reply:?}");
    assert_eq!(replay["jobState"], "succeeded", "{reply:?}");
    let after = job(f.key(), &job_id).await;
    let completions = array_of(&after, "completions");
    assert_eq!(completions.len(), 2, "the duplicate is stored: {after}");
    assert_eq!(completions[1]["decision"], "duplicate");
    assert_eq!(
        completions[1]["completionChecksum"],
        completion["completionChecksum"]
    );
    assert_eq!(after["state"], "succeeded");

    // A different completion after acceptance: conflict, stored, nothing else changes.
    let different = Completion::seal(claimed.fields(
        CompletionStatus::Failed,
        None,
        writer.final_checksum().cloned(),
        bare_evidence(f.key()).await,
    ))
    .to_json();
    let reply = runner.complete(&different).await;
    reply.expect_error(409, "COMPLETION_CONFLICT");
    assert!(
        reply.json()["decision"].is_object(),
        "a conflict carries its decision: {reply:?}"
    );
    let after = job(f.key(), &job_id).await;
    let completions = array_of(&after, "completions");
    assert_eq!(completions.len(), 3, "the conflict is stored: {after}");
    assert_eq!(completions[2]["decision"], "conflict");
    assert_eq!(
        completions[2]["completionChecksum"],
        different["completionChecksum"]
    );
    assert!(completions[2]["rationale"].is_string());
    assert_eq!(after["state"], "succeeded", "{after}");
    assert_eq!(attached_evidence(&after, &completion_id), rows(&evidence));
    let record = runner_record(f.key(), &runner.id).await;
    assert_eq!(record["activeClaims"], 0, "{record}");
    assert_eq!(record["completedJobs"], 1, "{record}");

    // The evidence records say who took custody; the conflict's run stays free.
    let run = get(
        &format!("/api/evidence/runs/{}", evidence.evaluation_run_id.key()),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(
        run["attachedTo"]["completionId"],
        completion_id.as_str(),
        "{run}"
    );
    assert_eq!(run["attachedTo"]["jobId"], job_id.as_str(), "{run}");
    for list in ["testResults", "costRecords", "modelCalls", "traces"] {
        let rows = array_of(&run, list);
        assert_eq!(rows.len(), 1, "{list}: {run}");
        assert_eq!(
            rows[0]["attachedTo"]["completionId"],
            completion_id.as_str(),
            "{list}: {run}"
        );
    }
    let free = get(
        &format!(
            "/api/evidence/runs/{}",
            different["evidence"]["evaluationRunId"]
                .as_str()
                .expect("run id")
        ),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(free["attachedTo"], Value::Null, "{free}");

    // The custody bundle carries everything exactly as signed and as received (lexemes too).
    let bundle = get(
        &format!("/api/remote-runners/jobs/{job_id}/bundle"),
        f.key(),
    )
    .await
    .expect(200);
    assert_eq!(bundle["bundleVersion"], 1, "{bundle}");
    assert_eq!(bundle["job"]["id"], job_id.as_str());
    let claims = array_of(&bundle, "claims");
    assert_eq!(claims.len(), 1, "{bundle}");
    assert_eq!(
        claims[0]["signedJob"], claimed.assignment["signedJob"],
        "the bundle's signed job is not what the runner verified"
    );
    let chunks: Vec<Value> = sent.iter().map(|chunk| chunk.to_json()).collect();
    assert_eq!(
        array_of(&bundle, "stream"),
        &chunks,
        "the bundle's chunks are not exactly what was streamed"
    );
    let received: Vec<(&str, &Value)> = array_of(&bundle, "completions")
        .iter()
        .map(|c| (str_of(c, "decision"), &c["completion"]))
        .collect();
    assert_eq!(
        received,
        vec![
            ("accepted", &completion),
            ("duplicate", &completion),
            ("conflict", &different),
        ],
        "the bundle's completions are not exactly what was received"
    );
}
