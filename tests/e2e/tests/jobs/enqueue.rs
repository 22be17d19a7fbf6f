//! Enqueue: idempotent by key, and every subject it cannot bind refused by its code.

use super::*;

#[tokio::test]
async fn enqueue_is_idempotent_and_refuses_what_it_cannot_bind() {
    let f = StagedPrompt::new(org("jobs-enqueue").await).await;
    let reqs = requirements("prompt");
    // `1.50` hashes as written, not as 1.5.
    let input = lexical(r#"{"prompt": "hi", "temperature": 1.50}"#);
    let key = unique("enqueue");
    let body = enqueue_body(&key, &f.release, "staging", &input, &reqs);

    let first = enqueue(f.key(), &body).await.expect(201);
    assert_job_shape(&first);
    let job_id = str_of(&first, "id").to_owned();
    assert_eq!(first["inputHash"], h(&input).as_str());
    assert_ne!(
        first["inputHash"],
        h(&lexical(r#"{"prompt": "hi", "temperature": 1.5}"#)).as_str(),
        "the input hash must cover the lexeme 1.50"
    );
    assert_eq!(
        first["subject"]["contentHash"],
        f.release.content_hash.as_str()
    );

    // Same key, same intent: the original job, 200.
    let again = enqueue(f.key(), &body).await.expect(200);
    assert_eq!(again["id"], job_id.as_str(), "{again}");
    assert_eq!(again["inputHash"], first["inputHash"]);
    let stored = job(f.key(), &job_id).await;
    assert_eq!(
        event_types(&stored)
            .iter()
            .filter(|t| *t == "job.enqueued")
            .count(),
        1,
        "a replay enqueues nothing: {stored}"
    );
    let listed = get("/api/remote-runners/jobs?limit=500", f.key())
        .await
        .expect(200);
    let ids: Vec<&str> = array_of(&listed, "jobs")
        .iter()
        .map(|j| str_of(j, "id"))
        .collect();
    assert_eq!(ids, vec![job_id.as_str()], "one job, listed once: {listed}");

    // Same key, different intent.
    let changed_input = enqueue_body(
        &key,
        &f.release,
        "staging",
        &lexical(r#"{"prompt": "hi", "temperature": 1.5}"#),
        &reqs,
    );
    enqueue(f.key(), &changed_input)
        .await
        .expect_error(409, "IDEMPOTENCY_CONFLICT");
    let mut changed_reqs = reqs.clone();
    changed_reqs["limits"]["cpuSeconds"] = json!(61);
    let changed = enqueue_body(&key, &f.release, "staging", &input, &changed_reqs);
    enqueue(f.key(), &changed)
        .await
        .expect_error(409, "IDEMPOTENCY_CONFLICT");

    // Not promoted to the environment.
    for environment in ["prod", "dev"] {
        let body = enqueue_body(
            &unique("unpromoted"),
            &f.release,
            environment,
            &input,
            &reqs,
        );
        enqueue(f.key(), &body)
            .await
            .expect_error(409, "VERSION_NOT_PROMOTED");
    }

    // Unknown version, unknown artifact.
    let mut unknown = f.release.clone();
    unknown.version_id += 1_000_000;
    let body = enqueue_body(&unique("unknown"), &unknown, "staging", &input, &reqs);
    enqueue(f.key(), &body)
        .await
        .expect_error(404, "VERSION_NOT_FOUND");
    let mut unknown = f.release.clone();
    unknown.artifact_id = "art_does_not_exist".to_owned();
    let body = enqueue_body(&unique("unknown"), &unknown, "staging", &input, &reqs);
    enqueue(f.key(), &body)
        .await
        .expect_error(404, "VERSION_NOT_FOUND");

    // Subject kind other than the artifact's: refused, never bound.
    let mut wrong_kind = enqueue_body(&unique("kind"), &f.release, "staging", &input, &reqs);
    wrong_kind["subject"]["kind"] = json!("scorer");
    let reply = enqueue(f.key(), &wrong_kind).await;
    assert!(
        [404, 409, 422].contains(&reply.status),
        "a prompt version bound as a scorer: {reply:?}"
    );

    // Another organization's version is not found; that organization can use it.
    let foreign = StagedPrompt::new(org("jobs-enqueue-foreign").await).await;
    let body = enqueue_body(
        &unique("foreign"),
        &foreign.release,
        "staging",
        &input,
        &reqs,
    );
    enqueue(f.key(), &body)
        .await
        .expect_error(404, "VERSION_NOT_FOUND");
    let theirs = enqueue(foreign.key(), &body).await.expect(201);
    get_job(f.key(), str_of(&theirs, "id"))
        .await
        .expect_error(404, "NOT_FOUND");

    // Invalid requirements.
    let mut bad_limit = reqs.clone();
    bad_limit["limits"]["cpuSeconds"] = json!(0);
    let mut missing_limit = reqs.clone();
    missing_limit["limits"]
        .as_object_mut()
        .expect("limits object")
        .remove("memoryMb");
    let mut bad_origin = reqs.clone();
    bad_origin["network"] = json!({ "mode": "allowlist", "origins": ["http://plain.example.com"] });
    let mut unknown_field = reqs.clone();
    unknown_field["gpu"] = json!(true);
    let invalid = [
        json!({ "executionKind": "prompt", "runtime": RUNTIME }),
        json!({ "executionKind": "banana", "runtime": RUNTIME, "limits": limits(1, 1, 1, 1) }),
        bad_limit,
        missing_limit,
        bad_origin,
        unknown_field,
        json!("fast"),
    ];
    for requirements in &invalid {
        let body = enqueue_body(
            &unique("invalid"),
            &f.release,
            "staging",
            &input,
            requirements,
        );
        let reply = enqueue(f.key(), &body).await;
        assert_eq!(
            (reply.status, reply.json()["error"]["code"].clone()),
            (422, json!("INVALID_REQUIREMENTS")),
            "requirements {requirements}: {reply:?}"
        );
    }

    // Scopes: a member key without runs:write cannot enqueue; with it, it can.
    let reader = new_api_key(
        f.key(),
        &json!({ "name": "reader", "scopes": ["runs:read"] }),
    )
    .await;
    let reader = str_of(&reader, "apiKey").to_owned();
    let body = enqueue_body(&unique("reader"), &f.release, "staging", &input, &reqs);
    enqueue(&reader, &body).await.expect_error(403, "FORBIDDEN");
    assert_eq!(job(&reader, &job_id).await["id"], job_id.as_str());
    let writer = new_api_key(
        f.key(),
        &json!({ "name": "writer", "scopes": ["runs:read", "runs:write"] }),
    )
    .await;
    enqueue(str_of(&writer, "apiKey"), &body).await.expect(201);

    // Who asks is decided before what is asked (the key's lookup rides in the enqueue's read):
    // a key unknown, revoked or without runs:write is refused as such, whatever its body.
    let bad_body = json!({ "idempotencyKey": 5 });
    let reply = enqueue(f.key(), &bad_body).await;
    assert_eq!(reply.status, 422, "{reply:?}");
    enqueue(&reader, &bad_body)
        .await
        .expect_error(403, "FORBIDDEN");
    let unknown = format!("erk_{}", "0".repeat(64));
    for asked in [&body, &bad_body] {
        enqueue(&unknown, asked)
            .await
            .expect_error(401, "AUTHENTICATION_FAILED");
    }
    let revoked = new_api_key(
        f.key(),
        &json!({ "name": "revoked", "scopes": ["runs:read", "runs:write"] }),
    )
    .await;
    delete(
        &format!("/api/developer/api-keys/{}", str_of(&revoked, "id")),
        f.key(),
    )
    .await
    .expect(200);
    let fresh = enqueue_body(&unique("revoked"), &f.release, "staging", &input, &reqs);
    for asked in [&fresh, &bad_body] {
        enqueue(str_of(&revoked, "apiKey"), asked)
            .await
            .expect_error(401, "AUTHENTICATION_FAILED");
    }

    // A runner credential is not an API key.
    let runner = f.runner(1).await;
    let body = enqueue_body(&unique("runner"), &f.release, "staging", &input, &reqs);
    enqueue(&runner.token, &body)
        .await
        .expect_error(401, "AUTHENTICATION_FAILED");
}
