//! The scenarios of BENCHMARKS.md, one file per group, each answering its figures as the JSON
//! document the report is written from; and what they share: the run's sizes, the bench's
//! release and job shape, its runners, and the completion every claimed job ends with.
//!
//! Every latency is compared with the floor (`POST /__bench/floor`: one hop, one Durable
//! Object round trip, one D1 batch write) measured in the same run, interleaved or right
//! beside the scenario, so that a machine under other load still gives fair ratios.

use edgerunner::client::{Assignment, CompletionAnswer, RunnerClient};
use edgerunner::session::Credentials;
use edgerunner_protocol::completion::{Evidence, EvidenceId};
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde_json::{json, Map, Value};

use crate::error::{BenchError, Res};
use crate::measure::now_ms;
use crate::seed::LocalD1;
use crate::server::Server;

pub(crate) mod chatty;
pub(crate) mod claim;
pub(crate) mod lifecycle;
pub(crate) mod memory;
pub(crate) mod pickup;
pub(crate) mod plan;
pub(crate) mod recovery;
pub(crate) mod round_trips;
pub(crate) mod stream;

/// The runtime of the bench's runners and jobs.
const RUNTIME: &str = "python3.12";

/// How big each scenario runs (`FULL`, or `SMOKE` with `--smoke`).
pub(crate) struct Sizes {
    /// 256 KiB chunks of the big job whose bundle is served (256 = the 64 MiB stream limit).
    pub(crate) bundle_chunks: usize,
    pub(crate) queue_levels: [u64; 3],
    pub(crate) claim_reps: usize,
    pub(crate) lifecycle: [(usize, usize); 3],
    /// Rounds of each lifecycle size, each bracketed by the floor (scenario 2).
    pub(crate) lifecycle_rounds: usize,
    pub(crate) stream: [(usize, usize); 3],
    pub(crate) recovery: usize,
    /// Jobs timed by scenario 9 (pickup latency).
    pub(crate) pickup: usize,
    /// Chatty jobs: (what, shell command).
    pub(crate) chatty: [(&'static str, &'static str); 2],
}

pub(crate) const FULL: Sizes = Sizes {
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

pub(crate) const SMOKE: Sizes = Sizes {
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

/// The bench's one release: a prompt artifact's version, promoted to staging.
pub(crate) struct Release {
    pub(crate) artifact_id: String,
    pub(crate) version_id: u64,
}

impl Release {
    /// A prompt job of this release, staged, with the runners' requirements.
    pub(crate) fn job(&self, key: &str, question: &str) -> Value {
        json!({
            "idempotencyKey": format!("{key}-{}", now_ms()),
            "subject": { "kind": "prompt", "artifactId": self.artifact_id, "versionId": self.version_id, "environment": "staging" },
            "input": { "question": question },
            "requirements": {
                "executionKind": "prompt", "runtime": RUNTIME,
                "limits": { "cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1_048_576 },
                "network": { "mode": "deny_all" }, "streaming": true, "cancellation": true,
            },
        })
    }
}

/// What every scenario runs against: the server, its database, and the bench's release.
pub(crate) struct Bench {
    pub(crate) server: Server,
    pub(crate) db: LocalD1,
    pub(crate) release: Release,
}

impl Bench {
    /// `n` runners of the bench's runtime, each taking `max_jobs` jobs at a time.
    pub(crate) async fn register_runners(&self, n: usize, max_jobs: u32) -> Res<Vec<Credentials>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let key = format!("bench-{}-{}", now_ms(), out.len());
            out.push(self.server.register_runner(&key, RUNTIME, max_jobs).await?);
        }
        Ok(out)
    }

    /// One runner of the bench's runtime, taking one job at a time.
    pub(crate) async fn one_runner(&self) -> Res<Credentials> {
        let key = format!("bench-{}-0", now_ms());
        self.server.register_runner(&key, RUNTIME, 1).await
    }
}

/// The next job for `client`, which must find one.
async fn claim_one(client: &RunnerClient) -> Res<Assignment> {
    client
        .claim()
        .await
        .map_err(BenchError::client("claim"))?
        .ok_or_else(|| BenchError::unexpected("no job to claim"))
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
