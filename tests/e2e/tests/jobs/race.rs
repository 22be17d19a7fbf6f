//! The claim race: many runners, each job dispatched once, within capacity.

use super::*;

const RACE_RUNNERS: usize = 16;
const RACE_CAPACITY: u32 = 2;
const RACE_JOBS: usize = 50;
const RACE_ROUNDS: usize = 10;

/// What one runner got in one round of claiming.
struct RoundResult {
    runner: Runner,
    claims: Vec<Claimed>,
    /// Ended on `503 RUNNER_AT_CAPACITY` (rather than `204`).
    at_capacity: bool,
}

/// Claims until `204` or `503`; never completes in between, so capacity is what stops it.
async fn claim_round(mut runner: Runner) -> RoundResult {
    let mut claims = Vec::new();
    let mut at_capacity = false;
    for _ in 0..(RACE_CAPACITY as usize + 2) {
        let reply = runner.claim().await;
        match reply.status {
            200 => {
                let claimed = runner
                    .verify(&reply, &[])
                    .unwrap_or_else(|e| panic!("assignment refused ({e}): {reply:?}"));
                claims.push(claimed);
                assert!(
                    claims.len() <= RACE_CAPACITY as usize,
                    "runner {} holds {} claims, capacity {RACE_CAPACITY}",
                    runner.id,
                    claims.len()
                );
            }
            204 => break,
            503 => {
                reply.expect_error(503, "RUNNER_AT_CAPACITY");
                assert_eq!(
                    claims.len(),
                    RACE_CAPACITY as usize,
                    "503 below capacity: {reply:?}"
                );
                at_capacity = true;
                break;
            }
            _ => panic!("unexpected claim answer: {reply:?}"),
        }
    }
    RoundResult {
        runner,
        claims,
        at_capacity,
    }
}

/// Completes every claim of a round concurrently, each naming one of `runs` (made beforehand,
/// one per job).
async fn complete_all(results: Vec<RoundResult>, runs: &mut Vec<Evidence>) -> Vec<Runner> {
    let mut runners = Vec::new();
    let mut completions = Vec::new();
    for result in results {
        for claimed in result.claims {
            let evidence = runs.pop().expect("one evaluation run per job");
            let token = result.runner.token.clone();
            completions.push(tokio::spawn(async move {
                let completion = claimed.succeeded(None, evidence);
                let reply = post("/api/remote-runners/complete", Some(&token), &completion).await;
                let decision = reply.expect(200);
                assert_eq!(decision["decision"], "accepted", "{reply:?}");
            }));
        }
        runners.push(result.runner);
    }
    for task in completions {
        task.await.expect("a completion");
    }
    runners
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn claim_race_dispatches_each_job_once_within_capacity() {
    let f = StagedPrompt::new(org("jobs-race").await).await;
    let key = f.key().to_owned();
    let _exclusive = OPERATOR_WRITES.write().await;

    let mut tasks = Vec::new();
    for _ in 0..RACE_RUNNERS {
        let org = f.org.clone();
        tasks.push(tokio::spawn(async move {
            Runner::simple(&org, &["prompt"], RACE_CAPACITY).await
        }));
    }
    let mut runners = Vec::new();
    for task in tasks {
        runners.push(task.await.expect("register a runner"));
    }

    let mut tasks = Vec::new();
    for n in 0..RACE_JOBS {
        let key = key.clone();
        let release = f.release.clone();
        tasks.push(tokio::spawn(async move {
            let input = json!({ "race": n });
            let job = enqueue_job(&key, &release, &input, &requirements("prompt")).await;
            str_of(&job, "id").to_owned()
        }));
    }
    let mut enqueued = BTreeSet::new();
    for task in tasks {
        enqueued.insert(task.await.expect("enqueue"));
    }
    assert_eq!(enqueued.len(), RACE_JOBS);
    let mut runs = Vec::new();
    for _ in 0..RACE_JOBS {
        runs.push(bare_evidence(&key).await);
    }

    let mut claimed_jobs: Vec<String> = Vec::new();
    let mut claims_by_runner: BTreeMap<String, usize> = BTreeMap::new();
    // `204` answered to a runner with room while compatible work was still queued.
    let mut starved: Vec<String> = Vec::new();
    let mut rounds = 0;
    while claimed_jobs.len() < RACE_JOBS {
        assert!(
            rounds < RACE_ROUNDS,
            "{} of {RACE_JOBS} jobs claimed after {RACE_ROUNDS} rounds",
            claimed_jobs.len()
        );
        rounds += 1;
        let queued_before = RACE_JOBS - claimed_jobs.len();
        let tasks: Vec<_> = runners
            .drain(..)
            .map(|runner| tokio::spawn(claim_round(runner)))
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("a claim round"));
        }
        let granted: usize = results.iter().map(|r| r.claims.len()).sum();
        assert!(
            granted > 0,
            "round {rounds}: nothing claimed, {queued_before} queued"
        );
        let room = RACE_RUNNERS * RACE_CAPACITY as usize;
        for result in &results {
            // The server's count is what this runner holds, never above capacity.
            let record = runner_record(&key, &result.runner.id).await;
            assert_eq!(
                record["activeClaims"].as_u64(),
                Some(result.claims.len() as u64),
                "round {rounds}: {record}"
            );
            // With at least as much work as room, every runner fills up before it is refused.
            if queued_before >= room && !result.at_capacity {
                starved.push(format!(
                    "round {rounds}: runner {} got 204 after {} claims with {queued_before} jobs \
                     queued at the start of the round ({granted} granted in all)",
                    result.runner.id,
                    result.claims.len()
                ));
            }
            *claims_by_runner
                .entry(result.runner.id.clone())
                .or_default() += result.claims.len();
            claimed_jobs.extend(result.claims.iter().map(Claimed::job_id));
        }
        runners = complete_all(results, &mut runs).await;
    }

    // Every job claimed exactly once.
    let distinct: BTreeSet<String> = claimed_jobs.iter().cloned().collect();
    assert_eq!(
        claimed_jobs.len(),
        distinct.len(),
        "a job was claimed twice: {claimed_jobs:?}"
    );
    assert_eq!(distinct, enqueued, "not every job was claimed");

    for job_id in &enqueued {
        let stored = job(&key, job_id).await;
        assert_eq!(stored["state"], "succeeded", "{stored}");
        assert_eq!(array_of(&stored, "claims").len(), 1, "{stored}");
        assert_eq!(array_of(&stored, "completions").len(), 1, "{stored}");
    }
    let mut completed = 0;
    for runner in &runners {
        let record = runner_record(&key, &runner.id).await;
        assert_eq!(record["activeClaims"], 0, "{record}");
        let done = record["completedJobs"].as_u64().expect("completedJobs") as usize;
        assert_eq!(done, claims_by_runner[&runner.id], "{record}");
        completed += done;
    }
    assert_eq!(completed, RACE_JOBS);
    assert!(
        starved.is_empty(),
        "claim answered 204 while compatible jobs were queued (API.md: 204 only when no \
         compatible queued job):\n  {}",
        starved.join("\n  ")
    );
}
