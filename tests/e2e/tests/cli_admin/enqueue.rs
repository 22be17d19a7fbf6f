//! `admin jobs enqueue` from flags, and refusals that show the shape.

use super::*;

#[tokio::test]
async fn enqueue_with_flags_stores_exactly_those_requirements() {
    let org = bootstrap_org("cli-admin-enqueue-flags");
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let version = release.version_id.to_string();
    let subject = [
        "--kind",
        "prompt",
        "--artifact",
        release.artifact_id.as_str(),
        "--version",
        version.as_str(),
        "--environment",
        "staging",
        "--input",
        r#"{"q": 1.50}"#,
    ];
    let enqueue = |key: &str, extra: &[&str]| {
        let mut args = vec!["jobs", "enqueue", "--idempotency-key", key];
        args.extend_from_slice(&subject);
        args.extend_from_slice(extra);
        run(&org, &[&["--json"], &args[..]].concat())
    };

    let key = unique("flags");
    let output = enqueue(
        &key,
        &[
            "--runtime",
            RUNTIME,
            "--cpu-seconds",
            "30",
            "--memory-mb",
            "256",
            "--wall-seconds",
            "90",
            "--output-bytes",
            "65536",
            "--network",
            "https://b.example.com",
            "--network",
            "https://A.example.com:443",
        ],
    );
    assert!(output.status.success(), "{}", shown(&output));
    let answer: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let stored = job(&org.admin_key, answer["id"].as_str().expect("job id")).await;
    assert_eq!(
        stored["requirements"],
        json!({
            "executionKind": "prompt",
            "runtime": RUNTIME,
            "limits": {"cpuSeconds": 30, "memoryMb": 256, "wallSeconds": 90, "outputBytes": 65536},
            "network": {"mode": "allowlist", "origins": ["https://a.example.com", "https://b.example.com"]},
            "streaming": false,
            "cancellation": false,
            "problemType": null,
            "external": false,
            "tags": [],
        }),
        "{stored}"
    );
    assert_eq!(
        stored["inputHash"],
        h(&lexical(r#"{"q": 1.50}"#)),
        "{stored}"
    );

    // deny_all, and the same job again by its key.
    let limits = [
        "--runtime",
        RUNTIME,
        "--cpu-seconds",
        "1",
        "--memory-mb",
        "1",
        "--wall-seconds",
        "1",
        "--output-bytes",
        "1",
    ];
    let deny_key = unique("deny");
    let deny = enqueue(
        &deny_key,
        &[&limits[..], &["--network", "deny_all"]].concat(),
    );
    assert!(deny.status.success(), "{}", shown(&deny));
    let deny: Value = serde_json::from_slice(&deny.stdout).expect("JSON");
    assert_eq!(deny["requirements"]["network"], json!({"mode": "deny_all"}));
    let replay = enqueue(&deny_key, &limits);
    let replay: Value = serde_json::from_slice(&replay.stdout).expect("JSON");
    assert_eq!(
        replay["id"], deny["id"],
        "no --network is deny_all: the same intent"
    );

    // A flag left out is named before anything is sent.
    let before = list_count(&org).await;
    let partial = enqueue(
        &unique("partial"),
        &["--runtime", RUNTIME, "--cpu-seconds", "1"],
    );
    assert_eq!(partial.status.code(), Some(1), "{}", shown(&partial));
    assert!(
        stderr(&partial).contains("missing --memory-mb, --wall-seconds, --output-bytes"),
        "{}",
        shown(&partial)
    );
    // The server's refusal names the field and the shape it expects.
    let document = run(
        &org,
        &[
            &["jobs", "enqueue", "--idempotency-key", &unique("doc")][..],
            &subject,
            &[
                "--requirements",
                &format!(r#"{{"executionKind": "prompt", "runtime": "{RUNTIME}"}}"#),
            ],
        ]
        .concat(),
    );
    assert_eq!(document.status.code(), Some(1), "{}", shown(&document));
    assert!(
        stderr(&document).contains(
            "422 INVALID_REQUIREMENTS: requirements.limits is required: \
             {\"cpuSeconds\": n, \"memoryMb\": n, \"wallSeconds\": n, \"outputBytes\": n}"
        ),
        "{}",
        shown(&document)
    );
    let origin = enqueue(
        &unique("origin"),
        &[&limits[..], &["--network", "http://plain.example"]].concat(),
    );
    assert_eq!(origin.status.code(), Some(1), "{}", shown(&origin));
    assert!(
        stderr(&origin).contains("requirements.network.origins[0]")
            && stderr(&origin).contains("https"),
        "{}",
        shown(&origin)
    );
    assert_eq!(
        list_count(&org).await,
        before,
        "no job was made by a refusal"
    );

    // Over HTTP: no requirements at all, and limits of the wrong type.
    let body = |requirements: Value| {
        let mut body = enqueue_body(
            &unique("http"),
            &release,
            "staging",
            &json!({}),
            &json!(null),
        );
        body["requirements"] = requirements;
        body
    };
    let mut missing = body(Value::Null);
    missing
        .as_object_mut()
        .expect("object")
        .remove("requirements");
    let reply = edgerunner_e2e::jobs::enqueue(&org.admin_key, &missing).await;
    reply.expect_error(422, "INVALID_REQUIREMENTS");
    let message = reply.json()["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.starts_with("requirements is required: {\"executionKind\": "),
        "{message}"
    );
    for field in [
        "\"runtime\"",
        "\"limits\"",
        "\"cpuSeconds\"",
        "\"outputBytes\"",
    ] {
        assert!(message.contains(field), "{field} in {message}");
    }
    let mut wrong = requirements("prompt");
    wrong["limits"] = json!([60, 512, 120, 1024]);
    let reply = edgerunner_e2e::jobs::enqueue(&org.admin_key, &body(wrong)).await;
    reply.expect_error(422, "INVALID_REQUIREMENTS");
    let message = reply.json()["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.starts_with("requirements.limits must be an object: {\"cpuSeconds\": n,"),
        "{message}"
    );
}

async fn list_count(org: &Org) -> usize {
    get("/api/remote-runners/jobs?limit=500", &org.admin_key)
        .await
        .expect(200)["jobs"]
        .as_array()
        .map_or(0, Vec::len)
}
