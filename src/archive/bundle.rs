//! A job's custody bundle, written from D1 a piece at a time: each signed envelope, every
//! stream chunk as sent, every completion as received with its decision — the document
//! `GET …/jobs/{id}/bundle` serves while the job is whole, and the bytes its archive keeps.
//!
//! A job may hold 8 attempts × 64 MiB of stream, so the document is never built whole: the
//! small parts (job, claims, each attempt's extent, the completion ids) are read first, then
//! the body follows — chunk pages by keyset (`stream_page.sql`, ≤ 1 MiB of payload each), then
//! completions one at a time — and the writer holds one page at a time. The extents read first
//! bound the pages, so the bundle is the job as it was at that read even while its stream grows
//! (chunks and completions are immutable, and a completion closes its stream). A read that
//! fails mid-body, or finds the stream shorter than its extents said (the job was archived and
//! pruned meanwhile), is an error: the body is cut short, the document does not parse, and
//! `edgerunner verify` says so.

use std::collections::{BTreeMap, VecDeque};

use edgerunner_protocol::recovery::MAX_DISPATCHES;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::routes::views::custody::{BundleClaimView, BundleCompletionView, SentChunkView};
use crate::routes::views::jobs::{JobView, UnstoredView};
use crate::routes::views::to_value;
use crate::store::archive::Basis;
use crate::store::{batched, jobs, Db, RoundTrips};

/// Chunks per page of the bundle's stream.
const BUNDLE_PAGE_CHUNKS: i64 = 500;
/// The payload bytes a page of chunks stops at (as the stream read's pages do).
pub(crate) const STREAM_PAGE_BYTES: i64 = 1024 * 1024;
/// The highest attempt number a job's stream can hold: every dispatch, hand-backs included.
pub(crate) const LAST_ATTEMPT: i64 = MAX_DISPATCHES as i64;

/// Where one chunk's list element sits in the bundle, and what a stream page needs of it that
/// the element does not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChunkSpan {
    pub(crate) attempt: i64,
    pub(crate) sequence: i64,
    /// The element's first byte, from the bundle's start.
    pub(crate) offset: u64,
    pub(crate) length: u64,
    /// The stored payload's bytes (the stream page's byte budget counts these).
    pub(crate) payload_bytes: u64,
    pub(crate) received_at: i64,
    pub(crate) checksum: String,
}

/// The next bytes of the document, with the chunk elements they hold.
pub(crate) struct Piece {
    pub(crate) bytes: Vec<u8>,
    /// Offsets are from the bundle's start.
    pub(crate) chunks: Vec<ChunkSpan>,
}

/// The streamed bundle's state between pieces.
pub(crate) struct BundleWriter {
    env: worker::Env,
    org: String,
    job: String,
    unstored: Value,
    basis: Basis,
    /// The last sequence of each attempt when the bundle began: nothing past it is written.
    extents: BTreeMap<i64, i64>,
    /// The last sequence written of each attempt.
    written: BTreeMap<i64, i64>,
    /// Completion ids, oldest first, still to write.
    completions: VecDeque<String>,
    /// The keyset cursor `(attempt, sequence)` of the last chunk written.
    after: (i64, i64),
    /// No element written yet in the current list.
    first: bool,
    /// Bytes of the document written so far.
    offset: u64,
    part: Part,
}

enum Part {
    Head(String),
    Stream,
    Completions,
    Done,
}

impl BundleWriter {
    /// Reads the bundle's small parts (the job `org`'s `id`, which must exist: `None` if it
    /// does not), ready to write the body.
    pub(crate) async fn open(
        env: &worker::Env,
        db: &Db,
        org: &str,
        id: &str,
    ) -> ApiResult<Option<BundleWriter>> {
        let Some(job) = jobs::get(db, org, id).await? else {
            return Ok(None);
        };
        let claims = jobs::bundle_claims(db, org, id).await?;
        let claims = claims
            .iter()
            .map(BundleClaimView::new)
            .collect::<ApiResult<Vec<_>>>()?;
        let extent = batched::bundle_extent(db, org, id).await?;
        let extents = extent
            .totals
            .iter()
            .map(|t| (t.dispatch_attempt, t.chunks - 1))
            .collect();
        let completions: VecDeque<String> = extent.completions.into_iter().map(|c| c.id).collect();
        // The keys in the order the document always had; `unstoredDecisions` is new and last.
        let head = format!(
            "{{\"bundleVersion\":1,\"job\":{},\"claims\":{},\"stream\":[",
            to_value(&JobView::custody(&job))?,
            to_value(&claims)?,
        );
        Ok(Some(BundleWriter {
            env: env.clone(),
            org: org.to_owned(),
            job: id.to_owned(),
            unstored: to_value(&UnstoredView::from(&job))?,
            basis: Basis {
                completions: i64::try_from(completions.len()).unwrap_or(i64::MAX),
                unstored_decisions: job.unstored_decisions,
            },
            extents,
            written: BTreeMap::new(),
            completions,
            after: (0, -1),
            first: true,
            offset: 0,
            part: Part::Head(head),
        }))
    }

