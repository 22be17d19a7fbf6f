//! `edgerunner-bench`: the load generator behind `scripts/bench`.
//!
//! It drives a local `wrangler dev` (built with the `bench-floor` feature) through the runner
//! SDK on tokio, seeds the queue in bulk through `wrangler d1 execute`, runs the scenarios of
//! BENCHMARKS.md, measures its own CPU use (`/proc/self/stat`), and writes the Markdown table
//! and a JSON file. Every latency is compared with the floor (`POST /__bench/floor`: one hop,
//! one Durable Object round trip, one D1 batch write) measured in the same run, interleaved or
//! right beside the scenario, so that a machine under other load still gives fair ratios.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use edgerunner::admin::AdminClient;
use edgerunner::client::{Assignment, CompletionAnswer, RunnerClient};
use edgerunner::evidence::EvidenceSource;
use edgerunner::heartbeat::HeartbeatConfig;
use edgerunner::http::Http;
use edgerunner::job_env::{JobEnvironment, PassEnv};
use edgerunner::session::{BootstrapToken, Credentials};
use edgerunner::stream::{BatchLimits, ChunkStream};
use edgerunner::workdir::RunnerWorkDir;
use edgerunner::worker::{JobOutcome, ShutdownState, Worker, WorkerConfig};
use edgerunner_protocol::chunk::ChunkKind;
use edgerunner_protocol::completion::{Evidence, EvidenceId};
use edgerunner_protocol::envelope::RunnerId;
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{BenchError, Res};

mod error;

#[derive(Parser, Debug)]
#[command(about = "edgerunner benchmark harness (run it through scripts/bench)")]
struct Args {
    /// The local server, e.g. http://127.0.0.1:8787 (built with the bench-floor feature).
    #[arg(long)]
    server: String,
    /// An admin API key (scripts/bootstrap-admin --state DIR).
    #[arg(long, env = "EDGERUNNER_BENCH_API_KEY")]
    api_key: String,
    /// The `--persist-to` directory of the running server (for `wrangler d1 execute`).
    #[arg(long)]
    state: PathBuf,
    /// Workerd's own socket, as the end-to-end suites use [default: --server], for what
    /// wrangler's dev proxy (a local tool with no part in production) would distort: the chatty
    /// jobs' runner (the proxy copies every body), the reap passes (see `reap_pass`), and the
    /// setup and admin requests (evaluation runs, runners, releases, enqueues).
    #[arg(long)]
    direct_server: Option<String>,
    /// Tiny sizes: every scenario in a few seconds.
    #[arg(long)]
    smoke: bool,
    /// Where to write the Markdown report.
    #[arg(long)]
    markdown: PathBuf,
    /// Where to write the JSON results.
    #[arg(long)]
    json: PathBuf,
    /// The command line to print in the report.
    #[arg(long, default_value = "scripts/bench")]
    command: String,
    /// Size of the production build's wasm module from `wrangler deploy --dry-run`.
    #[arg(long)]
    wasm_bytes: u64,
    /// The same module, gzip -9.
    #[arg(long)]
    wasm_gzip_bytes: u64,
    /// The claim's matching query (src/store/queries/claim_candidates.sql).
    #[arg(long)]
    claim_query: PathBuf,
    /// A shell command printing one memory reading as a JSON line,
    /// `{"wasmMemoryBytes", "workerdRssBytes"}` (scripts/bench `--memory-reading`).
    #[arg(long)]
    memory_probe: Option<String>,
    /// Chunks of 256 KiB for the big job (default: 256 in a full run, 4 with --smoke).
    #[arg(long, env = "EDGERUNNER_BENCH_BUNDLE_CHUNKS")]
    bundle_chunks: Option<usize>,
    /// Run only scenario 7 (chatty jobs) at the run's sizes: print its Markdown section on
    /// stdout and write its figures to --json. Needs no floor route: any local server does.
    #[arg(long)]
    chatty_only: bool,
    /// Run only scenario 4 (recovery) with this many leases: print its figures as JSON on
    /// stdout and write them to --json. Needs no floor route: any local server does.
    #[arg(long)]
    recovery_only: Option<usize>,
    /// Run only the hot path's scenarios (8, 9, 1 at 100 queued three times, 2): print their
    /// figures as JSON on stdout and write them to --json. Needs the floor route.
    #[arg(long)]
    hot_only: bool,
    /// Run only scenario 2 (lifecycle throughput) at one size, `RUNNERSxPER_RUNNERxROUNDS`
    /// (e.g. `32x2x3`; runners 1–256, lifecycles per runner 1–1000, rounds 1–50): print its
    /// figures as JSON on stdout. Needs the floor route. For comparing two changes, or for
    /// holding a load while a profiler watches the server.
    #[arg(long, value_parser = parse_lifecycle_plan)]
    lifecycle_only: Option<(usize, usize, usize)>,
    /// With --lifecycle-only: jobs queued beyond the lifecycles' own (0–1,000,000), so that
    /// they run on a queue this deep (the full run's lifecycles follow the claim at 100,000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_LIFECYCLE_DEPTH))]
    lifecycle_depth: u64,
    /// Payload bytes per log chunk for the chatty jobs (the runner's --batch-bytes).
    #[arg(long, env = "EDGERUNNER_BENCH_BATCH_BYTES", default_value_t = BatchLimits::DEFAULT.max_bytes)]
    batch_bytes: usize,
}

/// How often one floor request is sent when the dev proxy answers it with its own `503`.
const FLOOR_TRIES: u32 = 3;

/// The bounds of `--lifecycle-only`: each runner is registered for the run, and the queue is
/// seeded with a job per lifecycle (one SQL statement).
const MAX_LIFECYCLE_RUNNERS: usize = 256;
const MAX_LIFECYCLES_PER_RUNNER: usize = 1000;
const MAX_LIFECYCLE_ROUNDS: usize = 50;
/// Jobs `--lifecycle-depth` may queue beyond the lifecycles' own (the full run's deepest is
/// 100,000, seeded in about 2 s).
const MAX_LIFECYCLE_DEPTH: u64 = 1_000_000;

/// A `--lifecycle-only` value that is not three counts within their bounds.
#[derive(Debug, PartialEq)]
enum LifecyclePlanError {
    /// One of its parts is not a count.
    NotACount { part: String, detail: String },
    /// Three counts, or some other number of them, not within the bounds.
    OutOfBounds { text: String },
}

impl std::fmt::Display for LifecyclePlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotACount { part, detail } => write!(f, "{part:?}: {detail}"),
            Self::OutOfBounds { text } => write!(
                f,
                "{text:?} is not RUNNERSxPER_RUNNERxROUNDS with runners 1–{MAX_LIFECYCLE_RUNNERS}, \
                 lifecycles per runner 1–{MAX_LIFECYCLES_PER_RUNNER}, rounds 1–{MAX_LIFECYCLE_ROUNDS}"
            ),
        }
    }
}

impl std::error::Error for LifecyclePlanError {}

/// `RUNNERSxPER_RUNNERxROUNDS`, each at least 1 and within its bound.
fn parse_lifecycle_plan(text: &str) -> Result<(usize, usize, usize), LifecyclePlanError> {
    let parts: Vec<usize> = text
        .splitn(4, 'x')
        .map(|part| {
            part.parse::<usize>()
                .map_err(|e| LifecyclePlanError::NotACount {
                    part: part.to_owned(),
                    detail: e.to_string(),
                })
        })
        .collect::<Result<_, _>>()?;
    match parts[..] {
        [runners, per_runner, rounds]
            if (1..=MAX_LIFECYCLE_RUNNERS).contains(&runners)
                && (1..=MAX_LIFECYCLES_PER_RUNNER).contains(&per_runner)
                && (1..=MAX_LIFECYCLE_ROUNDS).contains(&rounds) =>
        {
            Ok((runners, per_runner, rounds))
        }
        _ => Err(LifecyclePlanError::OutOfBounds {
            text: text.to_owned(),
        }),
    }
}

/// The queued jobs the lifecycles of `plan` (runners, lifecycles per runner) take in `rounds`
/// rounds each.
fn lifecycle_jobs(plan: &[(usize, usize)], rounds: usize) -> u64 {
    plan.iter()
        .map(|&(runners, per_runner)| (runners * per_runner * rounds) as u64)
        .sum()
}

struct Sizes {
    /// 256 KiB chunks of the big job whose bundle is served (256 = the 64 MiB stream limit).
    bundle_chunks: usize,
    queue_levels: [u64; 3],
    claim_reps: usize,
    lifecycle: [(usize, usize); 3],
    /// Rounds of each lifecycle size, each bracketed by the floor (scenario 2).
    lifecycle_rounds: usize,
    stream: [(usize, usize); 3],
    recovery: usize,
    /// Jobs timed by scenario 9 (pickup latency).
    pickup: usize,
    /// Chatty jobs: (what, shell command).
    chatty: [(&'static str, &'static str); 2],
}

const FULL: Sizes = Sizes {
    bundle_chunks: 256,
    queue_levels: [100, 10_000, 100_000],
    claim_reps: 60,
    lifecycle: [(1, 20), (8, 5), (32, 2)],
    lifecycle_rounds: 5,
    stream: [(0, 200), (4096, 100), (65536, 40)],
    recovery: 10_000,
    pickup: 100,
    chatty: [
        ("`seq 1 200000` (short lines)", "seq 1 200000"),
        (
            "20 MB of 100-byte lines",
            "yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789 | head -n 198020",
        ),
    ],
};

const SMOKE: Sizes = Sizes {
    bundle_chunks: 4,
    queue_levels: [10, 30, 60],
    claim_reps: 5,
    lifecycle: [(1, 2), (8, 1), (32, 1)],
    lifecycle_rounds: 2,
    stream: [(0, 10), (4096, 5), (65536, 3)],
    recovery: 20,
    pickup: 6,
    chatty: [
        ("`seq 1 2000` (short lines)", "seq 1 2000"),
        (
            "200 kB of 100-byte lines",
            "yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789 | head -n 1980",
        ),
    ],
};

/// Requests in one lifecycle: session, claim, heartbeat, 10 chunks, complete.
const LIFECYCLE_REQUESTS: usize = 14;
const RUNTIME: &str = "python3.12";

// ---------------------------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------------------------

/// This process's user + system CPU time (`/proc/self/stat`, clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return f64::NAN;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// Wall and CPU time of one phase.
struct Phase {
    wall: Instant,
    cpu: f64,
}

impl Phase {
    fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: cpu_seconds(),
        }
    }

    /// (wall seconds, client CPU as a fraction of one core).
    fn end(&self) -> (f64, f64) {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        (wall, if wall > 0.0 { cpu / wall } else { 0.0 })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of `samples` (milliseconds).
fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats(samples: &[f64]) -> Value {
    json!({
        "n": samples.len(),
        "p50Ms": round(percentile(samples, 50.0)),
        "p99Ms": round(percentile(samples, 99.0)),
    })
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// The server: admin API, floor, runners, D1
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Answers the harness reads (the fields it uses)
// ---------------------------------------------------------------------------------------------

/// `POST /api/remote-runners`: the new runner and its one-time bootstrap token.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RegisteredRunner {
    runner: RunnerView,
    bootstrap_token: String,
}

#[derive(Deserialize)]
struct RunnerView {
    id: String,
}

/// An enqueued job (`POST /api/remote-runners/jobs`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnqueuedJob {
    id: String,
    organization_id: String,
    /// RFC 3339; the server writes `null` for a time it cannot print.
    created_at: Option<String>,
}

impl EnqueuedJob {
    fn read(answer: Value) -> Res<Self> {
        serde_json::from_value(answer).map_err(BenchError::json("enqueue"))
    }
}

/// `POST /api/evidence/runs`. Its id is an integer or a string (EvalGate has both), read as
/// JSON and matched: serde's untagged enums cannot read numbers under serde_json's
/// `arbitrary_precision`, which the workspace enables.
#[derive(Deserialize)]
struct EvaluationRun {
    id: Value,
}

/// `POST /api/releases/artifacts`.
#[derive(Deserialize)]
struct Artifact {
    id: String,
}

/// `POST /api/releases/artifacts/{id}/versions`.
#[derive(Deserialize)]
struct Version {
    id: u64,
}

/// `GET /__bench/round-trips` (the bench build only).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoundTripTotal {
    d1_round_trips: u64,
}

