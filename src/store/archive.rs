//! A finished job's archive (migration 0010): the summary on its row, the archive pass's
//! candidates, and the guarded writes of its stages (`queries/archive_*.sql`, each tested for
//! its behaviour by the schema suite). The stages and their order are the protocol crate's
//! (`edgerunner_protocol::archive`).

use edgerunner_protocol::archive::{
    bundle_key, record_key, ArchiveState, ArchiveSummary, PruneBatch,
};
use edgerunner_protocol::kind::EvidenceKind;
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::state::JobState;
use serde::Deserialize;
use worker::D1PreparedStatement;

use super::{all, changes, first, stmt, write_batch, Db};
use crate::error::{ApiError, ApiResult};

/// What a job's bundle was written from, besides its rows: the decisions the job held when it
/// was read, which the archive's store statement asserts are still all it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Basis {
    pub(crate) completions: i64,
    pub(crate) unstored_decisions: i64,
}

/// A job's row as its archive needs it: what the stage is decided from, and the summary once
/// stored.
#[derive(Deserialize, Debug, Clone)]
#[serde(try_from = "RawArchiveRow")]
pub(crate) struct ArchiveRow {
    pub(crate) organization_id: String,
    pub(crate) state: JobState,
    pub(crate) finished_at: Option<i64>,
    pub(crate) summary: Option<StoredSummary>,
}

/// The summary a stored archive leaves on the job row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredSummary {
    pub(crate) state: ArchiveState,
    pub(crate) bundle_sha256: String,
    pub(crate) bundle_bytes: i64,
    pub(crate) stream_chunks: i64,
    pub(crate) stream_bytes: i64,
    pub(crate) stream_head: Option<String>,
    pub(crate) archived_at: i64,
}

impl StoredSummary {
    /// The bundle's SHA-256 (the schema holds 64 lowercase hex digits).
    pub(crate) fn bundle_sha256(&self) -> ApiResult<Sha256Hex> {
        Sha256Hex::parse(&self.bundle_sha256).map_err(ApiError::internal)
    }

    /// The bundle's R2 key.
    pub(crate) fn bundle_key(&self) -> ApiResult<String> {
        Ok(bundle_key(&self.bundle_sha256()?))
    }

    /// The record's R2 key (beside its bundle).
    pub(crate) fn record_key(&self) -> ApiResult<String> {
        Ok(record_key(&self.bundle_sha256()?))
    }
}

#[derive(Deserialize)]
struct RawArchiveRow {
    organization_id: String,
    state: JobState,
    finished_at: Option<i64>,
    archive_state: Option<String>,
    bundle_sha256: Option<String>,
    bundle_bytes: Option<i64>,
    stream_chunks: Option<i64>,
    stream_bytes: Option<i64>,
    stream_head: Option<String>,
    archived_at: Option<i64>,
}

impl TryFrom<RawArchiveRow> for ArchiveRow {
    type Error = String;

    fn try_from(raw: RawArchiveRow) -> Result<Self, String> {
        let summary = match raw.archive_state {
            None => None,
            Some(text) => {
                let state = ArchiveState::parse(&text)
                    .ok_or_else(|| format!("{text:?} is not an archive state"))?;
                // The schema holds every field of a stored archive (jobs_archive_needs_a_finished_job).
                let missing = || format!("an archive {text} without its whole summary");
                Some(StoredSummary {
                    state,
                    bundle_sha256: raw.bundle_sha256.ok_or_else(missing)?,
                    bundle_bytes: raw.bundle_bytes.ok_or_else(missing)?,
                    stream_chunks: raw.stream_chunks.ok_or_else(missing)?,
                    stream_bytes: raw.stream_bytes.ok_or_else(missing)?,
                    stream_head: raw.stream_head,
                    archived_at: raw.archived_at.ok_or_else(missing)?,
                })
            }
        };
        Ok(ArchiveRow {
            organization_id: raw.organization_id,
            state: raw.state,
            finished_at: raw.finished_at,
            summary,
        })
    }
}

impl ArchiveRow {
    pub(crate) fn stage(&self) -> Option<ArchiveState> {
        self.summary.as_ref().map(|s| s.state)
    }
}

/// The job `id`'s archive row, whatever its organization (its own object asks).
pub(crate) async fn row(db: &Db, id: &str) -> ApiResult<Option<ArchiveRow>> {
    first(db, include_str!("queries/archive/row.sql"), &[id.into()]).await
}

/// The job's archive row within `org` (none: no such job there).
pub(crate) async fn row_in_org(db: &Db, org: &str, id: &str) -> ApiResult<Option<ArchiveRow>> {
    first(
        db,
        include_str!("queries/archive/row_in_org.sql"),
        &[org.into(), id.into()],
    )
    .await
}

/// The job's archive row within `org`, for a read's batch.
pub(crate) fn select_row(db: &Db, org: &str, id: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/archive/row_in_org.sql"),
        &[org.into(), id.into()],
    )
}