    pub(crate) fn basis(&self) -> Basis {
        self.basis
    }

    /// The next bytes of the document, or `None` once it is whole.
    pub(crate) async fn next_piece(&mut self) -> ApiResult<Option<Piece>> {
        let piece = match std::mem::replace(&mut self.part, Part::Done) {
            Part::Head(head) => {
                self.part = Part::Stream;
                Piece {
                    bytes: head.into_bytes(),
                    chunks: Vec::new(),
                }
            }
            Part::Stream => {
                let page = self.stream_page().await?;
                if page.bytes.is_empty() {
                    self.check_stream_whole()?;
                    self.part = Part::Completions;
                    self.first = true;
                    Piece {
                        bytes: b"],\"completions\":[".to_vec(),
                        chunks: Vec::new(),
                    }
                } else {
                    self.part = Part::Stream;
                    page
                }
            }
            Part::Completions => match self.completions.pop_front() {
                Some(id) => {
                    self.part = Part::Completions;
                    Piece {
                        bytes: self.completion(&id).await?,
                        chunks: Vec::new(),
                    }
                }
                None => Piece {
                    bytes: format!("],\"unstoredDecisions\":{}}}", self.unstored).into_bytes(),
                    chunks: Vec::new(),
                },
            },
            Part::Done => return Ok(None),
        };
        self.offset += piece.bytes.len() as u64;
        Ok(Some(piece))
    }

    /// Every attempt's stream was written to the extent read at the start: a page that ended
    /// early means the rows went (the job was pruned) while the bundle was read.
    fn check_stream_whole(&self) -> ApiResult<()> {
        for (attempt, last) in &self.extents {
            if self.written.get(attempt) != Some(last) {
                return Err(ApiError::internal(format!(
                    "the stream of attempt {attempt} ended before chunk {last} while its bundle was read"
                )));
            }
        }
        Ok(())
    }

    /// The next page of chunks as list elements; empty once the stream (as of the start) is out.
    async fn stream_page(&mut self) -> ApiResult<Piece> {
        let db = Db::of(&self.env, RoundTrips::default())?;
        let page = jobs::StreamPage {
            after: self.after,
            attempts: (1, LAST_ATTEMPT),
            limit: BUNDLE_PAGE_CHUNKS,
            byte_budget: STREAM_PAGE_BYTES,
            job: &self.job,
        };
        let rows = jobs::stream_page(&db, &self.org, &page).await?;
        let mut out = Vec::new();
        let mut chunks = Vec::new();
        for row in &rows {
            let known = self
                .extents
                .get(&row.dispatch_attempt)
                .is_some_and(|last| row.sequence <= *last);
            if !known {
                // Appended after the bundle began (rows come in key order): the end. The next
                // page starts past every attempt.
                self.after = (LAST_ATTEMPT, i64::MAX);
                break;
            }
            if !std::mem::take(&mut self.first) {
                out.push(b',');
            }
            let start = out.len();
            let chunk = to_value(&SentChunkView::new(row, &self.job)?)?;
            serde_json::to_writer(&mut out, &chunk).map_err(ApiError::internal)?;
            chunks.push(ChunkSpan {
                attempt: row.dispatch_attempt,
                sequence: row.sequence,
                offset: self.offset + start as u64,
                length: (out.len() - start) as u64,
                payload_bytes: row.payload.len() as u64,
                received_at: row.received_at,
                checksum: row.checksum.clone(),
            });
            self.written.insert(row.dispatch_attempt, row.sequence);
            self.after = (row.dispatch_attempt, row.sequence);
        }
        Ok(Piece { bytes: out, chunks })
    }

    /// One completion as a list element.
    async fn completion(&mut self, id: &str) -> ApiResult<Vec<u8>> {
        let db = Db::of(&self.env, RoundTrips::default())?;
        let c = jobs::bundle_completion(&db, &self.org, &self.job, id)
            .await?
            .ok_or_else(|| ApiError::internal("a completion of the bundle vanished"))?;
        let completion = to_value(&BundleCompletionView::new(&c)?)?;
        let mut out = Vec::new();
        if !std::mem::take(&mut self.first) {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &completion).map_err(ApiError::internal)?;
        Ok(out)
    }
}
