//! The custody reads of a job's evidence (API key): its stream, a page at a time, and its
//! custody bundle, a streamed body written page by page so the Worker never holds a big job
//! whole.

use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::recovery::MAX_DISPATCHES;
use serde_json::{json, Value};
use worker::{Request, Response};

use super::limit_param;
use super::views::jobs::{
    BundleClaimView, BundleCompletionView, JobView, ReceivedChunkView, SentChunkView, UnstoredView,
};
use super::views::to_value;
use crate::auth::{self, Scope};
use crate::error::{json_response, ApiError, ApiResult};
use crate::store::{self, jobs, Db, RoundTrips};
use crate::Ctx;
/// Chunks per page of `GET …/jobs/{id}/stream`, and the payload bytes a page stops at.
const STREAM_PAGE_DEFAULT: i64 = 100;
const STREAM_PAGE_MAX: i64 = 500;
const STREAM_PAGE_BYTES: i64 = 1024 * 1024;

/// `GET /api/remote-runners/jobs/{id}/stream?after=&attempt=&limit=`: the stored chunks with
/// their payloads, in order (attempt, then sequence), after the cursor `"{attempt}.{sequence}"`.
/// A page holds at most `limit` chunks and stops once 1 MiB of payload is reached, so
/// following a running job's log costs one small read per poll.
pub(crate) async fn stream_read(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = caller.organization_id.as_str();
    let limit = limit_param(&req, STREAM_PAGE_DEFAULT, STREAM_PAGE_MAX)?;
    let after = match crate::http::query_param(&req, "after") {
        None => (0, -1),
        Some(text) => parse_stream_cursor(&text).ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::InvalidCursor,
                "after must be a cursor this stream returned (\"{attempt}.{sequence}\")",
            )
        })?,
    };
    let attempts = match crate::http::query_param(&req, "attempt") {
        None => (1, LAST_ATTEMPT),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if (1..=LAST_ATTEMPT).contains(&n) => (n, n),
            _ => {
                return Err(ApiError::unprocessable(
                    ErrorCode::InvalidAttempt,
                    format!("attempt must be an integer from 1 to {LAST_ATTEMPT}"),
                ))
            }
        },
    };
    let page = jobs::StreamPage {
        after,
        attempts,
        limit,
        byte_budget: STREAM_PAGE_BYTES,
        job: id,
    };
    // The organization's job and the page in one round trip (a reader following a running job
    // asks every few seconds). One batch is one transaction, so the job's state is as of the
    // page: a terminal state with `more: false` means the whole stream has been read (a
    // completion closes its stream, and nothing is appended after it).
    let results = store::read_batch(
        &ctx.db,
        vec![
            jobs::select_found(&ctx.db, org, id)?,
            jobs::select_stream_page(&ctx.db, org, &page)?,
        ],
    )
    .await?;
    let job = store::rows_of::<jobs::Found>(&results, 0)?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let rows: Vec<jobs::ChunkWithPayload> = store::rows_of(&results, 1)?;
    let in_range = rows.first().map_or(0, |r| r.page_rows);
    let more = (rows.len() as i64) < in_range || in_range == limit;
    let cursor = rows
        .last()
        .map_or(after, |c| (c.dispatch_attempt, c.sequence));
    let chunks = rows
        .iter()
        .map(|c| ReceivedChunkView::new(c, id))
        .collect::<ApiResult<Vec<_>>>()?;
    json_response(
        200,
        &json!({
            "chunks": chunks,
            "cursor": format!("{}.{}", cursor.0, cursor.1),
            "more": more,
            "state": job.state,
            "dispatchAttempt": job.dispatch_attempt,
        }),
    )
    .map_err(ApiError::from)
}

/// The highest attempt number a job's stream can hold: every dispatch, hand-backs included.
const LAST_ATTEMPT: i64 = MAX_DISPATCHES as i64;

/// `"{attempt}.{sequence}"` as the stream pages write it: attempt one digit 0–8, sequence
/// `-1` or 1–18 digits (`"0.-1"` is the stream's start).
fn parse_stream_cursor(text: &str) -> Option<(i64, i64)> {
    let (attempt, sequence) = text.split_once('.')?;
    let attempt = super::plain_number(attempt, 1).filter(|a| *a <= LAST_ATTEMPT)?;
    let sequence = match sequence {
        "-1" => -1,
        digits => super::plain_number(digits, 18)?,
    };
    Some((attempt, sequence))
}

