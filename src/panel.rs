//! The admin panel at `/remote-runners`: static files from `panel/` (Workers Static Assets,
//! binding `ASSETS`), served through the Worker so that every answer carries the panel's
//! security headers.
//!
//! `run_worker_first = true` in `wrangler.toml` sends every request here first; the assets are
//! reachable only through [`serve`]. `/remote-runners` and each of its sub-paths but `static/`
//! is the single page (`panel/index.html`, which routes on the client); `/remote-runners/static/x`
//! is `panel/static/x`. The page talks to `/api/*` with the admin's API key; nothing here
//! authenticates, because nothing here is secret.

use edgerunner_protocol::error_code::ErrorCode;
use worker::{Env, Method, Request, Response};

use crate::error::{ApiError, ApiResult};

/// The first path segment of the panel.
pub(crate) const PREFIX: &str = "remote-runners";

/// No inline script or style, no `eval`, no framing, no form posts, nothing but our origin.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'none'; object-src 'none'";

/// The asset a panel path names: `None` for a path outside the panel's files.
fn asset_path(rest: &[&str]) -> Option<String> {
    match rest {
        ["static", name] if is_file_name(name) => Some(format!("/static/{name}")),
        ["static", ..] => None,
        // Every other path is a client-side route of the single page.
        _ => Some("/".to_owned()),
    }
}

fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Answers `GET`/`HEAD` of a panel path; `rest` is the path after `/remote-runners`.
pub(crate) async fn serve(req: &Request, env: &Env, rest: &[&str]) -> ApiResult<Response> {
    let method = req.method();
    if !matches!(method, Method::Get | Method::Head) {
        return Err(ApiError::new(
            405,
            ErrorCode::MethodNotAllowed,
            "the panel answers GET and HEAD only",
        ));
    }
    let Some(path) = asset_path(rest) else {
        return no_such_file();
    };
    // The host is never resolved: the assets binding looks at the path only.
    let mut asset_req = Request::new(&format!("https://assets.invalid{path}"), Method::Get)?;
    if let Some(tag) = req.headers().get("if-none-match")? {
        asset_req.headers_mut()?.set("if-none-match", &tag)?;
    }
    let mut asset = env.assets("ASSETS")?.fetch_request(asset_req).await?;
    let status = asset.status_code();
    let content_type = asset
        .headers()
        .get("content-type")?
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    let etag = asset.headers().get("etag")?;
    // A fetched response's headers are immutable: answer with a new one. Panel files are a few
    // tens of KiB, so reading one whole is cheap.
    let body = if status == 200 && method == Method::Get {
        asset.bytes().await?
    } else {
        Vec::new()
    };
    let mut res = match status {
        200 => Response::from_bytes(body)?,
        304 => Response::empty()?.with_status(304),
        404 => return no_such_file(),
        other => return Err(ApiError::internal(format!("assets answered {other}"))),
    };
    if let Some(tag) = etag {
        res.headers_mut().set("etag", &tag)?;
    }
    with_security_headers(res, &content_type)
}

/// A panel path that names no file: the API's own `404 NOT_FOUND`, JSON like every other
/// error, with the panel's headers.
fn no_such_file() -> ApiResult<Response> {
    let res = ApiError::not_found("the panel has no such file").into_response()?;
    with_security_headers(res, "application/json")
}

fn with_security_headers(mut res: Response, content_type: &str) -> ApiResult<Response> {
    let headers = res.headers_mut();
    headers.set("content-type", content_type)?;
    headers.set("content-security-policy", CONTENT_SECURITY_POLICY)?;
    headers.set("x-frame-options", "DENY")?;
    headers.set("referrer-policy", "no-referrer")?;
    headers.set("x-content-type-options", "nosniff")?;
    headers.set("cross-origin-opener-policy", "same-origin")?;
    headers.set(
        "permissions-policy",
        "camera=(), microphone=(), geolocation=()",
    )?;
    // Revalidate every time (cheap with the ETag), so a deploy shows at the next load.
    headers.set("cache-control", "no-cache")?;
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_of_the_single_page_is_its_index() {
        assert_eq!(asset_path(&[]).as_deref(), Some("/"));
        assert_eq!(asset_path(&[""]).as_deref(), Some("/"));
        assert_eq!(asset_path(&["jobs"]).as_deref(), Some("/"));
        assert_eq!(asset_path(&["runners", "run_1"]).as_deref(), Some("/"));
    }

    #[test]
    fn static_files_are_single_plain_names() {
        assert_eq!(
            asset_path(&["static", "app.js"]).as_deref(),
            Some("/static/app.js")
        );
        assert_eq!(asset_path(&["static"]), None);
        assert_eq!(asset_path(&["static", "..", "x"]), None);
        assert_eq!(asset_path(&["static", ".."]), None);
        assert_eq!(asset_path(&["static", ".assetsignore"]), None);
        assert_eq!(asset_path(&["static", "a%2Fb.js"]), None);
        assert_eq!(asset_path(&["static", "sub", "a.js"]), None);
    }
}
