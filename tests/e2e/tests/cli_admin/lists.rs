//! Runner ages and the job state filter; the enrollment policy and tokens.

use super::*;

/// The cells of the table row whose first cell is `id` (cells are two or more spaces apart).
fn row_of(table: &str, id: &str) -> Vec<String> {
    table
        .lines()
        .find(|line| line.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("no row for {id}:\n{table}"))
        .split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .map(str::to_owned)
        .collect()
}

fn column(table: &str, name: &str) -> usize {
    let header = table.lines().next().expect("a header");
    header
        .split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .position(|cell| cell == name)
        .unwrap_or_else(|| panic!("no column {name}: {header}"))
}

fn is_recent(age: &str) -> bool {
    age == "just now"
        || age
            .strip_suffix(" s ago")
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n < 60)
}

#[tokio::test]
async fn runners_list_shows_heartbeat_ages_and_jobs_list_filters_by_state() {
    let org = bootstrap_org("cli-admin-ages");
    let (idle, _) = register_simple_runner(&org, &unique("idle")).await;
    let running = RunningJob::start(&org).await;
    let busy = running.runner.id.clone();
    // A second job stays queued: the only runner is at capacity.
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let queued = enqueue_job(
        &org.admin_key,
        &release,
        &json!({}),
        &requirements("prompt"),
    )
    .await;
    let queued = queued["id"].as_str().expect("job id").to_owned();

    let table = ok(&org, &["runners", "list"]);
    let heartbeat = column(&table, "LAST HEARTBEAT");
    let seen = column(&table, "LAST SEEN");
    let idle_row = row_of(&table, &idle);
    assert_eq!(idle_row[heartbeat], "never", "{table}");
    let busy_row = row_of(&table, &busy);
    assert!(is_recent(&busy_row[heartbeat]), "{table}");
    assert!(is_recent(&busy_row[seen]), "{table}");

    let ids = |args: &[&str]| -> Vec<String> {
        let answer = ok_json(&org, args);
        answer["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| j["id"].as_str().expect("id").to_owned())
            .collect()
    };
    assert_eq!(
        ids(&["jobs", "list", "--state", "running"]),
        vec![running.id()]
    );
    assert_eq!(
        ids(&["jobs", "list", "--state", "queued"]),
        vec![queued.clone()]
    );
    assert_eq!(
        ids(&["jobs", "list", "--state", "succeeded"]),
        Vec::<String>::new()
    );
    assert_eq!(ids(&["jobs", "list"]).len(), 2);
    let human = ok(&org, &["jobs", "list", "--state", "running"]);
    assert!(
        human.contains(&running.id()) && !human.contains(&queued),
        "{human}"
    );

    let wrong = run(&org, &["jobs", "list", "--state", "done"]);
    assert_eq!(
        wrong.status.code(),
        Some(2),
        "a usage error: {}",
        shown(&wrong)
    );
    assert!(
        stderr(&wrong).contains("cancel_requested"),
        "{}",
        shown(&wrong)
    );
}

// ---------------------------------------------------------------------------------------------
// Enrollment policy and tokens
// ---------------------------------------------------------------------------------------------

/// `edgerunner runner enroll` of a fresh key into `org`, with `EDGERUNNER_ENROLLMENT_TOKEN`
/// set to `token` when given.
fn enroll_runner(scratch: &Scratch, org: &Org, token: Option<&str>) -> Output {
    let config = scratch.path(&unique("runner")).join("runner.json");
    let mut command = Command::new(required_env("EDGERUNNER_BIN"));
    command
        .args([
            "runner",
            "enroll",
            "--server",
            &base_url(),
            "--organization",
            &org.id,
        ])
        .arg("--config")
        .arg(&config)
        .args(["--execution-kind", "prompt", "--runtime", RUNTIME, "--json"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null());
    if let Some(token) = token {
        command.env("EDGERUNNER_ENROLLMENT_TOKEN", token);
    }
    command.output().expect("edgerunner runs")
}

#[tokio::test]
async fn enrollment_policy_and_tokens_are_set_issued_listed_and_revoked_from_the_cli() {
    let org = bootstrap_org("cli-enrollment");
    let scratch = Scratch::new("enrollment");
    assert_eq!(
        ok(&org, &["enrollment", "policy"]).trim(),
        format!("enrollment policy of {}: open", org.id)
    );
    assert_eq!(
        ok_json(&org, &["enrollment", "policy", "token"])["policy"],
        "token"
    );

    // Without a token the runner is refused, and told what to do.
    let refused = enroll_runner(&scratch, &org, None);
    assert_eq!(refused.status.code(), Some(1), "{}", shown(&refused));
    assert!(
        stderr(&refused).contains("ENROLLMENT_TOKEN_REQUIRED")
            && stderr(&refused).contains("EDGERUNNER_ENROLLMENT_TOKEN"),
        "{}",
        shown(&refused)
    );

    // A token for one enrollment, printed once with how to use it.
    let created = ok(
        &org,
        &[
            "enrollment",
            "tokens",
            "create",
            "--name",
            "rack 4",
            "--uses",
            "1",
            "--expires-in",
            "2h",
        ],
    );
    let token = created
        .split_whitespace()
        .find(|word| word.starts_with("ere_") && word.len() == 68)
        .unwrap_or_else(|| panic!("no token printed: {created}"))
        .to_owned();
    assert!(
        created.contains(&format!("EDGERUNNER_ENROLLMENT_TOKEN={token}")),
        "{created}"
    );
    let listed = ok(&org, &["enrollment", "tokens", "list"]);
    assert!(
        !listed.contains(&token[12..]),
        "the list shows no secret: {listed}"
    );
    assert!(
        listed.contains("rack 4") && listed.contains("0/1") && listed.contains("live"),
        "{listed}"
    );

    let enrolled = enroll_runner(&scratch, &org, Some(&token));
    assert!(enrolled.status.success(), "{}", shown(&enrolled));
    let answer: Value = serde_json::from_slice(&enrolled.stdout).expect("JSON");
    assert_eq!(answer["runner"]["state"], "pending_approval", "{answer}");
    // Its one use is spent: a second runner with it is refused.
    let again = enroll_runner(&scratch, &org, Some(&token));
    assert_eq!(again.status.code(), Some(1), "{}", shown(&again));
    assert!(
        stderr(&again).contains("ENROLLMENT_TOKEN_INVALID"),
        "{}",
        shown(&again)
    );

    let tokens = ok_json(&org, &["enrollment", "tokens", "list"]);
    let first = &tokens["enrollmentTokens"][0];
    assert_eq!(
        (first["uses"].clone(), first["state"].clone()),
        (json!(1), json!("used_up")),
        "{tokens}"
    );
    assert!(!tokens.to_string().contains(&token[12..]));

    // Revoke a live one: the runner holding it is refused.
    let second = ok_json(&org, &["enrollment", "tokens", "create", "--uses", "5"]);
    let second_token = second["enrollmentToken"]
        .as_str()
        .expect("token")
        .to_owned();
    let second_id = second["id"].as_str().expect("id").to_owned();
    let revoked = ok(&org, &["enrollment", "tokens", "revoke", &second_id]);
    assert!(
        revoked.contains(&format!("enrollment token {second_id} revoked")),
        "{revoked}"
    );
    let refused = enroll_runner(&scratch, &org, Some(&second_token));
    assert!(
        stderr(&refused).contains("ENROLLMENT_TOKEN_INVALID"),
        "{}",
        shown(&refused)
    );
    let twice = run(&org, &["enrollment", "tokens", "revoke", &second_id]);
    assert_eq!(twice.status.code(), Some(1), "{}", shown(&twice));
    assert!(stderr(&twice).contains("NOT_FOUND"), "{}", shown(&twice));

    // Closed refuses every runner (answered as a token policy is, so that a stranger cannot
    // tell them apart); open lets them in without a token.
    ok(&org, &["enrollment", "policy", "closed"]);
    let closed = enroll_runner(&scratch, &org, None);
    assert!(
        stderr(&closed).contains("ENROLLMENT_TOKEN_REQUIRED"),
        "{}",
        shown(&closed)
    );
    ok(&org, &["enrollment", "policy", "open"]);
    let open = enroll_runner(&scratch, &org, None);
    assert!(open.status.success(), "{}", shown(&open));

    // Bounds are usage errors before anything is sent (exit 2).
    for bad in [
        &["enrollment", "tokens", "create", "--uses", "1001"][..],
        &["enrollment", "tokens", "create", "--expires-in", "31d"],
        &["enrollment", "policy", "sometimes"],
    ] {
        let output = run(&org, bad);
        assert_eq!(output.status.code(), Some(2), "{bad:?}: {}", shown(&output));
    }
}
