//! The release commands.

use super::*;

#[tokio::test]
async fn releases_are_made_promoted_shown_and_listed_from_the_cli() {
    let org = bootstrap_org("cli-admin-releases");
    let scratch = Scratch::new("releases");
    let name = unique("greeter");

    let artifact = ok(
        &org,
        &[
            "releases",
            "create-artifact",
            "--kind",
            "prompt",
            "--name",
            &name,
        ],
    );
    let artifact = artifact.trim();
    assert!(artifact.starts_with("art_"), "the id alone: {artifact:?}");
    let again = run(
        &org,
        &[
            "releases",
            "create-artifact",
            "--kind",
            "prompt",
            "--name",
            &name,
        ],
    );
    assert_eq!(again.status.code(), Some(1), "{}", shown(&again));
    assert!(
        stderr(&again).contains("409 ARTIFACT_EXISTS"),
        "{}",
        shown(&again)
    );

    // From a file, number lexemes as written (they are hashed).
    let text = r#"{"template": "Bonjour {{name}} ✨", "temperature": 1.50, "tiny": 1e-07}"#;
    let file = scratch.path("content.json");
    std::fs::write(&file, text).expect("content file");
    let from_file = format!("@{}", file.display());
    let added = run(
        &org,
        &["releases", "add-version", artifact, "--content", &from_file],
    );
    assert!(added.status.success(), "{}", shown(&added));
    let v1 = stdout(&added).trim().to_owned();
    let v1_id: u64 = v1
        .parse()
        .unwrap_or_else(|_| panic!("a version id: {v1:?}"));
    let hash = h(&lexical(text));
    assert!(
        stderr(&added).contains(&hash),
        "the hash on stderr: {}",
        shown(&added)
    );
    // Inline.
    let v2 = ok(
        &org,
        &[
            "releases",
            "add-version",
            artifact,
            "--content",
            r#"{"template": "v2"}"#,
        ],
    );
    let v2_id: u64 = v2.trim().parse().expect("a version id");
    assert!(v2_id > v1_id);

    let version = ok_json(&org, &["releases", "show", &v1]);
    assert_eq!(version["contentHash"], hash.as_str(), "{version}");
    assert_eq!(version["content"], lexical(text), "{version}");
    assert_eq!(version["promotions"], json!([]), "{version}");

    let promoted = ok(
        &org,
        &["releases", "promote", &v1, "--environment", "staging"],
    );
    assert!(promoted.contains("promoted to staging"), "{promoted}");
    let first = ok_json(&org, &["releases", "promote", &v1, "--to", "staging"]);
    let repeat = ok_json(&org, &["releases", "promote", &v1, "--to", "staging"]);
    assert_eq!(first["promotedAt"], repeat["promotedAt"], "idempotent");
    ok(&org, &["releases", "promote", &v1, "--to", "prod"]);
    let wrong = run(&org, &["releases", "promote", &v1, "--to", "production"]);
    assert_eq!(wrong.status.code(), Some(1), "{}", shown(&wrong));
    assert!(
        stderr(&wrong).contains("422 INVALID_ENVIRONMENT"),
        "{}",
        shown(&wrong)
    );

    let shown_artifact = ok_json(&org, &["releases", "show", artifact]);
    let versions: Vec<(u64, Value)> = shown_artifact["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["id"].as_u64().expect("id"), v["promotions"].clone()))
        .collect();
    assert_eq!(
        versions,
        vec![(v2_id, json!([])), (v1_id, json!(["staging", "prod"]))],
        "newest first, with promotions"
    );
    let human = ok(&org, &["releases", "show", artifact]);
    assert!(
        human.contains(&name) && human.contains("staging, prod"),
        "{human}"
    );
    let human = ok(&org, &["releases", "show", &v1]);
    assert!(
        human.contains("\"temperature\": 1.50"),
        "content as stored: {human}"
    );

    // The list: this organization's artifacts, newest first, with their latest version.
    let scorer = ok(
        &org,
        &[
            "releases",
            "create-artifact",
            "--kind",
            "scorer",
            "--name",
            &name,
        ],
    );
    let scorer = scorer.trim();
    let listed = ok_json(&org, &["releases", "list"]);
    let rows: Vec<(String, String, Value)> = listed["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .map(|a| {
            (
                a["id"].as_str().expect("id").to_owned(),
                a["kind"].as_str().expect("kind").to_owned(),
                a["latestVersionId"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (scorer.to_owned(), "scorer".to_owned(), Value::Null),
            (artifact.to_owned(), "prompt".to_owned(), json!(v2_id)),
        ],
        "{listed}"
    );
    assert_eq!(listed["nextCursor"], Value::Null);
    let prompts = ok_json(&org, &["releases", "list", "--kind", "prompt"]);
    assert_eq!(
        prompts["artifacts"].as_array().map(Vec::len),
        Some(1),
        "{prompts}"
    );
    let page = ok_json(&org, &["releases", "list", "--limit", "1"]);
    let cursor = page["nextCursor"].as_str().expect("a next page").to_owned();
    let rest = get(
        &format!("/api/releases/artifacts?limit=1&cursor={cursor}"),
        &org.admin_key,
    )
    .await
    .expect(200);
    assert_eq!(rest["artifacts"][0]["id"], artifact, "{rest}");
    assert_eq!(rest["nextCursor"], Value::Null, "{rest}");
    get("/api/releases/artifacts?kind=model", &org.admin_key)
        .await
        .expect_error(422, "INVALID_KIND");
    get("/api/releases/artifacts?cursor=nope", &org.admin_key)
        .await
        .expect_error(422, "INVALID_CURSOR");
    // The page size is 1–1000: one past either end is refused, the ends are served.
    for limit in ["0", "1001"] {
        get(
            &format!("/api/releases/artifacts?limit={limit}"),
            &org.admin_key,
        )
        .await
        .expect_error(422, "INVALID_LIMIT");
    }
    for limit in ["1", "1000"] {
        get(
            &format!("/api/releases/artifacts?limit={limit}"),
            &org.admin_key,
        )
        .await
        .expect(200);
    }
    let human = ok(&org, &["releases", "list"]);
    assert!(
        human.contains(artifact) && human.contains(scorer),
        "{human}"
    );

    // Another organization sees none of it.
    let other = bootstrap_org("cli-admin-releases-other");
    let theirs = ok_json(&other, &["releases", "list"]);
    assert_eq!(theirs["artifacts"], json!([]), "{theirs}");
    let foreign = run(&other, &["releases", "show", artifact]);
    assert!(
        stderr(&foreign).contains("404 NOT_FOUND"),
        "{}",
        shown(&foreign)
    );
}