/// `POST /api/remote-runners/jobs/reap`: one pass's counts, and whether leases remain.
#[derive(Deserialize)]
struct ReapPass {
    examined: u64,
    requeued: u64,
    ended: u64,
    more: bool,
}

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

/// A row of `EXPLAIN QUERY PLAN`.
#[derive(Deserialize)]
struct PlanRow {
    detail: String,
}

struct Bench {
    server: String,
    /// Workerd's own socket (`--direct-server`).
    direct: String,
    api_key: String,
    state: PathBuf,
    admin: AdminClient,
    http: reqwest::Client,
    template_job: String,
    org: String,
    seeded_batches: u32,
}

/// An HTTP client for the local server that drops a connection idle for longer than local
/// workerd keeps it, as the SDK's own client does against a loopback server (`Http::new`).
fn local_http() -> Res<reqwest::Client> {
    reqwest::Client::builder()
        .pool_idle_timeout(edgerunner::http::LOCAL_IDLE_CONNECTION)
        .build()
        .map_err(BenchError::http("http client"))
}

impl Bench {
    async fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Res<T> {
        let answer = self
            .http
            .post(format!("{}{path}", self.direct))
            .bearer_auth(&self.api_key)
            .json(body)
            .send()
            .await
            .map_err(BenchError::http(path))?;
        let status = answer.status();
        let text = answer.text().await.map_err(BenchError::http(path))?;
        if !status.is_success() {
            return Err(BenchError::Status {
                what: format!("POST {path}"),
                status,
                body: text,
            });
        }
        serde_json::from_str(&text).map_err(BenchError::json(path))
    }

    /// The bench build's running total of D1 round trips made for the requests it served
    /// (`GET /__bench/round-trips`, which makes none itself).
    async fn round_trips(&self) -> Res<u64> {
        let path = "/__bench/round-trips";
        let answer = self
            .http
            .get(format!("{}{path}", self.server))
            .send()
            .await
            .map_err(BenchError::http(path))?;
        let text = answer.text().await.map_err(BenchError::http(path))?;
        serde_json::from_str::<RoundTripTotal>(&text)
            .map(|total| total.d1_round_trips)
            .map_err(|_| {
                BenchError::unexpected(format!(
                    "GET {path}: {text} (is the build without bench-floor?)"
                ))
            })
    }

    /// One floor request (`POST /__bench/floor`), its latency. The floor goes through wrangler's
    /// dev proxy, as the runners do, and that proxy now and then answers a POST with a `503` of
    /// its own ("Your worker restarted mid-request") although the Worker restarted nothing (see
    /// scripts/lib.sh `find_direct_url`); the floor has no effect, so such an answer is asked
    /// again, at most [`FLOOR_TRIES`] times in all, and the answered request is the one timed.
    async fn floor(http: &reqwest::Client, server: &str) -> Res<Duration> {
        let mut tries = 0;
        loop {
            tries += 1;
            let start = Instant::now();
            let answer = http
                .post(format!("{server}/__bench/floor"))
                .body("{}")
                .send()
                .await
                .map_err(BenchError::http("floor"))?;
            let status = answer.status();
            let body = answer.bytes().await.map_err(BenchError::http("floor"))?;
            if status.is_success() {
                return Ok(start.elapsed());
            }
            let proxy_restart = status == reqwest::StatusCode::SERVICE_UNAVAILABLE
                && body.starts_with(b"Your worker restarted mid-request");
            if !proxy_restart || tries >= FLOOR_TRIES {
                return Err(BenchError::unexpected(format!(
                    "POST /__bench/floor: {status} after {tries} tries (is the build without bench-floor?)"
                )));
            }
        }
    }

    /// `wrangler d1 execute DB --local` with `--command` or `--file`, answered as JSON.
    fn d1<T: DeserializeOwned>(&self, how: &str, what: &str) -> Res<T> {
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
    fn d1_rows<T: DeserializeOwned>(&self, sql: &str) -> Res<Vec<T>> {
        let answer: Vec<D1Statement<T>> = self.d1("--command", sql)?;
        Ok(answer
            .into_iter()
            .last()
            .map(|statement| statement.results)
            .unwrap_or_default())
    }

    /// `n` runners of the bench's runtime, each taking `max_jobs` jobs at a time.
    async fn register_runners(&self, n: usize, max_jobs: u32) -> Res<Vec<Credentials>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let key = format!("bench-{}-{}", now_ms(), out.len());
            out.push(self.register_runner(&key, RUNTIME, max_jobs).await?);
        }
        Ok(out)
    }

    /// One runner named `key` for prompt jobs of `runtime`: its bootstrap credentials.
    async fn register_runner(&self, key: &str, runtime: &str, max_jobs: u32) -> Res<Credentials> {
        let answer = self
            .admin
            .register_runner(&json!({
                "name": key,
                "runnerKey": key,
                "capabilities": { "executionKinds": ["prompt"], "runtimes": [runtime] },
                "maxConcurrentJobs": max_jobs,
            }))
            .await
            .map_err(BenchError::client("register runner"))?;
        let answer: RegisteredRunner =
            serde_json::from_value(answer).map_err(BenchError::json("register runner"))?;
        Ok(Credentials::Bootstrap {
            runner_id: RunnerId::parse(&answer.runner.id)
                .map_err(BenchError::invalid("runner id"))?,
            token: BootstrapToken::new(&answer.bootstrap_token)
                .map_err(BenchError::client("token"))?,
        })
    }

    /// Enqueues `job` through the admin API: the job as the server answered it.
    async fn enqueue(&self, job: &Value) -> Res<EnqueuedJob> {
        let answer = self
            .admin
            .enqueue(job)
            .await
            .map_err(BenchError::client("enqueue"))?;
        EnqueuedJob::read(answer)
    }

    fn client(&self, credentials: &Credentials) -> Res<Arc<RunnerClient>> {
        let http = Http::new(&self.server).map_err(BenchError::client("http"))?;
        Ok(Arc::new(RunnerClient::new(http, credentials.clone())))
    }

    /// `n` fresh evaluation runs (a completion takes custody of one run), 8 at a time.
    async fn evaluation_runs(&self, n: usize) -> Res<Vec<EvidenceId>> {
        let mut out = Vec::with_capacity(n);
        let stamp = now_ms();
        for chunk in (0..n).collect::<Vec<_>>().chunks(8) {
            let mut tasks = Vec::new();
            for i in chunk {
                let (http, url, key) = (
                    self.http.clone(),
                    format!("{}/api/evidence/runs", self.direct),
                    self.api_key.clone(),
                );
                let body = json!({ "evaluationId": format!("bench-{stamp}-{i}"), "metadata": {} });
                tasks.push(tokio::spawn(async move {
                    let answer = http
                        .post(url)
                        .bearer_auth(key)
                        .json(&body)
                        .send()
                        .await
                        .map_err(BenchError::http("evaluation run"))?;
                    let status = answer.status();
                    let text = answer
                        .text()
                        .await
                        .map_err(BenchError::http("evaluation run"))?;
                    if !status.is_success() {
                        return Err(BenchError::Status {
                            what: "POST /api/evidence/runs".to_owned(),
                            status,
                            body: text,
                        });
                    }
                    serde_json::from_str::<EvaluationRun>(&text)
                        .map_err(BenchError::json("evaluation run"))
                }));
            }
            for task in tasks {
                let run = task.await.map_err(BenchError::task("task"))??;
                out.push(match &run.id {
                    Value::Number(n) => EvidenceId::Integer(
                        n.as_u64().ok_or_else(|| BenchError::unexpected("run id"))?,
                    ),
                    Value::String(s) => EvidenceId::Text(s.clone()),
                    other => {
                        return Err(BenchError::unexpected(format!("evaluation run id {other}")))
                    }
                });
            }
        }
        Ok(out)
    }

    /// Adds `count` queued jobs in one statement: a recursive CTE copies the template job's
    /// intent (same subject, input, hashes, requirements) under new ids and idempotency keys.
    fn seed(&mut self, count: u64) -> Res<Duration> {
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

    fn queued(&self) -> Res<u64> {
        let rows: Vec<CountRow> = self.d1_rows(&format!(
            "SELECT count(*) AS n FROM jobs WHERE organization_id = '{}' AND state = 'queued'",
            self.org
        ))?;
        rows.first()
            .map(|row| row.n)
            .ok_or_else(|| BenchError::unexpected("count of queued jobs"))
    }
}

fn evidence(run: EvidenceId) -> Evidence {
    Evidence {
        evaluation_run_id: run,
        test_result_ids: Vec::new(),
        cost_record_ids: Vec::new(),
        model_call_ids: Vec::new(),
        trace_id: None,
        extra: Map::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// Scenario 1: claim latency at three queue depths, each claim interleaved with one floor request.
async fn claim_latency(bench: &mut Bench, sizes: &Sizes) -> Res<Value> {
    let mut levels = Vec::new();
    let mut queued = bench.queued()?;
    for level in sizes.queue_levels {
        let want = level + sizes.claim_reps as u64;
        let seed_time = bench.seed(want.saturating_sub(queued))?;
        queued = bench.queued()?;
        eprintln!(
            "claim latency: {queued} queued (seeded in {:.1} s)",
            seed_time.as_secs_f64()
        );
        let runner = bench.register_runners(1, 1).await?;
        let client = bench.client(&runner[0])?;
        client
            .session()
            .await
            .map_err(BenchError::client("session"))?;
        let runs = bench.evaluation_runs(sizes.claim_reps).await?;
        let floor_http = local_http()?;
        Bench::floor(&floor_http, &bench.server).await?;
        let (mut claims, mut floors) = (Vec::new(), Vec::new());
        let phase = Phase::start();
        for run in runs {
            floors.push(ms(Bench::floor(&floor_http, &bench.server).await?));
            let start = Instant::now();
            let assignment = client
                .claim()
                .await
                .map_err(BenchError::client("claim"))?
                .ok_or_else(|| BenchError::unexpected("no job to claim"))?;
            claims.push(ms(start.elapsed()));
            succeed(&client, &assignment, None, run, "complete").await?;
        }
        let (wall, cpu) = phase.end();
        levels.push(json!({
            "depth": level,
            "queued": queued,
            "seedSeconds": round(seed_time.as_secs_f64()),
            "claim": stats(&claims),
            "floor": stats(&floors),
            "p50Ratio": round(percentile(&claims, 50.0) / percentile(&floors, 50.0)),
            "p99Ratio": round(percentile(&claims, 99.0) / percentile(&floors, 99.0)),
            "wallSeconds": round(wall),
            "clientCpu": round(cpu),
        }));
        queued = bench.queued()?;
    }
    Ok(Value::Array(levels))
}

/// Scenario 2: full lifecycles with C concurrent runners, in rounds, each bracketed by the
/// floor at the same concurrency and the same number of requests (a floor between two rounds
/// brackets both). A round's ratio is its requests per second over the mean of its two floors;
/// the scenario's ratio is the median of its rounds', so one round that a burst of background
/// load slowed (or the floor beside it) does not decide it.
async fn lifecycle(bench: &Bench, plan: &[(usize, usize)], rounds_each: usize) -> Res<Value> {
    let most = plan.iter().map(|(c, _)| *c).max().unwrap_or(1);
    let runners = bench.register_runners(most, 1).await?;
    let mut out = Vec::new();
    for &(concurrency, per_runner) in plan {
        let per_round = concurrency * per_runner;
        let floor_requests = per_runner * LIFECYCLE_REQUESTS;
        let mut floors = vec![floor_throughput(bench, concurrency, floor_requests).await?];
        let (mut latencies, mut rounds) = (Vec::new(), Vec::new());
        let (mut wall, mut cpu, mut all_trips) = (0.0, 0.0, 0u64);
        for _ in 0..rounds_each {
            let mut runs = bench.evaluation_runs(per_round).await?;
            let trips_before = bench.round_trips().await?;
            let phase = Phase::start();
            let mut tasks = Vec::new();
            for credentials in runners.iter().take(concurrency) {
                let mine: Vec<EvidenceId> = runs.drain(..per_runner).collect();
                let server = bench.server.clone();
                let credentials = credentials.clone();
                tasks.push(tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    for run in mine {
                        let start = Instant::now();
                        one_lifecycle(&server, &credentials, run).await?;
                        latencies.push(ms(start.elapsed()));
                    }
                    Ok::<_, BenchError>(latencies)
                }));
            }
            for task in tasks {
                latencies.extend(task.await.map_err(BenchError::task("task"))??);
            }
            let (round_wall, round_cpu) = phase.end();
            let trips = bench.round_trips().await?.saturating_sub(trips_before);
            all_trips += trips;
            let before = floors.last().copied().unwrap_or(0.0);
            let after = floor_throughput(bench, concurrency, floor_requests).await?;
            floors.push(after);
            let rps = (per_round * LIFECYCLE_REQUESTS) as f64 / round_wall;
            let floor_rps = (before + after) / 2.0;
            rounds.push(json!({
                "requestsPerSecond": round(rps),
                "floorRequestsPerSecond": round(floor_rps),
                "throughputRatio": round(rps / floor_rps),
                "d1RoundTripsPerLifecycle": round(trips as f64 / per_round as f64),
            }));
            wall += round_wall;
            cpu += round_cpu * round_wall;
        }
        let total = per_round * rounds_each;
        let rps = (total * LIFECYCLE_REQUESTS) as f64 / wall;
        let floor_rps = floors.iter().sum::<f64>() / floors.len() as f64;
        let ratios: Vec<f64> = rounds.iter().map(|r| f(&r["throughputRatio"])).collect();
        let ratio = percentile(&ratios, 50.0);
        eprintln!(
            "lifecycle x{concurrency}: {:.1} lifecycles/s, floor {floor_rps:.0} req/s, ratio {ratio} (rounds {ratios:?})",
            total as f64 / wall
        );
        out.push(json!({
            "runners": concurrency,
            "lifecycles": total,
            "lifecycle": stats(&latencies),
            "lifecyclesPerSecond": round(total as f64 / wall),
            "requestsPerSecond": round(rps),
            "floorRequestsPerSecond": round(floor_rps),
            "floorRequestsPerSecondEach": floors.iter().map(|x| round(*x)).collect::<Vec<_>>(),
            "floorLifecyclesPerSecond": round(floor_rps / LIFECYCLE_REQUESTS as f64),
            "rounds": rounds,
            "d1RoundTripsPerLifecycle": round(all_trips as f64 / total as f64),
            "throughputRatio": round(ratio),
            "wallSeconds": round(wall),
            "clientCpu": round(cpu / wall),
        }));
    }
    Ok(Value::Array(out))
}

