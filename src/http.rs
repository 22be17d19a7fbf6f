//! Request parsing at the boundary: size-capped JSON bodies, bearer tokens, query strings,
//! the client address. Nothing here knows about jobs or runners.

use edgerunner_protocol::error_code::ErrorCode;
use futures_util::StreamExt;
use serde_json::Value;
use worker::Request;

use crate::error::{ApiError, ApiResult};

/// The body cap of every JSON route that does not name a smaller one (stream chunks carry up
/// to 256 KiB of payload, which escaping can double; job inputs and release contents).
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Routes whose bodies are a few fields: session, challenge, heartbeat, claim, status changes.
pub(crate) const SMALL_BODY_BYTES: usize = 16 * 1024;

/// A claim: `servedTargets`, each a version id and a content hash (several hundred fit).
pub(crate) const CLAIM_BODY_BYTES: usize = 64 * 1024;
/// A key-pair enrollment: 64 KiB of files, 16 KiB of machine facts, the capability document.
pub(crate) const ENROLL_BODY_BYTES: usize = 128 * 1024;

/// The deepest JSON any route accepts. Far below serde_json's own limit (128) and what the
/// Durable Objects' parse of a wrapped body needs, so depth is refused here, once, with a code.
pub(crate) const MAX_JSON_DEPTH: usize = 64;

fn too_large(cap: usize) -> ApiError {
    ApiError::new(
        413,
        ErrorCode::BodyTooLarge,
        format!("request body exceeds this route's {cap} bytes"),
    )
}

/// Reads the body, refusing it at `cap` bytes without buffering more than that: a declared
/// `Content-Length` over the cap is refused before a byte is read, and a body without one is
/// read as a stream and cut off at the cap.
pub(crate) async fn body_bytes(req: &mut Request, cap: usize) -> ApiResult<Vec<u8>> {
    let declared = req.headers().get("content-length").ok().flatten();
    if let Some(text) = declared {
        match text.trim().parse::<u64>() {
            Ok(n) if n > cap as u64 => {
                return Err(ApiError::new(
                    413,
                    ErrorCode::BodyTooLarge,
                    format!("request body declares {n} bytes; this route takes at most {cap}"),
                ))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(ApiError::bad_request(
                    ErrorCode::InvalidBody,
                    "Content-Length is not a number",
                ))
            }
        }
    }
    // No body at all (a GET, an empty POST) is an empty body.
    let Ok(mut stream) = req.stream() else {
        return Ok(Vec::new());
    };
    let mut bytes = Vec::new();
    while let Some(piece) = stream.next().await {
        let piece = piece.map_err(|_| {
            ApiError::bad_request(ErrorCode::InvalidBody, "could not read the request body")
        })?;
        if bytes.len() + piece.len() > cap {
            return Err(too_large(cap));
        }
        bytes.extend_from_slice(&piece);
    }
    Ok(bytes)
}

