//! Scenario 8: D1 round trips per operation, as the bench build counts them, one runner alone
//! on the server making each operation of a job's life once.

use std::sync::Arc;

use edgerunner::stream::ChunkStream;
use edgerunner_protocol::chunk::ChunkKind;
use serde_json::{json, Map, Value};

use super::{succeed, Bench};
use crate::error::{BenchError, Res};

/// The operations whose D1 round trips scenario 8 counts, in the order it makes them.
pub(crate) const COUNTED_OPERATIONS: &[(&str, &str)] = &[
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
pub(crate) async fn round_trips(bench: &Bench) -> Res<Value> {
    let runner = bench.one_runner().await?;
    let client = bench.server.runner_client(&runner)?;
    let run = bench.server.evaluation_run().await?;
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
    let job = bench.release.job("bench-trips", "round trips");
    bench.server.enqueue(&job).await?;
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
        .server
        .enqueue(&bench.release.job("bench-trips-cancel", "cancelled"))
        .await?;
    tally.mark(bench, None).await?;
    bench
        .server
        .admin
        .cancel_job(&queued.id, "round trips: cancel")
        .await
        .map_err(BenchError::client("cancel"))?;
    tally.mark(bench, Some("cancelQueued")).await?;
    Ok(Value::Object(tally.counts))
}

/// Differences of the bench build's round-trip total between marks.
struct Tally {
    last: u64,
    counts: Map<String, Value>,
}

impl Tally {
    async fn start(bench: &Bench) -> Res<Self> {
        Ok(Self {
            last: bench.server.round_trips().await?,
            counts: Map::new(),
        })
    }

    /// Records the round trips since the last mark under `name` (`None`: not counted).
    async fn mark(&mut self, bench: &Bench, name: Option<&str>) -> Res<()> {
        let now = bench.server.round_trips().await?;
        if let Some(name) = name {
            self.counts.insert(name.to_owned(), json!(now - self.last));
        }
        self.last = now;
        Ok(())
    }
}
