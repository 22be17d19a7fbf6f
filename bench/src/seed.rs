//! The local database, reached past the server through `wrangler d1 execute --local`: seeding
//! the queue in bulk by raw SQL (copies of one template job), and the counts, lease moves and
//! query plans the scenarios need. The bench's only SQL outside the server.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Deserialize;

use crate::error::{BenchError, Res};
use crate::measure::now_ms;

/// The jobs that hold a lease.
const LEASED: &str = "state IN ('claimed', 'running', 'cancel_requested')";

/// One statement's answer in `wrangler d1 execute --json`.
#[derive(Deserialize)]
struct D1Statement<T> {
    #[serde(default = "Vec::new")]
    results: Vec<T>,
}

/// A `SELECT count(*) AS n` row.
#[derive(Deserialize)]
struct CountRow {
    n: u64,
}

/// How many times a `wrangler d1 execute` refused as `SQLITE_BUSY` is tried.
const BUSY_ATTEMPTS: u32 = 8;

/// A row of `EXPLAIN QUERY PLAN`.
#[derive(Deserialize)]
struct PlanRow {
    detail: String,
}

/// The running server's local D1 database, and the bench organization's template job in it.
pub(crate) struct LocalD1 {
    /// The server's `--persist-to` directory.
    state: PathBuf,
    org: String,
    template_job: String,
    seeded_batches: u32,
}

impl LocalD1 {
    pub(crate) fn new(state: PathBuf, org: String, template_job: String) -> Self {
        Self {
            state,
            org,
            template_job,
            seeded_batches: 0,
        }
    }

    /// The bench's organization (the template job's).
    pub(crate) fn org(&self) -> &str {
        &self.org
    }

    /// `wrangler d1 execute DB --local` with `--command` or `--file`, answered as JSON. The
    /// server writes the same file meanwhile (its objects' alarms, the archive): a statement
    /// refused as `SQLITE_BUSY` (locked before it ran, so nothing of it was written) is run
    /// again after a pause, at most [`BUSY_ATTEMPTS`] times, as the chaos harness does.
    fn d1<T: DeserializeOwned>(&self, how: &str, what: &str) -> Res<T> {
        let mut attempt = 1;
        loop {
            match self.d1_once(how, what) {
                Err(BenchError::Wrangler { stdout, stderr })
                    if attempt < BUSY_ATTEMPTS
                        && (stdout.contains("SQLITE_BUSY") || stderr.contains("SQLITE_BUSY")) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(500 * u64::from(attempt)));
                    attempt += 1;
                }
                answer => return answer,
            }
        }
    }

    fn d1_once<T: DeserializeOwned>(&self, how: &str, what: &str) -> Res<T> {
        let output = Command::new("wrangler")
            // Its answer is read from stdout, which a debug log level would interleave.
            .env_remove("WRANGLER_LOG")
            .args([
                "d1",
                "execute",
                "DB",
                "--local",
                "--yes",
                "--json",
                "--persist-to",
            ])
            .arg(&self.state)
            .args([how, what])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(BenchError::io("cannot run wrangler"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(BenchError::Wrangler {
                stdout: stdout.into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        serde_json::from_str(&stdout).map_err(|source| BenchError::Json {
            what: "wrangler d1 answer".to_owned(),
            source,
            text: Some(stdout.into_owned()),
        })
    }

    /// The rows of the last statement of `sql`.
    fn rows<T: DeserializeOwned>(&self, sql: &str) -> Res<Vec<T>> {
        let answer: Vec<D1Statement<T>> = self.d1("--command", sql)?;
        Ok(answer
            .into_iter()
            .last()
            .map(|statement| statement.results)
            .unwrap_or_default())
    }

    fn count(&self, sql: &str, what: &str) -> Res<u64> {
        self.rows::<CountRow>(sql)?
            .first()
            .map(|row| row.n)
            .ok_or_else(|| BenchError::unexpected(what))
    }

    /// Adds `count` queued jobs in one statement: a recursive CTE copies the template job's
    /// intent (same subject, input, hashes, requirements) under new ids and idempotency keys.
    pub(crate) fn seed(&mut self, count: u64) -> Res<Duration> {
        if count == 0 {
            return Ok(Duration::ZERO);
        }
        self.seeded_batches += 1;
        let batch = self.seeded_batches;
        let base = now_ms();
        let sql = format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
INSERT INTO jobs (id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
                  subject_version_id, subject_content_hash, subject_environment, input, input_hash,
                  requirements, execution_kind, runtime, external, problem_type, tags, created_at, updated_at)
SELECT printf('job_bench%02d_%07d', {batch}, i), t.organization_id, printf('bench-%02d-%07d', {batch}, i),
       t.intent_hash, t.subject_kind, t.subject_artifact_id, t.subject_version_id, t.subject_content_hash,
       t.subject_environment, t.input, t.input_hash, t.requirements, t.execution_kind, t.runtime,
       t.external, t.problem_type, t.tags, {base} + i, {base} + i
  FROM n, jobs AS t WHERE t.id = '{template}';\n",
            template = self.template_job
        );
        let file = self.state.join(format!("seed-{batch}.sql"));
        std::fs::write(&file, sql).map_err(BenchError::io("write seed file"))?;
        let start = Instant::now();
        self.d1::<IgnoredAny>("--file", &file.to_string_lossy())?;
        Ok(start.elapsed())
    }

    /// Seeds as many jobs as the queue lacks to hold `wanted`: the seeding's time.
    pub(crate) fn top_up(&mut self, wanted: u64) -> Res<Duration> {
        let queued = self.queued()?;
        self.seed(wanted.saturating_sub(queued))
    }

    /// The organization's queued jobs.
    pub(crate) fn queued(&self) -> Res<u64> {
        self.count(
            &format!(
                "SELECT count(*) AS n FROM jobs WHERE organization_id = '{}' AND state = 'queued'",
                self.org
            ),
            "count of queued jobs",
        )
    }

    /// The organization's jobs that hold a lease.
    pub(crate) fn leased(&self) -> Res<u64> {
        self.count(
            &format!(
                "SELECT count(*) AS n FROM jobs WHERE organization_id = '{}' AND {LEASED}",
                self.org
            ),
            "count of leased jobs",
        )
    }

    /// Moves every lease of the organization to `at` (milliseconds since the epoch).
    pub(crate) fn move_leases(&self, at: u64) -> Res<()> {
        self.rows::<IgnoredAny>(&format!(
            "UPDATE jobs SET lease_expires_at = {at} WHERE organization_id = '{}' AND {LEASED}",
            self.org
        ))
        .map(drop)
    }

    /// `EXPLAIN QUERY PLAN` of `sql`, as local D1 plans it: each row's detail.
    pub(crate) fn plan(&self, sql: &str) -> Res<Vec<String>> {
        let rows: Vec<PlanRow> = self.rows(&format!("EXPLAIN QUERY PLAN {sql}"))?;
        Ok(rows.into_iter().map(|row| row.detail).collect())
    }
}