/// Whether no array or object in `bytes` nests deeper than `max`. A byte scan that knows
/// strings and escapes, so it runs before (and instead of) a parse that would recurse.
fn depth_within(bytes: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// Reads the body as one JSON value (at most `cap` bytes, [`MAX_JSON_DEPTH`] deep), keeping
/// number lexemes (hashes depend on them).
pub(crate) async fn json_body_capped(req: &mut Request, cap: usize) -> ApiResult<Value> {
    let bytes = body_bytes(req, cap).await?;
    if bytes.is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    if !depth_within(&bytes, MAX_JSON_DEPTH) {
        return Err(ApiError::bad_request(
            ErrorCode::JsonTooDeep,
            format!("request body nests deeper than {MAX_JSON_DEPTH} levels"),
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(
            ErrorCode::InvalidJson,
            format!("request body is not JSON: {e}"),
        )
    })
}

/// [`json_body_capped`] at the default cap, [`MAX_BODY_BYTES`].
pub(crate) async fn json_body(req: &mut Request) -> ApiResult<Value> {
    json_body_capped(req, MAX_BODY_BYTES).await
}

/// The body as a JSON object, at the default cap.
pub(crate) async fn json_object(req: &mut Request) -> ApiResult<serde_json::Map<String, Value>> {
    json_object_capped(req, MAX_BODY_BYTES).await
}

/// The body as a JSON object of at most `cap` bytes.
pub(crate) async fn json_object_capped(
    req: &mut Request,
    cap: usize,
) -> ApiResult<serde_json::Map<String, Value>> {
    match json_body_capped(req, cap).await? {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_request(
            ErrorCode::InvalidBody,
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

/// The network a limit is kept for: the client's IPv4 address, or the /64 its IPv6 address is
/// in (one host is normally given a whole /64 and can rotate addresses inside it freely), or
/// `"unknown"` when no address was reported (a local client) or it does not parse.
pub(crate) fn client_network(req: &Request) -> String {
    client_address(req).map_or_else(|| "unknown".to_owned(), |address| network_of(&address))
}

/// [`client_network`]'s rule on an address as text. An IPv4-mapped IPv6 address
/// (`::ffff:192.0.2.1`) is its IPv4 address, so one host cannot count twice.
pub(crate) fn network_of(address: &str) -> String {
    prefix_of(address, 4)
}

/// The IPv4 address itself, or the IPv6 prefix of `segments` 16-bit segments the address is
/// in (4: its /64, 3: its /48); `"unknown"` when it does not parse.
fn prefix_of(address: &str, segments: usize) -> String {
    use std::net::IpAddr;
    match address.trim().parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let kept: Vec<String> = v6.segments()[..segments]
                    .iter()
                    .map(|segment| format!("{segment:x}"))
                    .collect();
                format!("{}::/{}", kept.join(":"), segments * 16)
            }
        },
        Err(_) => "unknown".to_owned(),
    }
}

/// The site an enrollment's share is also kept for: the /48 an IPv6 address is in (what one
/// tunnel broker account or small ISP customer is given, so 65,536 /64s in one hand), or the
/// IPv4 address itself (a network, as in [`network_of`]). `"unknown"` as there.
pub(crate) fn client_site(req: &Request) -> String {
    client_address(req).map_or_else(|| "unknown".to_owned(), |address| site_of(&address))
}

/// [`client_site`]'s rule on an address as text.
pub(crate) fn site_of(address: &str) -> String {
    prefix_of(address, 3)
}

#[cfg(test)]
mod tests {
    use super::{depth_within, network_of, site_of};

    #[test]
    fn an_ipv6_host_is_limited_by_its_64_and_an_ipv4_host_by_its_address() {
        assert_eq!(network_of("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(
            network_of("2001:0db8:0001:0002:ffff:ffff:ffff:ffff"),
            "2001:db8:1:2::/64"
        );
        assert_ne!(network_of("2001:db8:1:3::1"), network_of("2001:db8:1:2::1"));
        assert_eq!(network_of("192.0.2.7"), "192.0.2.7");
        assert_ne!(network_of("192.0.2.8"), network_of("192.0.2.7"));
        assert_eq!(network_of("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(network_of("not an address"), "unknown");
        assert_eq!(network_of(""), "unknown");
    }

    #[test]
    fn an_ipv6_enrollment_shares_its_48_and_an_ipv4_one_its_address() {
        assert_eq!(site_of("2001:db8:1:2:aaaa::1"), "2001:db8:1::/48");
        assert_eq!(site_of("2001:db8:1:ffff::7"), site_of("2001:db8:1:2::1"));
        assert_ne!(site_of("2001:db8:2:2::1"), site_of("2001:db8:1:2::1"));
        assert_eq!(site_of("192.0.2.7"), "192.0.2.7");
        assert_eq!(site_of("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(site_of("not an address"), "unknown");
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn depth_counts_arrays_and_objects() {
        assert!(depth_within(nested(64).as_bytes(), 64));
        assert!(!depth_within(nested(65).as_bytes(), 64));
        assert!(!depth_within(br#"{"a":{"b":{"c":1}}}"#, 2));
        assert!(depth_within(br#"{"a":{"b":{"c":1}}}"#, 3));
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let text = format!(r#"{{"a":"{}","b":"\"[[["}}"#, "[".repeat(500));
        assert!(depth_within(text.as_bytes(), 1));
        // An escaped backslash ends before the quote, which then closes the string.
        assert!(!depth_within(br#"["\\",[[1]]]"#, 2));
    }
}