/// Session, claim, heartbeat, ten chunks, complete: as a runner process would, from a fresh
/// client (so the session exchange is part of it).
async fn one_lifecycle(server: &str, credentials: &Credentials, run: EvidenceId) -> Res<()> {
    let client = Arc::new(RunnerClient::new(
        Http::new(server).map_err(BenchError::client("http"))?,
        credentials.clone(),
    ));
    client
        .session()
        .await
        .map_err(BenchError::client("session"))?;
    let assignment = client
        .claim()
        .await
        .map_err(BenchError::client("claim"))?
        .ok_or_else(|| BenchError::unexpected("no job to claim"))?;
    client
        .heartbeat(assignment.claim_id(), 60)
        .await
        .map_err(BenchError::client("heartbeat"))?;
    let mut stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
    for i in 0..10 {
        stream
            .send(
                ChunkKind::Log,
                json!({ "lines": [{ "stream": "stdout", "line": format!("line {i}") }] }),
            )
            .await
            .map_err(BenchError::client("stream"))?;
    }
    let answer = succeed(
        &client,
        &assignment,
        stream.final_checksum(),
        run,
        "complete",
    )
    .await?;
    if !answer.is_settled() {
        return Err(BenchError::unexpected(format!(
            "completion not accepted: {}",
            answer.rationale
        )));
    }
    Ok(())
}