/// A job whose archive is due ([`due`]).
#[derive(Deserialize, Debug)]
pub(crate) struct DueJob {
    pub(crate) id: String,
}

/// Finished jobs, not yet pruned, that finished at or before `finished_by`: oldest first, at
/// most `limit`.
pub(crate) async fn due(db: &Db, finished_by: i64, limit: i64) -> ApiResult<Vec<DueJob>> {
    all(
        db,
        include_str!("queries/archive_due.sql"),
        &[finished_by.into(), limit.into()],
    )
    .await
}

/// Records the stored archive's summary, guarded by the stage and by `basis` (the decisions
/// the bundle was written from). `false`: the guard did not hold (the job moved on, or its
/// archive was stored already).
pub(crate) async fn store(
    db: &Db,
    org: &str,
    job: &str,
    summary: &ArchiveSummary,
    basis: Basis,
) -> ApiResult<bool> {
    let count = |n: u64| i64::try_from(n).map_err(ApiError::internal);
    let terminal = super::states::terminal_job_states();
    let bundle_bytes = count(summary.bundle.bytes())?;
    let stored = stmt(
        db,
        include_str!("queries/archive_store.sql"),
        &[
            job.into(),
            org.into(),
            summary.bundle.sha256().as_str().into(),
            bundle_bytes.into(),
            count(summary.stream.chunks)?.into(),
            count(summary.stream.bytes)?.into(),
            summary.stream.head.as_ref().map(Sha256Hex::as_str).into(),
            summary.archived_at_ms.into(),
            basis.completions.into(),
            basis.unstored_decisions.into(),
            ArchiveState::Stored.as_str().into(),
            terminal.as_str().into(),
        ],
    )?;
    let changed = super::batch(
        db,
        vec![stored, super::usage::archive_stored(db, org, bundle_bytes)?],
    )
    .await?;
    Ok(changed.first() == Some(&1))
}

/// One prune batch (one D1 transaction): up to `limit` rows of each of the job's chunks,
/// completions and events, then its claims once nothing names them.
pub(crate) async fn prune_batch(
    db: &Db,
    org: &str,
    job: &str,
    limit: u32,
) -> ApiResult<PruneBatch> {
    let args = [job.into(), org.into(), i64::from(limit).into()];
    let statements = vec![
        stmt(db, include_str!("queries/archive_prune_chunks.sql"), &args)?,
        stmt(
            db,
            include_str!("queries/archive_prune_completions.sql"),
            &args,
        )?,
        stmt(db, include_str!("queries/archive_prune_events.sql"), &args)?,
        stmt(db, include_str!("queries/archive_prune_claims.sql"), &args)?,
    ];
    let results = write_batch(db, statements).await?;
    let deleted = |i: usize| -> ApiResult<u32> {
        let result = results
            .get(i)
            .ok_or_else(|| ApiError::internal(format!("prune batch answered no result {i}")))?;
        u32::try_from(changes(result)?).map_err(ApiError::internal)
    };
    Ok(PruneBatch {
        chunks: deleted(0)?,
        completions: deleted(1)?,
        events: deleted(2)?,
        claims: deleted(3)?,
    })
}

/// Records stage `pruned` (the schema checks that no row of the job is left) and moves the
/// job's row to `archived_jobs` (migration 0018), in one batch. `false`: the job was not at
/// stage `stored` (pruned and moved already), and then nothing changed.
pub(crate) async fn mark_pruned(db: &Db, org: &str, job: &str) -> ApiResult<bool> {
    let pruned = ArchiveState::Pruned.as_str();
    let run = EvidenceKind::EvaluationRun.as_str();
    let of_pruned = [job.into(), org.into(), pruned.into()];
    let statements = vec![
        stmt(
            db,
            include_str!("queries/archive_mark_pruned.sql"),
            &[
                job.into(),
                org.into(),
                pruned.into(),
                ArchiveState::Stored.as_str().into(),
            ],
        )?,
        super::usage::job_pruned(db, org, job)?,
        stmt(
            db,
            include_str!("queries/archive/move_requirements.sql"),
            &of_pruned,
        )?,
        stmt(
            db,
            include_str!("queries/archive/move_job.sql"),
            &[job.into(), org.into(), pruned.into(), run.into()],
        )?,
        stmt(
            db,
            include_str!("queries/archive/move_custody.sql"),
            &[job.into(), org.into(), run.into()],
        )?,
        stmt(
            db,
            include_str!("queries/archive/move_delete.sql"),
            &of_pruned,
        )?,
    ];
    let changed = super::batch(db, statements).await?;
    // The custody row: one when the completion took a run, none when it took none (the
    // schema's archived_jobs_take_their_runs_custody holds the archived row to that).
    match changed.as_slice() {
        [1, _, _, 1, 0 | 1, 1] => Ok(true),
        [0, _, 0, 0, 0, 0] => Ok(false),
        other => Err(ApiError::internal(format!(
            "job {job}'s move to archived_jobs changed {other:?} rows"
        ))),
    }
}
