//! Queues (migration 0016): each organization's queues, named when a job of one is first
//! enqueued, and the queues view's one read: live jobs by queue and state (a range of the
//! partial index `jobs_live_by_queue`, never the organization's history), the queues' names and
//! the runners that may serve them; and the counters (`store::counters`) `/metrics` shows.

use edgerunner_protocol::queue::{QueueKey, MAX_QUEUES};
use edgerunner_protocol::state::{JobState, RunnerState};
use serde::Deserialize;
use worker::D1PreparedStatement;

use super::{read_batch, rows_of, stmt, Arg, Db};
use crate::error::{ApiError, ApiResult};

/// The most live jobs the view reads; past it its counts are lower bounds (`capped`).
pub(crate) const MAX_LIVE_JOBS_READ: i64 = 50_000;
/// The most runners the view reads; past it some runners are not counted (`capped`).
pub(crate) const MAX_RUNNERS_READ: i64 = 1_000;

/// The job's queue, named for its organization unless it has [`MAX_QUEUES`] already: in the
/// enqueue's batch, before the job's insert (which then counts it in the overflow queue).
pub(crate) fn register(
    db: &Db,
    org: &str,
    queue: &QueueKey,
    now: i64,
) -> ApiResult<D1PreparedStatement> {
    let canonical = queue.canonical().to_string();
    stmt(
        db,
        include_str!("queries/queues/register.sql"),
        &[
            org.into(),
            queue.id().into(),
            queue.name().into(),
            canonical.as_str().into(),
            Arg::Int(now),
            Arg::Int(i64::try_from(MAX_QUEUES).unwrap_or(i64::MAX)),
        ],
    )
}

/// Live jobs of one queue (`None`: enqueued before queues existed) in one state.
#[derive(Deserialize, Debug, Clone)]
pub(crate) struct LiveCount {
    pub(crate) queue_id: Option<String>,
    pub(crate) state: JobState,
    pub(crate) jobs: i64,
    pub(crate) oldest_at: i64,
}

/// One of the organization's queues.
#[derive(Deserialize, Debug, Clone)]
pub(crate) struct QueueRow {
    pub(crate) id: String,
    pub(crate) name: String,
    /// The routing parts, as `edgerunner_protocol::queue::QueueKey::canonical` wrote them.
    pub(crate) canonical: String,
}

/// A runner as routing sees it.
#[derive(Deserialize, Debug, Clone)]
pub(crate) struct RoutedRunner {
    pub(crate) state: RunnerState,
    pub(crate) capabilities: String,
    pub(crate) tags: String,
    pub(crate) max_concurrent_jobs: i64,
    pub(crate) active_claims: i64,
    pub(crate) last_seen_at: Option<i64>,
}

/// One counter (migration 0017): the organization's, or the deployment's.
#[derive(Deserialize, Debug, Clone)]
pub(crate) struct CounterRow {
    pub(crate) name: String,
    pub(crate) value: i64,
}

/// What the queues view reads, in one round trip.
pub(crate) struct QueuesRead {
    pub(crate) live: Vec<LiveCount>,
    pub(crate) queues: Vec<QueueRow>,
    pub(crate) runners: Vec<RoutedRunner>,
    /// Every counter written so far (one never written is 0).
    pub(crate) counters: Vec<CounterRow>,
}

impl QueuesRead {
    /// Whether a bound cut the read short (its counts are then lower bounds).
    pub(crate) fn capped(&self) -> bool {
        self.live.iter().map(|c| c.jobs).sum::<i64>() >= MAX_LIVE_JOBS_READ
            || i64::try_from(self.runners.len()).unwrap_or(i64::MAX) >= MAX_RUNNERS_READ
    }
}

pub(crate) async fn read(db: &Db, org: &str) -> ApiResult<QueuesRead> {
    let results = read_batch(
        db,
        vec![
            stmt(
                db,
                include_str!("queries/queues/live.sql"),
                &[org.into(), Arg::Int(MAX_LIVE_JOBS_READ)],
            )?,
            stmt(db, include_str!("queries/queues/named.sql"), &[org.into()])?,
            stmt(
                db,
                include_str!("queries/queues/runners.sql"),
                &[
                    org.into(),
                    Arg::Int(MAX_RUNNERS_READ),
                    super::runners::authenticating_states().as_str().into(),
                ],
            )?,
            stmt(db, include_str!("queries/counters/read.sql"), &[org.into()])?,
        ],
    )
    .await
    .map_err(ApiError::from)?;
    Ok(QueuesRead {
        live: rows_of(&results, 0)?,
        queues: rows_of(&results, 1)?,
        runners: rows_of(&results, 2)?,
        counters: rows_of(&results, 3)?,
    })
}