/// Floor requests per second with `concurrency` tasks of `each` sequential requests.
async fn floor_throughput(bench: &Bench, concurrency: usize, each: usize) -> Res<f64> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let server = bench.server.clone();
        tasks.push(tokio::spawn(async move {
            let http = local_http()?;
            for _ in 0..each {
                Bench::floor(&http, &server).await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    for task in tasks {
        task.await.map_err(BenchError::task("task"))??;
    }
    Ok((concurrency * each) as f64 / start.elapsed().as_secs_f64())
}

/// Scenario 3: appends into one job's stream, one after another (the chain is sequential);
/// before them, warm heartbeats of the same claim. Each heartbeat and each append follows one
/// floor request (interleaved, as the claims are). Answers (appends, heartbeats).
async fn stream_rate(bench: &Bench, sizes: &Sizes) -> Res<(Value, Value)> {
    let runner = bench.register_runners(1, 1).await?;
    let client = bench.client(&runner[0])?;
    let assignment = client
        .claim()
        .await
        .map_err(BenchError::client("claim"))?
        .ok_or_else(|| BenchError::unexpected("no job to claim"))?;
    let mut stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
    let floor_http = local_http()?;
    // The first heartbeat moves the job to running and warms its object; the rest are timed.
    client
        .heartbeat(assignment.claim_id(), 120)
        .await
        .map_err(BenchError::client("heartbeat"))?;
    let (mut beats, mut beat_floors) = (Vec::new(), Vec::new());
    for _ in 0..sizes.claim_reps {
        beat_floors.push(ms(Bench::floor(&floor_http, &bench.server).await?));
        let start = Instant::now();
        client
            .heartbeat(assignment.claim_id(), 120)
            .await
            .map_err(BenchError::client("heartbeat"))?;
        beats.push(ms(start.elapsed()));
    }
    let heartbeats = json!({
        "heartbeat": stats(&beats),
        "floor": stats(&beat_floors),
        "p50Ratio": round(percentile(&beats, 50.0) / percentile(&beat_floors, 50.0)),
        "p99Ratio": round(percentile(&beats, 99.0) / percentile(&beat_floors, 99.0)),
    });
    let mut out = Vec::new();
    for (size, count) in sizes.stream {
        client
            .heartbeat(assignment.claim_id(), 120)
            .await
            .map_err(BenchError::client("heartbeat"))?;
        let payload = if size == 0 {
            json!({ "lines": [{ "stream": "stdout", "line": "ok" }] })
        } else {
            json!({ "data": "x".repeat(size) })
        };
        let payload_bytes = serde_json::to_string(&payload)
            .map_err(BenchError::json("json"))?
            .len();
        // Each append after one floor request (interleaved, as the claims and heartbeats are),
        // so that both see the same background load.
        let (mut latencies, mut floors) = (Vec::new(), Vec::new());
        let phase = Phase::start();
        for _ in 0..count {
            floors.push(ms(Bench::floor(&floor_http, &bench.server).await?));
            let start = Instant::now();
            stream
                .send(ChunkKind::Log, payload.clone())
                .await
                .map_err(BenchError::client("stream"))?;
            latencies.push(ms(start.elapsed()));
        }
        let (_, cpu) = phase.end();
        // The appends' own time: the floor requests between them are not part of the rate.
        let wall = latencies.iter().sum::<f64>() / 1000.0;
        eprintln!("stream {size} B: {:.1} appends/s", count as f64 / wall);
        out.push(json!({
            "payload": if size == 0 { "one log line".to_owned() } else { format!("{} KiB", size / 1024) },
            "payloadBytes": payload_bytes,
            "appends": count,
            "append": stats(&latencies),
            "appendsPerSecond": round(count as f64 / wall),
            "bytesPerSecond": round((count * payload_bytes) as f64 / wall),
            "floor": stats(&floors),
            "p50Ratio": round(percentile(&latencies, 50.0) / percentile(&floors, 50.0)),
            "wallSeconds": round(wall),
            "clientCpu": round(cpu),
        }));
    }
    let runs = bench.evaluation_runs(1).await?;
    succeed(
        &client,
        &assignment,
        stream.final_checksum(),
        runs.into_iter()
            .next()
            .ok_or_else(|| BenchError::unexpected("no run"))?,
        "complete",
    )
    .await?;
    Ok((Value::Array(out), heartbeats))
}

/// Scenario 7: chatty jobs through the runner itself ([`Worker`]: claim, input, heartbeat, the
/// command, its log batched into chunks, completion), one job at a time. The runner and the
/// jobs use their own runtime, so no other queued job is claimed.
async fn chatty(
    bench: &Bench,
    sizes: &Sizes,
    batch_bytes: usize,
    server: &str,
    artifact_id: &str,
    version_id: u64,
) -> Res<Value> {
    const CHATTY_RUNTIME: &str = "bench-chatty";
    let key = format!("bench-chatty-{}", now_ms());
    let credentials = bench.register_runner(&key, CHATTY_RUNTIME, 1).await?;
    let via = if server.trim_end_matches('/') == bench.server {
        "wrangler's dev proxy"
    } else {
        "workerd's own socket"
    };
    let http = Http::new(server).map_err(BenchError::client("http"))?;
    let client = Arc::new(RunnerClient::new(http, credentials.clone()));
    let work_dir =
        RunnerWorkDir::create_in(&std::env::temp_dir()).map_err(BenchError::invalid("work dir"))?;
    // What `runner start` gives a job without --pass-env (the commands need only PATH).
    let job_env = JobEnvironment::new(std::env::vars_os(), &PassEnv::default(), &[])
        .map_err(BenchError::invalid("job environment"))?;
    let runs = bench.evaluation_runs(sizes.chatty.len()).await?;
    let mut out = Vec::new();
    for ((what, command), run) in sizes.chatty.iter().zip(runs) {
        let mut job = bench_job("bench-chatty", artifact_id, version_id, what);
        job["input"]["evaluationRunId"] = match run {
            EvidenceId::Integer(n) => json!(n),
            EvidenceId::Text(s) => json!(s),
        };
        job["requirements"]["runtime"] = json!(CHATTY_RUNTIME);
        job["requirements"]["limits"]["outputBytes"] = json!(64 * 1024 * 1024);
        let job = bench.enqueue(&job).await?;
        let worker = Worker::new(
            Arc::clone(&client),
            WorkerConfig {
                command: (*command).to_owned(),
                exec_dir: std::env::temp_dir(),
                capacity: 1,
                poll_interval: Duration::from_millis(200),
                claim_wait: 0,
                heartbeat: HeartbeatConfig::DEFAULT,
                grace: Duration::from_secs(5),
                max_jobs: Some(1),
                exit_when_idle: true,
                work_dir: work_dir.clone(),
                keep_work: false,
                batch: BatchLimits {
                    max_bytes: batch_bytes,
                    ..BatchLimits::DEFAULT
                },
                evidence: EvidenceSource {
                    input_field: Some("evaluationRunId".into()),
                    api: None,
                },
                job_env: job_env.clone(),
                run_as: None,
            },
        );
        let (_keep, shutdown) = tokio::sync::watch::channel(ShutdownState::Running);
        let phase = Phase::start();
        let summary = worker.run(shutdown).await;
        let (wall, cpu) = phase.end();
        let report = summary
            .jobs
            .first()
            .ok_or_else(|| BenchError::unexpected("the chatty job was not claimed"))?;
        if report.job_id != job.id {
            return Err(BenchError::unexpected(format!(
                "claimed {} instead of the chatty job",
                report.job_id
            )));
        }
        match &report.outcome {
            JobOutcome::Completed { status, .. } if status.as_str() == "succeeded" => {}
            other => {
                return Err(BenchError::unexpected(format!(
                    "the chatty job {what}: {other:?}"
                )))
            }
        }
        let output = report
            .output
            .as_ref()
            .ok_or_else(|| BenchError::unexpected("no output figures"))?;
        let upload = output.upload.as_secs_f64();
        eprintln!(
            "chatty {what}: {} lines, {} bytes in {} chunks, stored after {upload:.2} s",
            output.lines, output.output_bytes, output.chunks
        );
        out.push(json!({
            "what": what,
            "batchBytes": batch_bytes,
            "via": via,
            "command": command,
            "lines": output.lines,
            "outputBytes": output.output_bytes,
            "chunks": output.chunks,
            "payloadBytes": output.payload_bytes,
            "linesNotSent": output.lines_over_limit + output.lines_over_stream_limit,
            "commandSeconds": round(output.command.as_secs_f64()),
            "uploadSeconds": round(upload),
            "linesPerSecond": round(output.lines as f64 / upload),
            "outputBytesPerSecond": round(output.output_bytes as f64 / upload),
            "payloadBytesPerSecond": round(output.payload_bytes as f64 / upload),
            "jobSeconds": round(wall),
            "clientCpu": round(cpu),
        }));
    }
    work_dir.remove_if_empty();
    Ok(Value::Array(out))
}

fn chatty_markdown(r: &Value) -> String {
    let via = r["chatty"][0]["via"]
        .as_str()
        .unwrap_or("wrangler's dev proxy");
    let mut md = format!(
        "\n## 7. Chatty jobs\n\nOne job at a time through the runner itself (`Worker`, as `edgerunner runner start` runs it, with its default batching unless the table says otherwise: 256 KiB of payload or 100,000 lines per chunk, 250 ms): claim, input, heartbeat, the command, its log batched into chunks while it runs, completion. The runner talks to the server through {via}. Upload: from the command's start until its last log chunk was stored; the rates divide by it. Payload is the chunks' stable JSON as the server counts it: a chunk is `{{\"segments\": [{{\"stream\", \"text\"}}]}}`, each run of lines from one output one string, so a line costs its text and its newline escaped (2 bytes), plus about 30 bytes where the output switches between stdout and stderr.\n\n| job | batch bytes | lines | output bytes | chunks | payload bytes | command s | upload s | lines/s | output MB/s | payload MB/s | whole job s | client CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in r["chatty"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {:.0}% |\n",
            c["what"].as_str().unwrap_or(""),
            c["batchBytes"],
            c["lines"],
            c["outputBytes"],
            c["chunks"],
            c["payloadBytes"],
            c["commandSeconds"],
            c["uploadSeconds"],
            c["linesPerSecond"],
            f(&c["outputBytesPerSecond"]) / 1e6,
            f(&c["payloadBytesPerSecond"]) / 1e6,
            c["jobSeconds"],
            f(&c["clientCpu"]) * 100.0
        ));
    }
    md
}

/// A prompt job of the bench's one release, staged, with the runners' requirements.
fn bench_job(key: &str, artifact_id: &str, version_id: u64, question: &str) -> Value {
    json!({
        "idempotencyKey": format!("{key}-{}", now_ms()),
        "subject": { "kind": "prompt", "artifactId": artifact_id, "versionId": version_id, "environment": "staging" },
        "input": { "question": question },
        "requirements": {
            "executionKind": "prompt", "runtime": RUNTIME,
            "limits": { "cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1_048_576 },
            "network": { "mode": "deny_all" }, "streaming": true, "cancellation": true,
        },
    })
}

/// The operations whose D1 round trips scenario 8 counts, in the order it makes them.
const COUNTED_OPERATIONS: &[(&str, &str)] = &[
    ("session", "session exchange (bootstrap token)"),
    ("claimNothingQueued", "claim, nothing queued"),
    (
        "claimNothingQueuedAgain",
        "claim, nothing queued, again (nothing changed since)",
    ),
    (
        "claimIdle",
        "claim, idle (nothing queued since its last claims found nothing)",
    ),
    (
        "claimLongPoll",
        "claim with a 1 s long poll, nothing queued",
    ),
    ("enqueue", "enqueue (admin)"),
    ("claimFound", "claim, a job found (after the idle claims)"),
    ("heartbeatFirst", "first heartbeat"),
    ("heartbeatWarm", "heartbeat, warm"),
    ("chunkFirst", "first chunk"),
    ("chunkWarm", "chunk, warm"),
    ("completion", "completion"),
    ("cancelQueued", "cancel a queued job (admin)"),
];

/// Scenario 8: D1 round trips per operation, counted by the Worker itself. The bench build
/// adds every request's round trips (the edge's and its objects') to a running total; one
/// runner makes each operation through the SDK, alone on the server, and the total's
/// difference across it is its count. Runs while the organization's queue is empty.
async fn round_trips(bench: &Bench, artifact_id: &str, version_id: u64) -> Res<Value> {
    let runner = bench.register_runners(1, 1).await?.remove(0);
    let client = bench.client(&runner)?;
    let run = bench.evaluation_runs(1).await?.remove(0);
    let mut tally = Tally::start(bench).await?;
    client
        .session()
        .await
        .map_err(BenchError::client("session"))?;
    tally.mark(bench, Some("session")).await?;
    let none = client.claim().await.map_err(BenchError::client("claim"))?;
    tally.mark(bench, Some("claimNothingQueued")).await?;
    let again = client.claim().await.map_err(BenchError::client("claim"))?;
    tally.mark(bench, Some("claimNothingQueuedAgain")).await?;
    let idle = client.claim().await.map_err(BenchError::client("claim"))?;
    tally.mark(bench, Some("claimIdle")).await?;
    let waited = client
        .claim_waiting(1)
        .await
        .map_err(BenchError::client("claim"))?;
    tally.mark(bench, Some("claimLongPoll")).await?;
    if none.is_some() || again.is_some() || idle.is_some() || waited.is_some() {
        return Err(BenchError::unexpected(
            "round trips: the queue was not empty",
        ));
    }
    let job = bench_job("bench-trips", artifact_id, version_id, "round trips");
    bench.enqueue(&job).await?;
    tally.mark(bench, Some("enqueue")).await?;
    let assignment = client
        .claim()
        .await
        .map_err(BenchError::client("claim"))?
        .ok_or_else(|| BenchError::unexpected("round trips: the enqueued job was not claimed"))?;
    tally.mark(bench, Some("claimFound")).await?;
    for name in ["heartbeatFirst", "heartbeatWarm"] {
        client
            .heartbeat(assignment.claim_id(), 60)
            .await
            .map_err(BenchError::client("heartbeat"))?;
        tally.mark(bench, Some(name)).await?;
    }
    let mut stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
    for (i, name) in ["chunkFirst", "chunkWarm"].into_iter().enumerate() {
        let line = json!({ "segments": [{ "stream": "stdout", "text": format!("line {i}\n") }] });
        stream
            .send(ChunkKind::Log, line)
            .await
            .map_err(BenchError::client("stream"))?;
        tally.mark(bench, Some(name)).await?;
    }
    let answer = succeed(
        &client,
        &assignment,
        stream.final_checksum(),
        run,
        "complete",
    )
    .await?;
    tally.mark(bench, Some("completion")).await?;
    if !answer.is_settled() {
        return Err(BenchError::unexpected(format!(
            "round trips: completion not accepted: {}",
            answer.rationale
        )));
    }
    let queued = bench
        .enqueue(&bench_job(
            "bench-trips-cancel",
            artifact_id,
            version_id,
            "cancelled",
        ))
        .await?;
    tally.mark(bench, None).await?;
    bench
        .admin
        .cancel_job(&queued.id, "round trips: cancel")
        .await
        .map_err(BenchError::client("cancel"))?;
    tally.mark(bench, Some("cancelQueued")).await?;
    Ok(Value::Object(tally.counts))
}

/// Completes `assignment` as succeeded (the bench's one result), with its stream's final
/// checksum and one evaluation run as evidence: the server's answer.
async fn succeed(
    client: &RunnerClient,
    assignment: &Assignment,
    final_checksum: Option<Sha256Hex>,
    run: EvidenceId,
    what: &str,
) -> Res<CompletionAnswer> {
    let done = assignment.completion(
        CompletionStatus::Succeeded,
        Some(stable_json::hash(&json!({ "ok": true }))),
        final_checksum,
        evidence(run),
    );
    client
        .complete(&done)
        .await
        .map_err(BenchError::client(what))
}

/// Runners that long-poll in scenario 9, and the CLI's default wait they use.
const PICKUP_RUNNERS: usize = 32;
const PICKUP_WAIT_SECONDS: u32 = 10;

/// Scenario 9: job pickup latency. 32 runners long-poll (`waitSeconds` 10, the CLI's default)
/// on an empty queue; jobs are enqueued one at a time, each once the previous one was picked
/// up, and the latency is from just before the enqueue request to the moment a runner holds
/// the claim's answer. Each runner completes what it gets and long-polls again. The first jobs
/// warm the objects and are not counted.
async fn pickup(bench: &Bench, artifact_id: &str, version_id: u64, jobs: usize) -> Res<Value> {
    const WARM_UP: usize = 4;
    let total = jobs + WARM_UP;
    let runs = bench.evaluation_runs(total).await?;
    let runs = Arc::new(std::sync::Mutex::new(runs));
    let runners = bench.register_runners(PICKUP_RUNNERS, 4).await?;
    let (picked, mut pickups) = tokio::sync::mpsc::unbounded_channel::<(String, Instant, u64)>();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for credentials in &runners {
        let client = bench.client(credentials)?;
        let (picked, runs, stop) = (picked.clone(), Arc::clone(&runs), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            let mut errors = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let assignment = match client.claim_waiting(PICKUP_WAIT_SECONDS).await {
                    Ok(Some(assignment)) => assignment,
                    Ok(None) => continue,
                    Err(error) if errors < 20 => {
                        errors += 1;
                        eprintln!("pickup: claim failed: {error}");
                        continue;
                    }
                    Err(source) => return Err(BenchError::client("pickup claim")(source)),
                };
                let (at, wall) = (Instant::now(), now_ms());
                let _ = picked.send((assignment.job_id().as_str().to_owned(), at, wall));
                let run = runs
                    .lock()
                    .map_err(|_| BenchError::unexpected("runs lock"))?
                    .pop()
                    .ok_or_else(|| {
                        BenchError::unexpected("pickup: more jobs picked up than enqueued")
                    })?;
                let stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
                succeed(
                    &client,
                    &assignment,
                    stream.final_checksum(),
                    run,
                    "pickup complete",
                )
                .await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    let mut latencies = Vec::new();
    let mut since_commit = Vec::new();
    let mut enqueue_ms = Vec::new();
    for i in 0..total {
        let job = bench_job(
            "bench-pickup",
            artifact_id,
            version_id,
            &format!("pickup {i}"),
        );
        let start = Instant::now();
        let enqueued = bench
            .admin
            .enqueue(&job)
            .await
            .map_err(BenchError::client("enqueue"))?;
        enqueue_ms.push(ms(start.elapsed()));
        let enqueued = EnqueuedJob::read(enqueued)?;
        let id = enqueued.id;
        let created = enqueued
            .created_at
            .as_deref()
            .and_then(|t| edgerunner_protocol::time::UnixMillis::parse_rfc3339(t).ok())
            .ok_or_else(|| BenchError::unexpected("pickup: the job has no createdAt"))?
            .get();
        let (got, at, wall) = tokio::time::timeout(Duration::from_secs(30), pickups.recv())
            .await
            .map_err(|_| {
                BenchError::unexpected(format!("pickup: job {i} was not picked up within 30 s"))
            })?
            .ok_or_else(|| BenchError::unexpected("pickup: every runner stopped"))?;
        if got != id {
            return Err(BenchError::unexpected(format!(
                "pickup: {got} was picked up, not {id}"
            )));
        }
        if i >= WARM_UP {
            latencies.push(ms(at.duration_since(start)));
            since_commit.push(wall as f64 - created as f64);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    // Each runner stops after its long poll ends (a dropped long poll could still be granted
    // the next scenario's job; see ARCHITECTURE.md "Idle runners").
    for task in tasks {
        tokio::time::timeout(
            Duration::from_secs(u64::from(PICKUP_WAIT_SECONDS) + 30),
            task,
        )
        .await
        .map_err(|_| BenchError::unexpected("pickup: a runner did not stop"))?
        .map_err(BenchError::task("pickup task"))??;
    }
    Ok(json!({
        "runners": PICKUP_RUNNERS,
        "waitSeconds": PICKUP_WAIT_SECONDS,
        "jobs": jobs,
        "pickupMs": stats(&since_commit),
        "fromRequestMs": stats(&latencies),
        "enqueueMs": stats(&enqueue_ms),
    }))
}

fn pickup_markdown(r: &Value) -> String {
    let p = &r["pickup"];
    if !p.is_object() {
        return String::new();
    }
    let goal = f(&p["pickupMs"]["p50Ms"]) <= 50.0;
    format!(
        "\n## 9. Job pickup latency\n\n{} runners long-poll (`waitSeconds` {}, the runner CLI's default) on an empty queue; {} jobs are enqueued one at a time, each after the previous one was picked up (the first 4 warm the objects and are not counted). **Enqueued → claim held** runs from the job's `createdAt` (the server's clock when it began to handle the enqueue request, before its reads and its write) to the moment a runner holds the claim's answer (the load generator's clock; both clocks are this machine's). The second row runs from just before the enqueue request instead, so it includes the enqueue's own work (its authentication, release and idempotency reads, the write and the answer). The runners talk through wrangler's dev proxy; the enqueues, as every admin request of the bench, go to workerd's own socket.\n\n| | p50 | p99 |\n|---|---|---|\n| enqueued → claim held (ms) | {} | {} |\n| enqueue request sent → claim held (ms) | {} | {} |\n| the enqueue request alone (ms) | {} | {} |\n\nGoal p50 ≤ 50 ms (enqueued → claim held): {}.\n",
        p["runners"],
        p["waitSeconds"],
        p["jobs"],
        p["pickupMs"]["p50Ms"],
        p["pickupMs"]["p99Ms"],
        p["fromRequestMs"]["p50Ms"],
        p["fromRequestMs"]["p99Ms"],
        p["enqueueMs"]["p50Ms"],
        p["enqueueMs"]["p99Ms"],
        verdict(goal),
    )
}

/// The capacity model's workload: what an idle and a busy runner send.
const MODEL_POLL_SECONDS: f64 = 2.0;
const MODEL_QUIET_SECONDS: f64 = 30.0;
const MODEL_HEARTBEAT_SECONDS: f64 = 5.0;
const MODEL_CHUNK_SECONDS: f64 = 1.0;
/// D1 queries/s one database is taken to serve.
const MODEL_D1_QPS: f64 = 1000.0;
/// Scenario 8's counts before the hot-path work (commit 7b0ce23, the same scenario): a claim
/// that found nothing, a warm heartbeat, a warm chunk. There was no long poll.
const BEFORE_CLAIM_NOTHING: f64 = 2.0;
const BEFORE_HEARTBEAT: f64 = 3.0;
const BEFORE_CHUNK: f64 = 3.0;

/// D1 queries per second of (an idle runner polling, an idle runner long-polling, a busy
/// runner), from scenario 8's counts. An idle runner's claims cost `claimIdle` each, plus one
/// confirming read (`claimNothingQueuedAgain`) per quiet period.
fn capacity(r: &Value) -> Option<(f64, f64, f64)> {
    let c = &r["roundTrips"];
    let n = |k: &str| c[k].as_f64();
    let refresh = n("claimNothingQueuedAgain")? / MODEL_QUIET_SECONDS;
    let polling = n("claimIdle")? / MODEL_POLL_SECONDS + refresh;
    let long_polling = n("claimLongPoll")? / f64::from(PICKUP_WAIT_SECONDS) + refresh;
    let busy =
        n("heartbeatWarm")? / MODEL_HEARTBEAT_SECONDS + n("chunkWarm")? / MODEL_CHUNK_SECONDS;
    Some((polling, long_polling, busy))
}

fn capacity_markdown(r: &Value) -> String {
    let Some((polling, long_polling, busy)) = capacity(r) else {
        return String::new();
    };
    let runners = |qps: f64| {
        if qps > 0.0 {
            format!("{:.0}", MODEL_D1_QPS / qps)
        } else {
            "unbounded by D1".to_owned()
        }
    };
    let before_idle = BEFORE_CLAIM_NOTHING / MODEL_POLL_SECONDS;
    let before_busy =
        BEFORE_HEARTBEAT / MODEL_HEARTBEAT_SECONDS + BEFORE_CHUNK / MODEL_CHUNK_SECONDS;
    format!(
        "\n## 10. Capacity model\n\nD1 queries per second per runner, from the counts of section 8, and the runners one D1 database carries at {:.0} queries/s. An idle runner polls every {:.0} s (the published SDK's loop and the CLI's `--poll-interval`) or long-polls {} s per claim (the CLI's default); its object re-reads D1 once per {:.0} s quiet period. A busy runner holds one job, heartbeats every {:.0} s and sends one chunk per {:.0} s. \"Before\" is the same scenario at commit 7b0ce23 (a claim that found nothing: {:.0} round trips; warm heartbeat and chunk: {:.0} each; no long poll).\n\n| runner | q/s before | runners before | q/s now | runners now | goal |\n|---|---|---|---|---|---|\n| idle, polling every {:.0} s | {:.3} | {} | {:.3} | {} | ≥ 10,000: **{}** |\n| idle, long-polling {} s | – | – | {:.3} | {} | ≥ 10,000: **{}** |\n| busy | {:.2} | {} | {:.2} | {} | ≥ 800: **{}** |\n\nNot in the per-runner figures: each job enqueued or requeued wakes one waiting claim, which reads D1 once and writes the grant; a woken claim whose runner cannot take the job passes the wake on, one more read each. A fleet whose organizations queue J jobs/s, with waiting runners that can take them, adds 2·J queries/s, whatever its size; a waiting claim that was not woken reads once when its wait ends.\n",
        MODEL_D1_QPS,
        MODEL_POLL_SECONDS,
        PICKUP_WAIT_SECONDS,
        MODEL_QUIET_SECONDS,
        MODEL_HEARTBEAT_SECONDS,
        MODEL_CHUNK_SECONDS,
        BEFORE_CLAIM_NOTHING,
        BEFORE_HEARTBEAT,
        MODEL_POLL_SECONDS,
        before_idle,
        runners(before_idle),
        polling,
        runners(polling),
        verdict(polling <= MODEL_D1_QPS / 10_000.0),
        PICKUP_WAIT_SECONDS,
        long_polling,
        runners(long_polling),
        verdict(long_polling <= MODEL_D1_QPS / 10_000.0),
        before_busy,
        runners(before_busy),
        busy,
        runners(busy),
        verdict(busy <= MODEL_D1_QPS / 800.0),
    )
}

/// Differences of the bench build's round-trip total between marks.
struct Tally {
    last: u64,
    counts: Map<String, Value>,
}

impl Tally {
    async fn start(bench: &Bench) -> Res<Self> {
        Ok(Self {
            last: bench.round_trips().await?,
            counts: Map::new(),
        })
    }

    /// Records the round trips since the last mark under `name` (`None`: not counted).
    async fn mark(&mut self, bench: &Bench, name: Option<&str>) -> Res<()> {
        let now = bench.round_trips().await?;
        if let Some(name) = name {
            self.counts.insert(name.to_owned(), json!(now - self.last));
        }
        self.last = now;
        Ok(())
    }
}
fn round_trips_markdown(r: &Value) -> String {
    let counts = &r["roundTrips"];
    if !counts.is_object() {
        return String::new();
    }
    let mut md = String::from(
        "\n## 8. D1 round trips per operation\n\nCounted by the Worker itself: every D1 statement or batch sent (a retry counts again), at the edge and in the objects the request reached, added to a running total by the bench build (`GET /__bench/round-trips`); one runner makes each operation through the SDK, alone on the server, and the total's difference is its count.\n\n| operation | D1 round trips |\n|---|---|\n",
    );
    for (key, label) in COUNTED_OPERATIONS {
        md.push_str(&format!("| {label} | {} |\n", counts[*key]));
    }
    md
}

/// The memory check's first stranger: 90 MB (no credential) to `/session`, whose cap is
/// 16 KiB. The answer must be `413 BODY_TOO_LARGE`; the reading after it shows what the
/// attempt cost the Worker.
async fn oversized_session_body(bench: &Bench) -> Res<Value> {
    const BYTES: usize = 90 * 1024 * 1024;
    let started = Instant::now();
    let res = bench
        .http
        .post(format!("{}/api/remote-runners/session", bench.server))
        .header("content-type", "application/json")
        .body(vec![b' '; BYTES])
        .send()
        .await
        .map_err(BenchError::http("90 MB to /session"))?;
    let status = res.status().as_u16();
    let text = res.text().await.unwrap_or_default();
    if status != 413 || !text.contains("BODY_TOO_LARGE") {
        return Err(BenchError::unexpected(format!(
            "90 MB to /session answered {status}: {text}"
        )));
    }
    Ok(json!({ "bytes": BYTES, "status": status, "ms": started.elapsed().as_millis() as u64 }))
}

/// One memory reading (`--memory-probe`), labelled; `null` figures when there is no probe.
fn memory_reading(probe: Option<&str>, label: &str) -> Res<Value> {
    let Some(probe) = probe else {
        return Ok(json!({ "at": label, "wasmMemoryBytes": null, "workerdRssBytes": null }));
    };
    let out = std::process::Command::new("sh")
        .args(["-c", probe])
        .output()
        .map_err(BenchError::io("memory probe"))?;
    if !out.status.success() {
        return Err(BenchError::unexpected(format!(
            "memory probe failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let mut reading: Value =
        serde_json::from_slice(&out.stdout).map_err(BenchError::json("memory probe output"))?;
    reading["at"] = label.into();
    eprintln!("memory {label}: {reading}");
    Ok(reading)
}

/// Scenario 5, the memory check: one job streams `bundle_chunks` chunks of 256 KiB (at full
/// size, the 64 MiB per-attempt limit) and completes; then its custody bundle is downloaded
/// (streamed by the server) and counted.
async fn big_bundle(bench: &Bench, chunks: usize) -> Res<Value> {
    let runner = bench.register_runners(1, 1).await?;
    let client = bench.client(&runner[0])?;
    let assignment = client
        .claim()
        .await
        .map_err(BenchError::client("claim"))?
        .ok_or_else(|| BenchError::unexpected("no job to claim"))?;
    let mut stream = ChunkStream::new(Arc::clone(&client), assignment.identity());
    let phase = Phase::start();
    for n in 0..chunks {
        if n % 16 == 0 {
            client
                .heartbeat(assignment.claim_id(), 120)
                .await
                .map_err(BenchError::client("heartbeat"))?;
        }
        // A JSON string of exactly 256 KiB as stable JSON.
        let payload = Value::String(format!("{n:08}{}", "m".repeat(256 * 1024 - 10)));
        stream
            .send(ChunkKind::Log, payload)
            .await
            .map_err(BenchError::client("stream"))?;
    }
    let (stream_wall, _) = phase.end();
    let runs = bench.evaluation_runs(1).await?;
    succeed(
        &client,
        &assignment,
        stream.final_checksum(),
        runs.into_iter()
            .next()
            .ok_or_else(|| BenchError::unexpected("no run"))?,
        "complete",
    )
    .await?;
    let job_id = assignment.identity().job_id.as_str().to_owned();
    let path = format!("/api/remote-runners/jobs/{job_id}/bundle");
    let start = Instant::now();
    let mut answer = bench
        .http
        .get(format!("{}{path}", bench.server))
        .bearer_auth(&bench.api_key)
        .send()
        .await
        .map_err(BenchError::http(&path))?;
    if !answer.status().is_success() {
        return Err(BenchError::unexpected(format!(
            "{path}: {}",
            answer.status()
        )));
    }
    let streamed = answer.content_length().is_none();
    let mut bytes = 0usize;
    while let Some(piece) = answer.chunk().await.map_err(BenchError::http(&path))? {
        bytes += piece.len();
    }
    let bundle_wall = start.elapsed().as_secs_f64();
    eprintln!("bundle of {job_id}: {bytes} bytes in {bundle_wall:.1} s (streamed: {streamed})");
    Ok(json!({
        "chunks": chunks,
        "payloadBytes": chunks * 256 * 1024,
        "streamSeconds": round(stream_wall),
        "bundleBytes": bytes,
        "bundleSeconds": round(bundle_wall),
        "streamed": streamed,
    }))
}

/// Scenario 4, recovery: `n` claimed jobs whose leases are pushed into the past through D1, then
/// timed admin reap passes (limit 500, to workerd's own socket: [`reap_pass`]) until `more` is
/// false.
async fn recovery(bench: &Bench, n: usize) -> Res<Value> {
    let per_runner = 250.min(n).max(1);
    let runner_count = n.div_ceil(per_runner);
    let runners = bench
        .register_runners(runner_count, per_runner as u32)
        .await?;
    let claim_phase = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, credentials) in runners.iter().enumerate() {
        let client = bench.client(credentials)?;
        let mine = per_runner.min(n - i * per_runner);
        tasks.spawn(async move {
            // A claim whose answer was lost may still have been granted: it is counted from D1
            // below, so a transport error here only costs a retry.
            let (mut got, mut errors) = (0, 0);
            while got < mine {
                match client.claim().await {
                    Ok(Some(_)) => got += 1,
                    Ok(None) => return Err(BenchError::unexpected("no job to claim")),
                    Err(error) if errors < 20 => {
                        errors += 1;
                        eprintln!("recovery: claim failed, retrying: {error}");
                    }
                    Err(source) => return Err(BenchError::client("claim")(source)),
                }
            }
            Ok::<_, BenchError>(errors)
        });
    }
    // Claiming thousands of jobs here takes longer than a first lease (60 s): every 15 s the
    // leases granted so far move an hour ahead, so none lapses before the measurement (their
    // alarms, finding them alive, re-arm there).
    // The UPDATE shares the local database file with the server, which may hold its lock
    // (SQLITE_BUSY): it is tried again, a bounded number of times.
    let keep_alive = |bench: &Bench| -> Res<()> {
        let ahead = now_ms() + 3_600_000;
        let sql = format!(
            "UPDATE jobs SET lease_expires_at = {ahead} WHERE organization_id = '{}' AND state IN ('claimed', 'running', 'cancel_requested')",
            bench.org
        );
        let mut tries = 0;
        loop {
            match bench.d1_rows::<IgnoredAny>(&sql) {
                Ok(_) => return Ok(()),
                Err(error) if tries < 20 && error.is_database_busy() => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(error) => return Err(error),
            }
        }
    };
    let mut claim_errors = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(15));
    tick.tick().await;
    loop {
        tokio::select! {
            done = tasks.join_next() => match done {
                None => break,
                Some(done) => claim_errors += done.map_err(BenchError::task("task"))??,
            },
            _ = tick.tick() => keep_alive(bench)?,
        }
    }
    let claim_seconds = claim_phase.elapsed().as_secs_f64();
    let leased = |bench: &Bench| -> Res<u64> {
        bench
            .d1_rows::<CountRow>(&format!(
                "SELECT count(*) AS n FROM jobs WHERE organization_id = '{}' AND state IN ('claimed', 'running', 'cancel_requested')",
                bench.org
            ))?
            .first()
            .map(|row| row.n)
            .ok_or_else(|| BenchError::unexpected("count of leased jobs"))
    };
    let leases = leased(bench)?;
    let past = now_ms().saturating_sub(120_000);
    bench.d1_rows::<IgnoredAny>(&format!(
        "UPDATE jobs SET lease_expires_at = {past} WHERE organization_id = '{}' AND state IN ('claimed', 'running', 'cancel_requested')",
        bench.org
    ))?;
    let phase = Phase::start();
    let (mut passes, mut requeued, mut ended, mut examined) = (0u64, 0u64, 0u64, 0u64);
    let mut pass_ms = Vec::new();
    // A failed pass (the server answered an error) is recorded, not fatal: the next pass asks
    // for half as many leases (down to 50), and the report lists every failure.
    let (mut limit, mut failures) = (500u32, Vec::new());
    loop {
        let start = Instant::now();
        let answer = reap_pass(bench, limit).await;
        pass_ms.push(ms(start.elapsed()));
        passes += 1;
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) if failures.len() < 10 => {
                eprintln!("recovery: reap pass with limit {limit} failed: {error}");
                failures.push(format!(
                    "limit {limit} after {:.0} ms: {error}",
                    ms(start.elapsed())
                ));
                limit = (limit / 2).max(50);
                continue;
            }
            Err(error) => return Err(error),
        };
        requeued += answer.requeued;
        ended += answer.ended;
        examined += answer.examined;
        if !answer.more || passes > 200 {
            break;
        }
    }
    let (wall, cpu) = phase.end();
    let still_leased = leased(bench)?;
    eprintln!("recovery: {requeued} requeued in {wall:.1} s ({passes} passes)");
    Ok(json!({
        "leases": leases,
        "claimErrors": claim_errors,
        "runners": runner_count,
        "claimSeconds": round(claim_seconds),
        "seconds": round(wall),
        "passes": passes,
        "passMs": pass_ms.iter().map(|x| round(*x)).collect::<Vec<_>>(),
        "examined": examined,
        "requeued": requeued,
        "ended": ended,
        "stillLeased": still_leased,
        "failedPasses": failures,
        "leasesPerSecond": round(requeued as f64 / wall),
        "clientCpu": round(cpu),
    }))
}

/// One admin reap pass, sent once, to workerd's own socket, on a connection of its own: its
/// answer or the error.
///
/// Not through `AdminClient::reap`, which repeats a pass whose answer was lost: a failed pass
/// is what this scenario counts. And never on a connection that sat idle: local workerd closes
/// a kept-alive connection after 5 s idle, and a request written to it at that moment is lost
/// (cloudflare/workers-sdk#14641). A pass takes seconds, so the next one met such a connection:
/// through wrangler's dev proxy (whose pool to workerd the bench does not control) as its bare
/// `503` "Your worker restarted mid-request", sent straight to workerd on a pooled connection
/// as a reset, in both cases with the pass's work committed and nothing logged by the Worker.
/// Sent straight to workerd on a fresh connection, no pass failed.
async fn reap_pass(bench: &Bench, limit: u32) -> Res<ReapPass> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(BenchError::http("reap client"))?;
    let path = "/api/remote-runners/jobs/reap";
    let answer = client
        .post(format!("{}{path}", bench.direct))
        .bearer_auth(&bench.api_key)
        .json(&json!({ "limit": limit }))
        .send()
        .await
        .map_err(|source| BenchError::NoAnswer {
            what: path.to_owned(),
            source,
        })?;
    let status = answer.status();
    let text = answer.text().await.map_err(BenchError::http(path))?;
    if !status.is_success() {
        return Err(BenchError::Status {
            what: path.to_owned(),
            status,
            body: text.chars().take(200).collect(),
        });
    }
    serde_json::from_str(&text).map_err(BenchError::json(&format!("{path}: not JSON")))
}

/// The claim's matching query planned by local D1 itself: it must search jobs_queue and never
/// scan the jobs table.
fn explain_claim(bench: &Bench, query: &PathBuf) -> Res<Value> {
    let text = std::fs::read_to_string(query).map_err(BenchError::io("read the claim query"))?;
    let mut sql: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join(" ");
    for (param, literal) in [
        ("?7", "10".to_owned()),
        ("?6", "''".to_owned()),
        ("?5", "0".to_owned()),
        ("?4", "0".to_owned()),
        ("?3", format!("'{RUNTIME}'")),
        ("?2", "'prompt'".to_owned()),
        ("?1", format!("'{}'", bench.org)),
    ] {
        sql = sql.replace(param, &literal);
    }
    let rows: Vec<PlanRow> = bench.d1_rows(&format!("EXPLAIN QUERY PLAN {sql}"))?;
    let details: Vec<String> = rows.into_iter().map(|row| row.detail).collect();
    let uses_index = details.iter().any(|d| d.contains("USING INDEX jobs_queue"));
    let scans = details.iter().any(|d| d.contains("SCAN jobs"));
    if !uses_index || scans {
        return Err(BenchError::unexpected(format!(
            "the claim query's plan on local D1 is not an index search: {details:?}"
        )));
    }
    Ok(json!({ "plan": details, "usesJobsQueue": uses_index, "scansJobs": scans }))
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn shell(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_owned();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap_or(0);
    json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "memoryGiB": round(mem as f64 / 1024.0 / 1024.0),
        "kernel": shell("uname", &["-sr"]),
    })
}

fn versions() -> Value {
    /// The one field read of workerd's package.json.
    #[derive(Deserialize)]
    struct Package {
        version: String,
    }
    let workerd = std::fs::read_to_string("node_modules/workerd/package.json")
        .ok()
        .and_then(|t| serde_json::from_str::<Package>(&t).ok())
        .map(|package| package.version)
        .unwrap_or_default();
    json!({
        "rustc": shell("rustc", &["--version"]),
        "node": shell("node", &["--version"]),
        "wrangler": shell("wrangler", &["--version"]),
        "workerd": workerd,
        "edgerunner": shell("git", &["rev-parse", "--short", "HEAD"]),
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn markdown(report: &Value, analysis: &str) -> String {
    let mut md = String::new();
    let r = report;
    md.push_str("# Benchmarks\n\n");
    md.push_str(&format!(
        "Produced by `{}` on {} (UTC). Results also in `benchmarks.json`.\n\n",
        r["command"].as_str().unwrap_or(""),
        r["date"].as_str().unwrap_or("")
    ));
    md.push_str("| | |\n|---|---|\n");
    let m = &r["machine"];
    md.push_str(&format!(
        "| machine | {} × {} cores, {} GiB, {} |\n",
        m["cpu"].as_str().unwrap_or(""),
        m["cores"],
        m["memoryGiB"],
        m["kernel"].as_str().unwrap_or("")
    ));
    let v = &r["versions"];
    md.push_str(&format!(
        "| versions | {}; node {}; wrangler {}; workerd {}; edgerunner {} |\n",
        v["rustc"].as_str().unwrap_or(""),
        v["node"].as_str().unwrap_or(""),
        v["wrangler"].as_str().unwrap_or(""),
        v["workerd"].as_str().unwrap_or(""),
        v["edgerunner"].as_str().unwrap_or("")
    ));
    md.push_str(&format!(
        "| load average (start → end) | {} → {} |\n",
        r["loadAverage"]["start"].as_str().unwrap_or(""),
        r["loadAverage"]["end"].as_str().unwrap_or("")
    ));
    md.push_str(&format!(
        "| sizes | {} |\n",
        r["sizesNote"].as_str().unwrap_or("")
    ));
    md.push_str(&format!(
        "| load generator CPU (whole run) | {:.0}% of one core |\n\n",
        f(&r["clientCpu"]) * 100.0
    ));

    // Targets.
    let claims = r["claim"].as_array().cloned().unwrap_or_default();
    let first = claims.first().cloned().unwrap_or(Value::Null);
    let last = claims.last().cloned().unwrap_or(Value::Null);
    let lc32 = r["lifecycle"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or(Value::Null);
    let depth_ratio = f(&last["claim"]["p50Ms"]) / f(&first["claim"]["p50Ms"]);
    // The same comparison with each depth divided by its own interleaved floor, which removes
    // the drift of the machine's background load between the two measurements.
    let depth_ratio_normalised = f(&last["p50Ratio"]) / f(&first["p50Ratio"]);
    let gzip = f(&r["bundle"]["wasmGzipBytes"]);
    md.push_str("## Targets\n\n| target | measured | |\n|---|---|---|\n");
    md.push_str(&format!(
        "| claim p50 ≤ 1.5× floor (at {} queued) | {:.2}× ({} ms vs {} ms) | {} |\n",
        first["depth"],
        f(&first["p50Ratio"]),
        first["claim"]["p50Ms"],
        first["floor"]["p50Ms"],
        verdict(f(&first["p50Ratio"]) <= 1.5)
    ));
    md.push_str(&format!(
        "| claim p99 ≤ 3× floor (at {} queued) | {:.2}× ({} ms vs {} ms) | {} |\n",
        first["depth"],
        f(&first["p99Ratio"]),
        first["claim"]["p99Ms"],
        first["floor"]["p99Ms"],
        verdict(f(&first["p99Ratio"]) <= 3.0)
    ));
    md.push_str(&format!(
        "| claim p50 ≤ 2.0× floor, the hot path's bound (at {} queued) | {:.2}× | {} |\n",
        first["depth"],
        f(&first["p50Ratio"]),
        verdict(f(&first["p50Ratio"]) <= 2.0)
    ));
    let beats = &r["heartbeats"];
    md.push_str(&format!(
        "| warm heartbeat p50 ≤ 1.3× floor | {:.2}× ({} ms vs {} ms) | {} |\n",
        f(&beats["p50Ratio"]),
        beats["heartbeat"]["p50Ms"],
        beats["floor"]["p50Ms"],
        verdict(f(&beats["p50Ratio"]) <= 1.3)
    ));
    let line = r["stream"]
        .as_array()
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or(Value::Null);
    md.push_str(&format!(
        "| warm chunk p50 ≤ 1.3× floor (one log line) | {:.2}× ({} ms vs {} ms) | {} |\n",
        f(&line["p50Ratio"]),
        line["append"]["p50Ms"],
        line["floor"]["p50Ms"],
        verdict(f(&line["p50Ratio"]) <= 1.3)
    ));
    md.push_str(&format!(
        "| claim p50 at {} queued ≤ 1.2× at {} | {:.2}× (each divided by its own floor: {:.2}×) | {} |\n",
        last["depth"],
        first["depth"],
        depth_ratio,
        depth_ratio_normalised,
        verdict(depth_ratio <= 1.2)
    ));
    md.push_str(&format!(
        "| lifecycle throughput at {} runners ≥ 0.7× floor (median of the rounds) | {:.2}× ({} req/s vs {} req/s) | {} |\n",
        lc32["runners"], f(&lc32["throughputRatio"]), lc32["requestsPerSecond"],
        lc32["floorRequestsPerSecond"], verdict(f(&lc32["throughputRatio"]) >= 0.7)
    ));
    md.push_str(&format!(
        "| lifecycle throughput at {} runners ≥ 0.8× floor, the hot path's bound | {:.2}× | {} |\n",
        lc32["runners"],
        f(&lc32["throughputRatio"]),
        verdict(f(&lc32["throughputRatio"]) >= 0.8)
    ));
    let pickup = &r["pickup"]["pickupMs"];
    md.push_str(&format!(
        "| job pickup p50 ≤ 50 ms, 32 runners long-polling (section 9) | {} ms (p99 {} ms) | {} |\n",
        pickup["p50Ms"],
        pickup["p99Ms"],
        verdict(f(&pickup["p50Ms"]) <= 50.0)
    ));
    if let Some((polling, long_polling, busy)) = capacity(r) {
        md.push_str(&format!(
            "| one D1 database carries ≥ 10,000 idle runners and ≥ 800 busy ones (section 10) | idle {:.0} polling, {:.0} long-polling; busy {:.0} | {} |\n",
            MODEL_D1_QPS / polling.max(1e-9),
            MODEL_D1_QPS / long_polling.max(1e-9),
            MODEL_D1_QPS / busy.max(1e-9),
            verdict(polling.max(long_polling) <= MODEL_D1_QPS / 10_000.0 && busy <= MODEL_D1_QPS / 800.0)
        ));
    }
    let rec = &r["recovery"];
    let failed = rec["failedPasses"].as_array().map_or(0, Vec::len);
    md.push_str(&format!(
        "| recovery of {} expired leases with no failed pass (section 4) | {} requeued, {} still leased, {} failed passes | {} |\n",
        rec["leases"],
        rec["requeued"],
        rec["stillLeased"],
        failed,
        verdict(failed == 0 && rec["stillLeased"].as_u64() == Some(0))
    ));
    md.push_str(&format!(
        "| wasm ≤ 1 MiB gzip | {:.0} KiB gzip ({:.0} KiB raw) | {} |\n\n",
        gzip / 1024.0,
        f(&r["bundle"]["wasmBytes"]) / 1024.0,
        verdict(gzip <= 1024.0 * 1024.0)
    ));
    let peak = r["memory"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["wasmMemoryBytes"].as_f64())
        .fold(f64::NAN, f64::max);
    if peak.is_finite() {
        // Inserted before the blank line that ends the table above.
        md.truncate(md.len() - 1);
        md.push_str(&format!(
            "| wasm memory < 32 MiB throughout (section 6) | {:.2} MiB peak | {} |\n\n",
            peak / 1_048_576.0,
            verdict(peak < 32.0 * 1_048_576.0)
        ));
    }

    md.push_str("## 1. Claim latency by queue depth\n\nEach claim is preceded by one floor request (interleaved, so both see the same background load); the claimed job is then completed outside the timing. The queue is seeded to the depth plus the number of claims, so it never falls below the depth during the measurement.\n\n");
    md.push_str("| depth | queued at start | claims | claim p50 ms | claim p99 ms | floor p50 ms | floor p99 ms | p50 ratio | p99 ratio | client CPU |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for c in &claims {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0}% |\n",
            c["depth"],
            c["queued"],
            c["claim"]["n"],
            c["claim"]["p50Ms"],
            c["claim"]["p99Ms"],
            c["floor"]["p50Ms"],
            c["floor"]["p99Ms"],
            c["p50Ratio"],
            c["p99Ratio"],
            f(&c["clientCpu"]) * 100.0
        ));
    }
    md.push_str("\n## 2. Full lifecycle throughput\n\nA lifecycle is session exchange (fresh client), claim, heartbeat, 10 log chunks, complete: 14 requests. The lifecycles run in rounds; the floor runs at the same concurrency and the same number of requests before the first round and after each one, so two floors bracket every round. A round's ratio compares its requests per second with the mean of its two floors; the ratio is the median of the rounds' (each round's in brackets). Requests/s and floor req/s are over all rounds. D1 round trips per lifecycle are the bench build's count (section 8) over the rounds, divided by the lifecycles: 16 for a runner alone (session 2, claim 2, then one per request), more where racing claims lose a job to another runner and try the next (each lost race is one aborted grant batch).\n\n");
    md.push_str("| runners | lifecycles | lifecycles/s | requests/s | floor req/s | ratio (each round) | D1 round trips per lifecycle | lifecycle p50 ms | lifecycle p99 ms | client CPU |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for l in r["lifecycle"].as_array().cloned().unwrap_or_default() {
        let rounds: Vec<String> = l["rounds"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|round| round["throughputRatio"].to_string())
            .collect();
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {:.0}% |\n",
            l["runners"],
            l["lifecycles"],
            l["lifecyclesPerSecond"],
            l["requestsPerSecond"],
            l["floorRequestsPerSecond"],
            l["throughputRatio"],
            rounds.join(", "),
            l["d1RoundTripsPerLifecycle"],
            l["lifecycle"]["p50Ms"],
            l["lifecycle"]["p99Ms"],
            f(&l["clientCpu"]) * 100.0
        ));
    }
    md.push_str("\n## 3. Stream appends into one job\n\nOne claim, chunks sent one after another through the SDK's `ChunkStream` (the chain is sequential by design). Each append is preceded by one floor request (interleaved, so both see the same background load). Appends/s and bytes/s divide by the appends' own time (their latencies summed), not by the floor requests between them.\n\n");
    md.push_str("| payload | appends | appends/s | bytes/s | append p50 ms | append p99 ms | floor p50 ms | p50 ratio | client CPU |\n|---|---|---|---|---|---|---|---|---|\n");
    for s in r["stream"].as_array().cloned().unwrap_or_default() {
        md.push_str(&format!(
            "| {} ({} B) | {} | {} | {:.0} | {} | {} | {} | {} | {:.0}% |\n",
            s["payload"].as_str().unwrap_or(""),
            s["payloadBytes"],
            s["appends"],
            s["appendsPerSecond"],
            f(&s["bytesPerSecond"]),
            s["append"]["p50Ms"],
            s["append"]["p99Ms"],
            s["floor"]["p50Ms"],
            s["p50Ratio"],
            f(&s["clientCpu"]) * 100.0
        ));
    }
    let rec = &r["recovery"];
    md.push_str(&format!(
        "\n## 4. Recovery of expired leases\n\n{} jobs claimed (in {} s by {} runners in parallel; {} claim answers lost and retried; while they were claimed, the leases granted so far were moved an hour ahead every 15 s, so that none lapsed before the measurement, and each first-lease alarm, finding its lease alive, armed the job's own alarm there), their leases moved 2 minutes into the past with one D1 `UPDATE`, then admin reap passes (`POST /api/remote-runners/jobs/reap`, limit 500) until `more` is false.\n\n| leases | time to requeue all | passes | pass ms | requeued | ended | still leased after |\n|---|---|---|---|---|---|---|\n| {} | {} s | {} | {} | {} | {} | {} |\n",
        rec["leases"], rec["claimSeconds"], rec["runners"], rec["claimErrors"],
        rec["leases"], rec["seconds"], rec["passes"],
        rec["passMs"].as_array().map(|a| a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")).unwrap_or_default(),
        rec["requeued"], rec["ended"], rec["stillLeased"]
    ));
    if let Some(failures) = rec["failedPasses"].as_array().filter(|a| !a.is_empty()) {
        md.push_str("\nFailed passes (the harness then halved the limit, down to 50):\n\n");
        for failure in failures {
            md.push_str(&format!("- {}\n", failure.as_str().unwrap_or("")));
        }
    }
    md.push_str(&format!(
        "\n## 5. Bundle\n\nThe production build (no `bench-floor`), from `wrangler deploy --dry-run --outdir`: {} bytes wasm, {} bytes gzip -9.\n",
        r["bundle"]["wasmBytes"], r["bundle"]["wasmGzipBytes"]
    ));
    md.push_str(&memory_markdown(r));
    md.push_str(&chatty_markdown(r));
    md.push_str(&round_trips_markdown(r));
    md.push_str(&pickup_markdown(r));
    md.push_str(&capacity_markdown(r));
    md.push_str(&format!(
        "\n## Claim query plan on local D1\n\n`EXPLAIN QUERY PLAN` of src/store/queries/claim_candidates.sql (literal values) through `wrangler d1 execute --local`; the run fails unless it searches `jobs_queue` and never scans `jobs`:\n\n```\n{}\n```\n",
        r["explain"]["plan"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n")).unwrap_or_default()
    ));
    md.push_str(&format!(
        "\n## Seeding\n\n{}\n",
        r["seedingNote"].as_str().unwrap_or("")
    ));
    md.push_str("\n## Analysis\n\n<!-- analysis: kept by the harness across runs -->\n");
    md.push_str(analysis.trim());
    md.push_str("\n<!-- /analysis -->\n");
    md
}

/// Bytes as MiB with two decimals, or "–" when not measured.
fn mib(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "–".to_owned(), |b| format!("{:.2}", b / 1_048_576.0))
}

/// Section 6: the Worker's wasm linear memory (and workerd's resident memory) at each point.
fn memory_markdown(r: &Value) -> String {
    let mut md = String::new();
    let big = &r["bigBundle"];
    md.push_str(&format!(
        "\n## 6. Memory\n\nThe Worker's own wasm linear memory (`memory.buffer.byteLength`, read by `GET /__bench/memory`, a route only the bench build has) and the workerd process's resident memory (`VmRSS` in `/proc/<pid>/status`), read by `scripts/bench --memory-reading`. Wasm memory only grows, so each reading is the high-water mark of everything served before it. Goal: under 32 MiB of wasm memory throughout. The big job streamed {} chunks of 256 KiB ({} MiB of payload) in {} s; its bundle, {} bytes, was served in {} s ({}).\n\n| reading | wasm memory MiB | workerd VmRSS MiB |\n|---|---|---|\n",
        big["chunks"],
        mib(&big["payloadBytes"]),
        big["streamSeconds"],
        big["bundleBytes"],
        big["bundleSeconds"],
        if big["streamed"].as_bool() == Some(true) { "streamed: no Content-Length" } else { "NOT streamed: it had a Content-Length" },
    ));
    let mut peak = 0.0f64;
    for reading in r["memory"].as_array().into_iter().flatten() {
        peak = peak.max(reading["wasmMemoryBytes"].as_f64().unwrap_or(0.0));
        md.push_str(&format!(
            "| {} | {} | {} |\n",
            reading["at"].as_str().unwrap_or(""),
            mib(&reading["wasmMemoryBytes"]),
            mib(&reading["workerdRssBytes"]),
        ));
    }
    md.push_str(&format!(
        "\nPeak wasm memory: {} MiB ({}).\n",
        mib(&Value::from(peak)),
        verdict(peak < 32.0 * 1_048_576.0)
    ));
    md
}

fn kept_analysis(path: &PathBuf) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let open = "<!-- analysis: kept by the harness across runs -->";
    match (text.find(open), text.find("<!-- /analysis -->")) {
        (Some(a), Some(b)) if b > a => text[a + open.len()..b].to_owned(),
        _ => "(not written yet)".to_owned(),
    }
}

async fn run(args: Args) -> Res<()> {
    let sizes = if args.smoke { &SMOKE } else { &FULL };
    let started = Phase::start();
    let load_start = loadavg();
    let chatty_server = args.direct_server.as_deref().unwrap_or(&args.server);
    // Setup and admin requests (untimed, or timed only as the enqueue's own figure) go to
    // workerd's own socket: through wrangler's dev proxy, whose pool to workerd the bench does
    // not control, a request now and then meets a connection workerd is closing and gets a
    // bare `503` (cloudflare/workers-sdk#14641; see `reap_pass`). The runners' requests and
    // the floor they are compared with go through the proxy, as they always have.
    let admin = AdminClient::new(
        Http::new(chatty_server).map_err(BenchError::client("http"))?,
        &args.api_key,
    )
    .map_err(BenchError::client("admin"))?;
    let mut bench = Bench {
        server: args.server.trim_end_matches('/').to_owned(),
        direct: chatty_server.trim_end_matches('/').to_owned(),
        api_key: args.api_key.clone(),
        state: args.state.clone(),
        admin,
        http: local_http()?,
        template_job: String::new(),
        org: String::new(),
        seeded_batches: 0,
    };

    // A promoted release and one real job, whose intent the seeded jobs copy.
    let artifact: Artifact = bench
        .post(
            "/api/releases/artifacts",
            &json!({ "kind": "prompt", "name": format!("bench-{}", now_ms()) }),
        )
        .await?;
    let artifact_id = artifact.id;
    let version: Version = bench
        .post(
            &format!("/api/releases/artifacts/{artifact_id}/versions"),
            &json!({ "content": { "template": "{{question}}", "model": "bench" } }),
        )
        .await?;
    let version_id = version.id;
    bench
        .post::<IgnoredAny>(
            &format!("/api/releases/versions/{version_id}/promote"),
            &json!({ "environment": "staging" }),
        )
        .await?;
    let job = bench
        .enqueue(&bench_job(
            "bench-template",
            &artifact_id,
            version_id,
            "bench",
        ))
        .await?;
    bench.template_job = job.id;
    bench.org = job.organization_id;
    bench
        .admin
        .cancel_job(
            &bench.template_job,
            "bench template: its copies are the queue",
        )
        .await
        .map_err(BenchError::client("cancel template"))?;

    if let Some(leases) = args.recovery_only {
        bench.seed(leases as u64)?;
        let recovery = recovery(&bench, leases).await?;
        let report = json!({ "command": args.command, "date": shell("date", &["-u", "+%Y-%m-%d %H:%M"]), "loadAverage": { "start": load_start, "end": loadavg() }, "recovery": recovery });
        let text = serde_json::to_string_pretty(&report).map_err(BenchError::json("json"))? + "\n";
        std::fs::write(&args.json, &text).map_err(BenchError::io("write json"))?;
        print!("{text}");
        return Ok(());
    }
    if args.chatty_only {
        let chatty = chatty(
            &bench,
            sizes,
            args.batch_bytes,
            chatty_server,
            &artifact_id,
            version_id,
        )
        .await?;
        let report = json!({ "command": args.command, "date": shell("date", &["-u", "+%Y-%m-%d %H:%M"]), "loadAverage": { "start": load_start, "end": loadavg() }, "chatty": chatty });
        std::fs::write(
            &args.json,
            serde_json::to_string_pretty(&report).map_err(BenchError::json("json"))? + "\n",
        )
        .map_err(BenchError::io("write json"))?;
        print!("{}", chatty_markdown(&report));
        return Ok(());
    }
    if let Some((runners, per_runner, rounds)) = args.lifecycle_only {
        let queued = bench.queued()?;
        let wanted = lifecycle_jobs(&[(runners, per_runner)], rounds) + args.lifecycle_depth;
        bench.seed(wanted.saturating_sub(queued))?;
        let figures = lifecycle(&bench, &[(runners, per_runner)], rounds).await?;
        println!(
            "{}",
            serde_json::to_string_pretty(&figures).map_err(BenchError::json("json"))?
        );
        return Ok(());
    }
    if args.hot_only {
        return hot_only(
            &args,
            &mut bench,
            sizes,
            &artifact_id,
            version_id,
            &load_start,
        )
        .await;
    }
    // First, while the queue is empty (the template is cancelled).
    let trips = round_trips(&bench, &artifact_id, version_id).await?;
    eprintln!("D1 round trips per operation: {trips}");
    let pickup = pickup(&bench, &artifact_id, version_id, sizes.pickup).await?;
    eprintln!("pickup latency: {}", pickup["pickupMs"]);
    let probe = args.memory_probe.as_deref();
    let mut memory = vec![memory_reading(probe, "start")?];
    let big_body = oversized_session_body(&bench).await?;
    memory.push(memory_reading(probe, "after a 90 MB body to /session")?);
    // The big job: enqueued alone (the template is cancelled), so its runner claims it.
    bench
        .enqueue(&bench_job(
            "bench-bundle",
            &artifact_id,
            version_id,
            "a stream at its limit",
        ))
        .await?;
    let big = big_bundle(&bench, args.bundle_chunks.unwrap_or(sizes.bundle_chunks)).await?;
    memory.push(memory_reading(
        probe,
        "after serving the bundle of a 64 MiB-stream job",
    )?);

    let explain = explain_claim(&bench, &args.claim_query)?;
    eprintln!("claim query plan on local D1: {:?}", explain["plan"]);

    let claim = claim_latency(&mut bench, sizes).await?;
    memory.push(memory_reading(probe, "after 1. claim latency")?);
    // Lifecycles, stream and recovery claim from the remaining queue; top it up.
    let needed =
        lifecycle_jobs(&sizes.lifecycle, sizes.lifecycle_rounds) + 1 + sizes.recovery as u64;
    let queued = bench.queued()?;
    bench.seed(needed.saturating_sub(queued))?;
    let lifecycle = lifecycle(&bench, &sizes.lifecycle, sizes.lifecycle_rounds).await?;
    memory.push(memory_reading(probe, "after 2. lifecycle throughput")?);
    let (stream, heartbeats) = stream_rate(&bench, sizes).await?;
    memory.push(memory_reading(probe, "after 3. stream appends")?);
    let recovery = recovery(&bench, sizes.recovery).await?;
    memory.push(memory_reading(probe, "after 4. recovery")?);
    let chatty = chatty(
        &bench,
        sizes,
        args.batch_bytes,
        chatty_server,
        &artifact_id,
        version_id,
    )
    .await?;
    memory.push(memory_reading(probe, "after 7. chatty jobs")?);
    let (wall, cpu) = started.end();

    let report = json!({
        "command": args.command,
        "date": shell("date", &["-u", "+%Y-%m-%d %H:%M"]),
        "smoke": args.smoke,
        "machine": machine(),
        "versions": versions(),
        "loadAverage": { "start": load_start, "end": loadavg() },
        "sizesNote": if args.smoke { "smoke sizes (tiny)" } else { "claim: 60 claims per depth; lifecycle: 5 rounds of 20 at 1 runner, 40 at 8, 64 at 32; stream: 200 / 100 / 40 appends; recovery: 10,000 leases; pickup: 100 jobs, 32 runners; chatty: `seq 1 200000` and 20 MB of 100-byte lines" },
        "wallSeconds": round(wall),
        "clientCpu": round(cpu),
        "explain": explain,
        "claim": claim,
        "lifecycle": lifecycle,
        "stream": stream,
        "heartbeats": heartbeats,
        "recovery": recovery,
        "pickup": pickup,
        "chatty": chatty,
        "roundTrips": trips,
        "bigBundle": big,
        "memory": memory,
        "oversizedBody": big_body,
        "bundle": { "wasmBytes": args.wasm_bytes, "wasmGzipBytes": args.wasm_gzip_bytes },
        "seedingNote": "The queue is seeded with one SQL statement per depth through `wrangler d1 execute DB --local --file`: a recursive CTE (`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < N) INSERT INTO jobs (...) SELECT ... FROM n, jobs AS t WHERE t.id = <template>`) copies a template job that was enqueued through the API (so the artifact, version and promotion the foreign keys require exist, and its intent and input hashes are real) under new ids (`job_benchBB_NNNNNNN`) and idempotency keys, state `queued`, attempt 0. The template itself is cancelled. Seeded jobs are valid queued jobs that the claim grants like any other.",
    });
    std::fs::write(
        &args.json,
        serde_json::to_string_pretty(&report).map_err(BenchError::json("json"))? + "\n",
    )
    .map_err(BenchError::io("write json"))?;
    let analysis = kept_analysis(&args.markdown);
    std::fs::write(&args.markdown, markdown(&report, &analysis))
        .map_err(BenchError::io("write markdown"))?;
    eprintln!(
        "bench done in {wall:.0} s; load generator CPU {:.0}% of one core",
        cpu * 100.0
    );
    Ok(())
}

/// `--hot-only`: the hot path's figures alone, for comparing one change with another on the
/// same machine within minutes. The claim runs three times at 100 queued (three ratios show the
/// noise of one); then the lifecycles, and the warm heartbeats and appends of section 3.
async fn hot_only(
    args: &Args,
    bench: &mut Bench,
    sizes: &Sizes,
    artifact_id: &str,
    version_id: u64,
    load_start: &str,
) -> Res<()> {
    let trips = round_trips(bench, artifact_id, version_id).await?;
    let pickup = pickup(bench, artifact_id, version_id, sizes.pickup).await?;
    let depth = sizes.queue_levels[0];
    let claim_sizes = Sizes {
        queue_levels: [depth; 3],
        ..*sizes
    };
    let claim = claim_latency(bench, &claim_sizes).await?;
    // The lifecycles and the stream's one claim take from the remaining queue.
    let needed = lifecycle_jobs(&sizes.lifecycle, sizes.lifecycle_rounds) + 1;
    let queued = bench.queued()?;
    bench.seed(needed.saturating_sub(queued))?;
    let lifecycle = lifecycle(bench, &sizes.lifecycle, sizes.lifecycle_rounds).await?;
    let (stream, heartbeats) = stream_rate(bench, sizes).await?;
    let report = json!({
        "command": args.command,
        "date": shell("date", &["-u", "+%Y-%m-%d %H:%M"]),
        "loadAverage": { "start": load_start, "end": loadavg() },
        "roundTrips": trips,
        "pickup": pickup,
        "claim": claim,
        "lifecycle": lifecycle,
        "stream": stream,
        "heartbeats": heartbeats,
    });
    let text = serde_json::to_string_pretty(&report).map_err(BenchError::json("json"))? + "\n";
    std::fs::write(&args.json, &text).map_err(BenchError::io("write json"))?;
    let line = |v: &Value| format!("{v}");
    let claims: Vec<String> = claim
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            format!(
                "p50 {} vs floor {} = {}x",
                l["claim"]["p50Ms"], l["floor"]["p50Ms"], l["p50Ratio"]
            )
        })
        .collect();
    let lifecycles: Vec<String> = lifecycle
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| format!("x{}: {}x", l["runners"], l["throughputRatio"]))
        .collect();
    println!(
        "pickup ms {}; from request {}; enqueue {}",
        line(&pickup["pickupMs"]),
        line(&pickup["fromRequestMs"]),
        line(&pickup["enqueueMs"])
    );
    let appends: Vec<String> = stream
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "{}: p50 {} vs floor {} = {}x",
                s["payload"], s["append"]["p50Ms"], s["floor"]["p50Ms"], s["p50Ratio"]
            )
        })
        .collect();
    println!("claim: {}", claims.join("; "));
    println!("lifecycle: {}", lifecycles.join("; "));
    println!(
        "warm heartbeat: p50 {} vs floor {} = {}x",
        heartbeats["heartbeat"]["p50Ms"], heartbeats["floor"]["p50Ms"], heartbeats["p50Ratio"]
    );
    println!("appends: {}", appends.join("; "));
    Ok(())
}

