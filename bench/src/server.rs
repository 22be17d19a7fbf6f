//! The server client: every HTTP request the harness makes to the local server itself (the
//! admin API through the SDK's `AdminClient`, releases, evaluation runs, the bench build's
//! floor and round-trip counter, reap passes, raw bodies and downloads), and the typed answers
//! it reads from them. The runners' own requests go through the SDK's `RunnerClient`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use edgerunner::admin::AdminClient;
use edgerunner::client::RunnerClient;
use edgerunner::http::Http;
use edgerunner::session::{BootstrapToken, Credentials};
use edgerunner_protocol::completion::EvidenceId;
use edgerunner_protocol::envelope::RunnerId;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{BenchError, Res};
use crate::measure::now_ms;

/// How often one floor request is sent when the dev proxy answers it with its own `503`.
const FLOOR_TRIES: u32 = 3;

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
pub(crate) struct EnqueuedJob {
    pub(crate) id: String,
    pub(crate) organization_id: String,
    /// RFC 3339; the server writes `null` for a time it cannot print.
    pub(crate) created_at: Option<String>,
}

impl EnqueuedJob {
    pub(crate) fn read(answer: Value) -> Res<Self> {
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
pub(crate) struct Artifact {
    pub(crate) id: String,
}

/// `POST /api/releases/artifacts/{id}/versions`.
#[derive(Deserialize)]
pub(crate) struct Version {
    pub(crate) id: u64,
}

/// `GET /__bench/round-trips` (the bench build only).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoundTripTotal {
    d1_round_trips: u64,
}

/// `POST /api/remote-runners/jobs/reap`: one pass's counts, and whether leases remain.
#[derive(Deserialize)]
pub(crate) struct ReapPass {
    pub(crate) examined: u64,
    pub(crate) requeued: u64,
    pub(crate) ended: u64,
    pub(crate) more: bool,
}

/// The local server, as the harness reaches it.
pub(crate) struct Server {
    /// The runners' way in: wrangler's dev proxy (`--server`).
    pub(crate) base: String,
    /// Workerd's own socket (`--direct-server`).
    direct: String,
    api_key: String,
    pub(crate) admin: AdminClient,
    http: reqwest::Client,
}

/// An HTTP client for the local server that drops a connection idle for longer than local
/// workerd keeps it, as the SDK's own client does against a loopback server (`Http::new`).
pub(crate) fn local_http() -> Res<reqwest::Client> {
    reqwest::Client::builder()
        .pool_idle_timeout(edgerunner::http::LOCAL_IDLE_CONNECTION)
        .build()
        .map_err(BenchError::http("http client"))
}

impl Server {
    /// `base` for the runners and the floor, `direct` for setup and admin requests (see `run`).
    pub(crate) fn new(base: &str, direct: &str, api_key: &str) -> Res<Self> {
        let admin = AdminClient::new(
            Http::new(direct).map_err(BenchError::client("http"))?,
            api_key,
        )
        .map_err(BenchError::client("admin"))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            direct: direct.trim_end_matches('/').to_owned(),
            api_key: api_key.to_owned(),
            admin,
            http: local_http()?,
        })
    }

    pub(crate) async fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Res<T> {
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
    pub(crate) async fn round_trips(&self) -> Res<u64> {
        let path = "/__bench/round-trips";
        let answer = self
            .http
            .get(format!("{}{path}", self.base))
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

    /// One runner named `key` for prompt jobs of `runtime`: its bootstrap credentials.
    pub(crate) async fn register_runner(
        &self,
        key: &str,
        runtime: &str,
        max_jobs: u32,
    ) -> Res<Credentials> {
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
    pub(crate) async fn enqueue(&self, job: &Value) -> Res<EnqueuedJob> {
        let answer = self
            .admin
            .enqueue(job)
            .await
            .map_err(BenchError::client("enqueue"))?;
        EnqueuedJob::read(answer)
    }

    /// A runner's SDK client, through `base` as a runner process talks.
    pub(crate) fn runner_client(&self, credentials: &Credentials) -> Res<Arc<RunnerClient>> {
        let http = Http::new(&self.base).map_err(BenchError::client("http"))?;
        Ok(Arc::new(RunnerClient::new(http, credentials.clone())))
    }

    /// `n` fresh evaluation runs (a completion takes custody of one run), 8 at a time.
    pub(crate) async fn evaluation_runs(&self, n: usize) -> Res<Vec<EvidenceId>> {
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

    /// One fresh evaluation run.
    pub(crate) async fn evaluation_run(&self) -> Res<EvidenceId> {
        self.evaluation_runs(1)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| BenchError::unexpected("no run"))
    }

    /// One admin reap pass, sent once, to workerd's own socket, on a connection of its own:
    /// its answer or the error.
    ///
    /// Not through `AdminClient::reap`, which repeats a pass whose answer was lost: a failed
    /// pass is what scenario 4 counts. And never on a connection that sat idle: local workerd
    /// closes a kept-alive connection after 5 s idle, and a request written to it at that
    /// moment is lost (cloudflare/workers-sdk#14641). A pass takes seconds, so the next one met
    /// such a connection: through wrangler's dev proxy (whose pool to workerd the bench does
    /// not control) as its bare `503` "Your worker restarted mid-request", sent straight to
    /// workerd on a pooled connection as a reset, in both cases with the pass's work committed
    /// and nothing logged by the Worker. Sent straight to workerd on a fresh connection, no
    /// pass failed.
    pub(crate) async fn reap_pass(&self, limit: u32) -> Res<ReapPass> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(BenchError::http("reap client"))?;
        let path = "/api/remote-runners/jobs/reap";
        let answer = client
            .post(format!("{}{path}", self.direct))
            .bearer_auth(&self.api_key)
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

    /// `body` POSTed as JSON to `path` through `base`, with no credential: the answer's status
    /// and text.
    pub(crate) async fn post_unauthenticated(
        &self,
        path: &str,
        body: Vec<u8>,
    ) -> Res<(u16, String)> {
        let answer = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(BenchError::http(path))?;
        let status = answer.status().as_u16();
        Ok((status, answer.text().await.unwrap_or_default()))
    }

    /// `GET path` through `base` with the admin key, read to its end: its size in bytes, and
    /// whether it was streamed (no `Content-Length`).
    pub(crate) async fn download(&self, path: &str) -> Res<(usize, bool)> {
        let mut answer = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.api_key)
            .send()
            .await
            .map_err(BenchError::http(path))?;
        if !answer.status().is_success() {
            return Err(BenchError::unexpected(format!(
                "{path}: {}",
                answer.status()
            )));
        }
        let streamed = answer.content_length().is_none();
        let mut bytes = 0usize;
        while let Some(piece) = answer.chunk().await.map_err(BenchError::http(path))? {
            bytes += piece.len();
        }
        Ok((bytes, streamed))
    }
}

/// One floor request (`POST /__bench/floor`) on `http` to `base`, its latency. The floor goes
/// through wrangler's dev proxy, as the runners do, and that proxy now and then answers a POST
/// with a `503` of its own ("Your worker restarted mid-request") although the Worker restarted
/// nothing (see scripts/lib.sh `find_direct_url`); the floor has no effect, so such an answer
/// is asked again, at most [`FLOOR_TRIES`] times in all, and the answered request is the one
/// timed.
pub(crate) async fn floor(http: &reqwest::Client, base: &str) -> Res<Duration> {
    let mut tries = 0;
    loop {
        tries += 1;
        let start = Instant::now();
        let answer = http
            .post(format!("{base}/__bench/floor"))
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
