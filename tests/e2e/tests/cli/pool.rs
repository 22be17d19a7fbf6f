//! `runner pool`: a floor, one fresh runner per job, back to the floor.

use super::*;

/// The organization's runners whose names start with `prefix` (a pool's), as listed.
async fn runners_named(key: &str, prefix: &str) -> Vec<Value> {
    let runners = get("/api/remote-runners?limit=1000", key).await.expect(200);
    runners["runners"]
        .as_array()
        .expect("runners")
        .iter()
        .filter(|r| r["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .cloned()
        .collect()
}

/// The status lines `runner pool` printed so far (its own lines, not its processes').
fn pool_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("pool "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_pool_follows_its_queue_from_its_floor_and_back_one_fresh_runner_per_job() {
    let setup = Setup::new("pool").await;
    let base = base_url();
    let key = setup.org.admin_key.clone();
    let prefix = unique("pool");
    let work = setup.scratch.path("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let log = setup.scratch.path("pool.log");
    let floor = "pool 1-3: 1 alive (0 busy) · 0 queued · wants 1";
    let mut pool = command(
        &setup.scratch,
        &[
            "runner",
            "pool",
            "--min",
            "1",
            "--max",
            "3",
            "--idle-exit",
            "2",
            "--interval",
            "0.3",
            "--name",
            &prefix,
            "--execution-kind",
            "prompt",
            "--runtime",
            RUNTIME,
            "--",
            "--exec",
            "sleep 1; echo done",
            "--poll-interval",
            "0.2",
            "--work-dir",
            work.to_str().expect("UTF-8 path"),
        ],
        &[("EVALGATE_BASE_URL", &base), ("EDGERUNNER_API_KEY", &key)],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("pool log"))
    .spawn()
    .expect("the pool starts");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // Its floor: one process, waiting.
    eventually("the pool keeps its floor", Duration::from_secs(30), || {
        pool_lines(&log).iter().any(|l| l == floor)
    })
    .await;
    // Three jobs: three processes run them (the floor's and two more), each its own runner.
    let mut jobs = Vec::new();
    for n in 0..3 {
        jobs.push(
            setup
                .enqueue(&json!({"n": n}), &requirements("prompt"))
                .await,
        );
    }
    for id in &jobs {
        job_in_state(&setup.org, id, &["succeeded"], Duration::from_secs(90)).await;
    }
    assert!(
        pool_lines(&log).iter().any(|l| l.contains("· starting ")),
        "{}",
        log_text()
    );
    let claims: Vec<Value> = log_text()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == "job.claimed")
        .collect();
    assert_eq!(claims.len(), 3, "{}", log_text());
    // And back to its floor once they are done.
    eventually(
        "the pool comes back to its floor",
        Duration::from_secs(60),
        || pool_lines(&log).iter().filter(|l| *l == floor).count() >= 2,
    )
    .await;
    let pooled = runners_named(&key, &prefix).await;
    let ran: Vec<&Value> = pooled.iter().filter(|r| r["completedJobs"] == 1).collect();
    assert_eq!(ran.len(), 3, "one runner per job: {pooled:?}");
    assert!(pooled.iter().all(|r| r["ephemeral"] == true), "{pooled:?}");
    assert!(
        ran.iter()
            .all(|r| r["state"] == "draining" || r["state"] == "revoked"),
        "{ran:?}"
    );

    // SIGTERM: its floor process leaves without a job and the pool drains its runner.
    let status = Command::new("kill")
        .args(["-TERM", &pool.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = pool.try_wait().expect("try_wait") {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not stop: {}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "{exit}: {}", log_text());
    edgerunner_e2e::recovery::fire_cron().await;
    let left: Vec<Value> = runners_named(&key, &prefix)
        .await
        .into_iter()
        .filter(|r| r["state"] != "revoked")
        .collect();
    assert!(
        left.is_empty(),
        "every runner of the pool is retired: {left:?}"
    );
}