fn main() {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: tokio: {error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = runtime.block_on(run(args)) {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifecycle_plan_is_three_bounded_counts() {
        assert_eq!(parse_lifecycle_plan("32x2x3"), Ok((32, 2, 3)));
        assert_eq!(parse_lifecycle_plan("256x1000x50"), Ok((256, 1000, 50)));
        for refused in [
            "0x2x3",
            "32x0x3",
            "32x2x0",
            "257x1x1",
            "1x1001x1",
            "1x1x51",
            "32x2",
            "32x2x3x4",
            "32x2x",
            "x2x3",
            "32,2,3",
            "-1x2x3",
            "99999999999999999999999x1x1",
        ] {
            assert!(
                parse_lifecycle_plan(refused).is_err(),
                "{refused} was taken"
            );
        }
    }

    #[test]
    fn the_lifecycles_take_a_job_each() {
        assert_eq!(
            lifecycle_jobs(&[(1, 20), (8, 5), (32, 2)], 5),
            5 * (20 + 40 + 64)
        );
        assert_eq!(lifecycle_jobs(&[], 3), 0);
    }

    #[test]
    fn the_queue_depth_is_bounded() {
        use clap::Parser;
        let args = |depth: &str| {
            Args::try_parse_from([
                "edgerunner-bench",
                "--server",
                "http://127.0.0.1:1",
                "--api-key",
                "k",
                "--state",
                "s",
                "--markdown",
                "m",
                "--json",
                "j",
                "--wasm-bytes",
                "0",
                "--wasm-gzip-bytes",
                "0",
                "--claim-query",
                "q",
                "--lifecycle-only",
                "1x1x1",
                "--lifecycle-depth",
                depth,
            ])
        };
        assert_eq!(
            args("1000000").map(|a| a.lifecycle_depth).ok(),
            Some(1_000_000)
        );
        assert!(args("1000001").is_err());
        assert!(args("-1").is_err());
    }
}
