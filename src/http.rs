//! Request parsing at the boundary: size-capped JSON bodies, bearer tokens, query strings,
//! the client address. Nothing here knows about jobs or runners.

use serde_json::Value;
use worker::Request;

use crate::error::{ApiError, ApiResult};

/// Requests larger than this are refused before parsing (stream chunks have their own,
/// smaller payload cap inside the protocol rules).
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Reads the body as one JSON value, keeping number lexemes (hashes depend on them).
pub(crate) async fn json_body(req: &mut Request) -> ApiResult<Value> {
    let bytes = req
        .bytes()
        .await
        .map_err(|_| ApiError::bad_request("INVALID_BODY", "could not read the request body"))?;
    if bytes.len() > MAX_BODY_BYTES {
        return Err(ApiError::new(
            413,
            "BODY_TOO_LARGE",
            format!("request body exceeds {MAX_BODY_BYTES} bytes"),
        ));
    }
    if bytes.is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request("INVALID_JSON", format!("request body is not JSON: {e}"))
    })
}

/// The body as a JSON object.
pub(crate) async fn json_object(req: &mut Request) -> ApiResult<serde_json::Map<String, Value>> {
    match json_body(req).await? {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_request(
            "INVALID_BODY",
            "request body must be a JSON object",
        )),
    }
}

/// The token of an `Authorization: Bearer …` header.
pub(crate) fn bearer_token(req: &Request) -> ApiResult<String> {
    let header = req
        .headers()
        .get("authorization")
        .ok()
        .flatten()
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer credential"))?;
    match header.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim().to_owned())
        }
        _ => Err(ApiError::unauthorized(
            "Authorization must be a Bearer credential",
        )),
    }
}

/// One query parameter, percent-decoded. Parsed by hand: `Request::url()` links the `url`
/// crate, which costs ~190 KB of wasm for one `?limit=`.
pub(crate) fn query_param(req: &Request, name: &str) -> Option<String> {
    let url = req.inner().url();
    let query = url.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or("");
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(key)? == name)
            .then(|| percent_decode(value))
            .flatten()
    })
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Where the connection came from, as Cloudflare reports it. Trustworthy only when the Worker
/// is reached through Cloudflare's edge (which overwrites the header); see ARCHITECTURE.md.
pub(crate) fn client_address(req: &Request) -> Option<String> {
    req.headers().get("cf-connecting-ip").ok().flatten()
}
