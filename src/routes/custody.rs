//! The custody reads of a job's evidence (API key): its stream, a page at a time, and its
//! custody bundle, a streamed body written page by page so the Worker never holds a big job
//! whole.

use edgerunner_protocol::error_code::ErrorCode;
use worker::{Request, Response};

use super::limit_param;
use super::views::custody::{ReceivedChunkView, StreamPageView};
use super::views::{respond, to_value};
use crate::archive::bundle::{BundleWriter, LAST_ATTEMPT, STREAM_PAGE_BYTES};
use crate::archive::reads::Archived;
use crate::auth::{self, Scope};
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::store::{archive, batched, jobs};

/// Chunks per page of `GET …/jobs/{id}/stream` (the payload bytes a page stops at are the
/// bundle's page budget, `STREAM_PAGE_BYTES`).
const STREAM_PAGE_DEFAULT: i64 = 100;
const STREAM_PAGE_MAX: i64 = 500;

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
    // The organization's job, its archive and the page in one round trip (a reader following a
    // running job asks every few seconds). One batch is one transaction, so the job's state is
    // as of the page: a terminal state with `more: false` means the whole stream has been read
    // (a completion closes its stream, and nothing is appended after it); and a job whose
    // archive is not stored has all its chunks in the page's read.
    let read = batched::stream_page(&ctx.db, org, &page).await?;
    let job = read.job.ok_or_else(|| ApiError::not_found("no such job"))?;
    let stored = read.archive.and_then(|row| row.summary);
    let (chunks, page_rows, last) = match &stored {
        None => {
            let rows = read.chunks;
            let chunks = rows
                .iter()
                .map(|c| ReceivedChunkView::new(c, id).and_then(|view| to_value(&view)))
                .collect::<ApiResult<Vec<_>>>()?;
            let page_rows = rows.first().map_or(0, |r| r.page_rows);
            let last = rows.last().map(|c| (c.dispatch_attempt, c.sequence));
            (chunks, page_rows, last)
        }
        // Archived: the same page, chosen from the record and read from the bundle.
        Some(summary) => {
            Archived::open(&ctx.env, summary)?
                .stream_page(&page)
                .await?
        }
    };
    let more = (chunks.len() as i64) < page_rows || page_rows == limit;
    let cursor = last.unwrap_or(after);
    respond(
        200,
        &StreamPageView {
            chunks,
            cursor: format!("{}.{}", cursor.0, cursor.1),
            more,
            state: job.state,
            dispatch_attempt: job.dispatch_attempt,
        },
    )
}

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
/// While the job is whole it is written from D1 as a streamed body, a page at a time
/// (`crate::archive::bundle`); once archived, it is the archived bytes, streamed from R2 as
/// they were written.
pub(crate) async fn bundle(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = caller.organization_id.as_str();
    let row = archive::row_in_org(&ctx.db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let mut res = match &row.summary {
        Some(summary) => Response::from_body(Archived::open(&ctx.env, summary)?.bundle().await?)?,
        None => {
            let writer = BundleWriter::open(&ctx.env, &ctx.db, org, id)
                .await?
                .ok_or_else(|| ApiError::not_found("no such job"))?;
            let body = futures_util::stream::try_unfold(writer, |mut writer| async move {
                let piece = writer.next_piece().await.map_err(|err| {
                    worker::Error::RustError(format!("bundle body cut short: {}", err.code()))
                })?;
                Ok::<_, worker::Error>(piece.map(|piece| (piece.bytes, writer)))
            });
            Response::from_stream(body)?
        }
    };
    res.headers_mut().set("content-type", "application/json")?;
    Ok(res)
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