/// `GET /api/remote-runners/jobs/{jobId}/bundle`: the job's whole custody chain in one
/// document — each signed envelope, every stream chunk as sent, every completion as received
/// with its decision — so that `edgerunner verify` can re-check every hash and link offline.
/// JSON text stored by the server is re-parsed with number lexemes intact, so the hashes the
/// runner computed still hold.
///
/// A job may hold 8 attempts × 64 MiB of stream, so the document is never built whole: the
/// small parts (job, claims, each attempt's extent, the completion ids) are read first, then
/// the body is streamed — chunk pages by keyset (`stream_page.sql`, ≤ 1 MiB of payload each),
/// then completions one at a time — and the Worker holds one page at a time. The extents read
/// first bound the pages, so the bundle is the job as it was at that read even while its
/// stream grows (chunks and completions are immutable, and a completion closes its stream).
/// A read that fails mid-body cuts the body short: the document does not parse, and `verify`
/// says so.
pub(crate) async fn bundle(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = caller.organization_id.as_str();
    let job = jobs::get(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let claims = jobs::bundle_claims(&ctx.db, org, id).await?;
    let claims = claims
        .iter()
        .map(BundleClaimView::new)
        .collect::<ApiResult<Vec<_>>>()?;
    let results = store::read_batch(
        &ctx.db,
        vec![
            jobs::select_stream_totals(&ctx.db, org, id)?,
            jobs::select_completion_ids(&ctx.db, org, id)?,
        ],
    )
    .await?;
    let extents = store::rows_of::<jobs::StreamTotal>(&results, 0)?
        .into_iter()
        .map(|t| (t.dispatch_attempt, t.chunks - 1))
        .collect();
    let completions = store::rows_of::<jobs::CompletionId>(&results, 1)?
        .into_iter()
        .map(|c| c.id)
        .collect();
    // The keys in the order the document always had; `unstoredDecisions` is new and last.
    let head = format!(
        "{{\"bundleVersion\":1,\"job\":{},\"claims\":{},\"stream\":[",
        to_value(&JobView::from(&job))?,
        to_value(&claims)?,
    );
    let writer = BundleWriter {
        env: ctx.env.clone(),
        org: org.to_owned(),
        job: id.to_owned(),
        unstored: to_value(&UnstoredView::from(&job))?,
        extents,
        completions,
        after: (0, -1),
        first: true,
        part: Part::Head(head),
    };
    let body = futures_util::stream::try_unfold(writer, |mut writer| async move {
        let piece = writer.next_piece().await.map_err(|err| {
            worker::Error::RustError(format!("bundle body cut short: {}", err.code()))
        })?;
        Ok::<_, worker::Error>(piece.map(|bytes| (bytes, writer)))
    });
    let mut res = Response::from_stream(body)?;
    res.headers_mut().set("content-type", "application/json")?;
    Ok(res)
}

/// Chunks per page of the streamed bundle (and the stream page's payload budget bounds it).
const BUNDLE_PAGE_CHUNKS: i64 = 500;

/// The streamed bundle's state between pieces.
struct BundleWriter {
    env: worker::Env,
    org: String,
    job: String,
    unstored: Value,
    /// The last sequence of each attempt when the bundle began: nothing past it is written.
    extents: std::collections::BTreeMap<i64, i64>,
    /// Completion ids, oldest first, still to write.
    completions: std::collections::VecDeque<String>,
    /// The keyset cursor `(attempt, sequence)` of the last chunk written.
    after: (i64, i64),
    /// No element written yet in the current list.
    first: bool,
    part: Part,
}

enum Part {
    Head(String),
    Stream,
    Completions,
    Done,
}

impl BundleWriter {
    /// The next bytes of the document, or `None` once it is whole.
    async fn next_piece(&mut self) -> ApiResult<Option<Vec<u8>>> {
        match std::mem::replace(&mut self.part, Part::Done) {
            Part::Head(head) => {
                self.part = Part::Stream;
                Ok(Some(head.into_bytes()))
            }
            Part::Stream => {
                let page = self.stream_page().await?;
                if page.is_empty() {
                    self.part = Part::Completions;
                    self.first = true;
                    return Ok(Some(b"],\"completions\":[".to_vec()));
                }
                self.part = Part::Stream;
                Ok(Some(page))
            }
            Part::Completions => match self.completions.pop_front() {
                Some(id) => {
                    self.part = Part::Completions;
                    self.completion(&id).await.map(Some)
                }
                None => Ok(Some(
                    format!("],\"unstoredDecisions\":{}}}", self.unstored).into_bytes(),
                )),
            },
            Part::Done => Ok(None),
        }
    }

    /// The next page of chunks as list elements; empty once the stream (as of the start) is out.
    async fn stream_page(&mut self) -> ApiResult<Vec<u8>> {
        let db = Db::of(&self.env, RoundTrips::default())?;
        let page = jobs::StreamPage {
            after: self.after,
            attempts: (1, LAST_ATTEMPT),
            limit: BUNDLE_PAGE_CHUNKS,
            byte_budget: STREAM_PAGE_BYTES,
            job: &self.job,
        };
        let results =
            store::read_batch(&db, vec![jobs::select_stream_page(&db, &self.org, &page)?]).await?;
        let rows: Vec<jobs::ChunkWithPayload> = store::rows_of(&results, 0)?;
        let mut out = Vec::new();
        for row in &rows {
            let known = self
                .extents
                .get(&row.dispatch_attempt)
                .is_some_and(|last| row.sequence <= *last);
            if !known {
                // Appended after the bundle began (rows come in key order): the end.
                self.extents.clear();
                break;
            }
            if !std::mem::take(&mut self.first) {
                out.push(b',');
            }
            let chunk = to_value(&SentChunkView::new(row, &self.job)?)?;
            serde_json::to_writer(&mut out, &chunk).map_err(ApiError::internal)?;
            self.after = (row.dispatch_attempt, row.sequence);
        }
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::parse_stream_cursor;

    #[test]
    fn a_stream_cursor_is_exactly_what_a_page_writes() {
        assert_eq!(parse_stream_cursor("0.-1"), Some((0, -1)));
        assert_eq!(parse_stream_cursor("8.9999"), Some((8, 9999)));
        for text in [
            "9.0", "+1.0", "-0.-1", "1.+3", "1.-2", "01.1", "1. 1", "1", "1.", ".1",
        ] {
            assert_eq!(parse_stream_cursor(text), None, "{text:?}");
        }
    }
}
