//! A job's reads, wherever its rows are: from D1 while the job is whole, from R2 once its
//! archive is stored. Each read asks the job's archive row in the same D1 batch as the rows it
//! reads (one transaction), so a job whose archive is not stored has all its rows in that
//! batch: the schema deletes none before the stage says stored.

use serde_json::Value;
use worker::{Bucket, Env, ResponseBody};

use super::objects;
use super::record::{received_chunk, select_page, ArchiveRecord};
use crate::error::{ApiError, ApiResult};
use crate::routes::views::jobs::DetailParts;
use crate::store::archive::{ArchiveRow, StoredSummary};
use crate::store::batched::{self, DetailLimits, DetailRows};
use crate::store::{jobs, Db};

/// Chunks the job detail shows (without payloads); the rest is read page by page with
/// `GET …/stream?after=` from the cursor it returns. The detail's size stays bounded whatever
/// the stream holds (the other lists are bounded by the per-job limits).
pub(crate) const DETAIL_STREAM_CHUNKS: i64 = 1_000;
/// Events the job detail shows.
pub(crate) const DETAIL_EVENTS: i64 = 1_000;

/// A job's detail as its rows give it: its claims, timeline, first chunks, stream totals and
/// completions, then its evidence custody (which stays in D1 when the job is archived).
pub(crate) struct Detail {
    pub(crate) archive: ArchiveRow,
    pub(crate) parts: DetailParts,
    pub(crate) evidence: Vec<jobs::EvidenceRow>,
}

/// How much of a job its detail shows.
const DETAIL_LIMITS: DetailLimits = DetailLimits {
    chunks: DETAIL_STREAM_CHUNKS,
    events: DETAIL_EVENTS,
};

fn detail_parts_of(rows: &DetailRows) -> ApiResult<DetailParts> {
    DetailParts::from_rows(
        &rows.claims,
        &rows.timeline,
        &rows.chunks,
        rows.more_chunks,
        &rows.totals,
        &rows.completions,
    )
}

/// The job `org`'s `id` in detail (`None`: no such job), from D1 or from its archive.
pub(crate) async fn detail(env: &Env, db: &Db, org: &str, id: &str) -> ApiResult<Option<Detail>> {
    let read = batched::detail(db, org, id, DETAIL_LIMITS).await?;
    let Some(row) = read.archive else {
        return Ok(None);
    };
    let parts = match &row.summary {
        None => detail_parts_of(&read.rows)?,
        Some(summary) => Archived::open(env, summary)?.record().await?.detail,
    };
    Ok(Some(Detail {
        archive: row,
        parts,
        evidence: read.evidence,
    }))
}

/// The detail's parts from D1 alone, for the job's archive record (its rows are all there: the
/// archive is not stored yet).
pub(crate) async fn detail_parts_from_rows(db: &Db, org: &str, id: &str) -> ApiResult<DetailParts> {
    detail_parts_of(&batched::detail_rows(db, org, id, DETAIL_LIMITS).await?)
}

/// A stored archive, ready to read.
pub(crate) struct Archived<'a> {
    bucket: Bucket,
    summary: &'a StoredSummary,
}

impl<'a> Archived<'a> {
    pub(crate) fn open(env: &Env, summary: &'a StoredSummary) -> ApiResult<Archived<'a>> {
        Ok(Archived {
            bucket: objects::bucket(env)?,
            summary,
        })
    }

    /// The job's record, which must name the bundle the job row names (it says where each
    /// chunk sits in that bundle; every range read from it is checked to lie inside).
    pub(crate) async fn record(&self) -> ApiResult<ArchiveRecord> {
        let key = self.summary.record_key()?;
        let bytes = objects::read(&self.bucket, &key, None).await?;
        let record: ArchiveRecord = serde_json::from_slice(&bytes).map_err(ApiError::internal)?;
        if record.bundle_sha256 != self.summary.bundle_sha256 {
            return Err(ApiError::internal(format!(
                "{key} names bundle {}, its job row {}",
                record.bundle_sha256, self.summary.bundle_sha256
            )));
        }
        Ok(record)
    }

    /// The bundle, as the runtime streams it to the client.
    pub(crate) async fn bundle(&self) -> ApiResult<ResponseBody> {
        objects::body(&self.bucket, &self.summary.bundle_key()?).await
    }

    /// A stream page, chosen from the record as `stream_page.sql` chooses it from the rows,
    /// its chunks read from the bundle in one range read: the chunks as a stream page shows
    /// them, and how many the page's range held before its byte budget cut it.
    pub(crate) async fn stream_page(
        &self,
        page: &jobs::StreamPage<'_>,
    ) -> ApiResult<(Vec<Value>, i64, Option<(i64, i64)>)> {
        let record = self.record().await?;
        let selection = select_page(
            &record.chunks,
            page.after,
            page.attempts,
            page.limit,
            page.byte_budget,
        );
        let chosen = &record.chunks[selection.range.clone()];
        let (Some(first), Some(last)) = (chosen.first(), chosen.last()) else {
            return Ok((Vec::new(), selection.page_rows, None));
        };
        let start = first.offset();
        let bundle_bytes = u64::try_from(self.summary.bundle_bytes).map_err(ApiError::internal)?;
        if last.end() > bundle_bytes || start > last.end() {
            return Err(ApiError::internal(
                "a record's chunk lies outside its bundle",
            ));
        }
        let bytes = objects::read(
            &self.bucket,
            &self.summary.bundle_key()?,
            Some((start, last.end() - start)),
        )
        .await?;
        let mut chunks = Vec::with_capacity(chosen.len());
        for entry in chosen {
            let from = usize::try_from(entry.offset() - start).map_err(ApiError::internal)?;
            let to = usize::try_from(entry.end() - start).map_err(ApiError::internal)?;
            let element = bytes
                .get(from..to)
                .ok_or_else(|| ApiError::internal("a chunk lies outside its bundle's range"))?;
            chunks.push(received_chunk(element, entry.received_at()).map_err(ApiError::internal)?);
        }
        Ok((chunks, selection.page_rows, Some(last.key())))
    }
}
