//! A runner's files: small text it uploads about itself (logs, `lscpu`), at most
//! [`runners::MAX_RUNNER_FILES`] of them, read back a page at a time by the runner and by its
//! organization's admins.

use edgerunner_protocol::error_code::ErrorCode;
use worker::{Request, Response};

use super::views::respond;
use super::views::runners::{FilePageView, FileView};
use crate::auth;
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::body_bytes;
use crate::platform::secret_hash;
use crate::store::writes::Writes;
use crate::store::{self, runners};

/// Files a runner uploads about itself are small text (logs, `lscpu`).
pub(crate) const MAX_FILE_BYTES: usize = 256 * 1024;
fn valid_file_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

pub(crate) fn check_file(name: &str, content: &str) -> ApiResult<()> {
    if !valid_file_name(name) {
        return Err(ApiError::unprocessable(
            ErrorCode::InvalidFileName,
            "file names are 1-128 characters of [A-Za-z0-9._-], not starting with a dot",
        ));
    }
    if content.len() > MAX_FILE_BYTES {
        return Err(ApiError::new(
            413,
            ErrorCode::FileTooLarge,
            format!("files are capped at {MAX_FILE_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// `GET /api/remote-runners/self/files?limit=&cursor=`: the runner's own files, by name.
pub(crate) async fn list_self_files(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::runner(&req, ctx).await?;
    files_page(&req, ctx, caller.organization_id(), caller.runner_id()).await
}

/// One page of a runner's files in name order: `?limit=` (1–100, default 100) after
/// `?cursor=` (the `nextCursor` of the page before: the last name it listed).
pub(crate) async fn files_page(
    req: &Request,
    ctx: &Ctx,
    org: &str,
    runner: &str,
) -> ApiResult<Response> {
    let limit = super::limit_param(req, runners::MAX_RUNNER_FILES, runners::MAX_RUNNER_FILES)?;
    let after = match crate::http::query_param(req, "cursor") {
        None => None,
        Some(name) if valid_file_name(&name) => Some(name),
        Some(_) => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidCursor,
                "cursor must be a nextCursor this list returned",
            ))
        }
    };
    // One more than the page, to know whether another follows.
    let mut files = runners::files(&ctx.db, org, runner, after.as_deref(), limit + 1).await?;
    let next_cursor = (files.len() as i64 > limit).then(|| {
        files.truncate(limit as usize);
        files.last().map(|f| f.name.clone())
    });
    respond(
        200,
        &FilePageView {
            files: files.iter().map(FileView::from).collect(),
            next_cursor: next_cursor.flatten(),
        },
    )
}

pub(crate) async fn put_self_file(mut req: Request, ctx: &Ctx, name: &str) -> ApiResult<Response> {
    let caller = auth::runner(&req, ctx).await?;
    let bytes = body_bytes(&mut req, MAX_FILE_BYTES).await.map_err(|err| {
        if err.status() == 413 {
            ApiError::new(
                413,
                ErrorCode::FileTooLarge,
                format!("files are capped at {MAX_FILE_BYTES} bytes"),
            )
        } else {
            err
        }
    })?;
    let content = String::from_utf8(bytes)
        .map_err(|_| ApiError::unprocessable(ErrorCode::InvalidFile, "files must be UTF-8 text"))?;
    check_file(name, &content)?;
    let hash = secret_hash(&content);
    let mut writes = Writes::default();
    let put = writes.any(runners::put_file(
        &ctx.db,
        caller.organization_id(),
        caller.runner_id(),
        name,
        &content,
        &hash,
        ctx.now,
    )?);
    // The file's guard (the runner's file and byte limits) matches nothing when full.
    if store::writes::write(&ctx.db, writes).await?.at(put) != 1 {
        return Err(ApiError::conflict(
            ErrorCode::RunnerFilesFull,
            format!(
                "a runner holds at most {} files and {} bytes of them; replace an existing file (same name) instead",
                runners::MAX_RUNNER_FILES,
                runners::MAX_RUNNER_FILE_BYTES
            ),
        ));
    }
    let file = runners::FileMeta {
        name: name.to_owned(),
        // At most MAX_FILE_BYTES (checked above), far inside an i64.
        size: content.len() as i64,
        content_hash: hash,
        uploaded_at: ctx.now,
    };
    respond(200, &FileView::from(&file))
}
