//! Request parsing at the boundary: size-capped JSON bodies, bearer tokens, query strings,
//! the client address. Nothing here knows about jobs or runners.

use futures_util::StreamExt;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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
        "BODY_TOO_LARGE",
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
                    "BODY_TOO_LARGE",
                    format!("request body declares {n} bytes; this route takes at most {cap}"),
                ))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(ApiError::bad_request(
                    "INVALID_BODY",
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
            ApiError::bad_request("INVALID_BODY", "could not read the request body")
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
    json_body_from_bytes(&body_bytes(req, cap).await?)
}

fn json_body_from_bytes(bytes: &[u8]) -> ApiResult<Value> {
    if bytes.is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    if !depth_within(bytes, MAX_JSON_DEPTH) {
        return Err(ApiError::bad_request(
            "JSON_TOO_DEEP",
            format!("request body nests deeper than {MAX_JSON_DEPTH} levels"),
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request("INVALID_JSON", format!("request body is not JSON: {e}"))
    })
}

/// A JSON body kept as the text it arrived as, with one top-level string field read out.
pub(crate) struct ForwardedBody {
    /// The body as received, checked to be one JSON value; `{}` when the body was empty.
    pub(crate) text: String,
    /// The named field, when the body is an object whose (last) such field is a string.
    pub(crate) field: Option<String>,
}

/// Reads a body that is passed on whole rather than used here (at most `cap` bytes,
/// [`MAX_JSON_DEPTH`] deep): it is checked to be JSON and only `field` is read out of it, so
/// no tree of its values is built and nothing is printed again. The refusals are
/// [`json_body_capped`]'s, with the same codes.
pub(crate) async fn json_body_forwarded(
    req: &mut Request,
    cap: usize,
    field: &str,
) -> ApiResult<ForwardedBody> {
    forwarded_body(body_bytes(req, cap).await?, field)
}

fn forwarded_body(bytes: Vec<u8>, field: &str) -> ApiResult<ForwardedBody> {
    if bytes.is_empty() {
        return Ok(ForwardedBody {
            text: "{}".to_owned(),
            field: None,
        });
    }
    if !depth_within(&bytes, MAX_JSON_DEPTH) {
        return Err(ApiError::bad_request(
            "JSON_TOO_DEEP",
            format!("request body nests deeper than {MAX_JSON_DEPTH} levels"),
        ));
    }
    let not_json = |e: &dyn std::fmt::Display| {
        ApiError::bad_request("INVALID_JSON", format!("request body is not JSON: {e}"))
    };
    let text = String::from_utf8(bytes).map_err(|e| not_json(&e))?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let found = FieldOf(field)
        .deserialize(&mut de)
        .and_then(|found| de.end().map(|()| found))
        .map_err(|e| not_json(&e))?;
    Ok(ForwardedBody { text, field: found })
}

/// Reads one top-level string field of any JSON value, skipping (but checking) the rest.
struct FieldOf<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for FieldOf<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldOf<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // The last occurrence wins, as when the body is parsed into a map.
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.0 {
                found = match map.next_value::<Value>()? {
                    Value::String(text) => Some(text),
                    _ => None,
                };
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
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

#[cfg(test)]
mod tests {
    use super::{depth_within, forwarded_body, json_body_from_bytes, MAX_JSON_DEPTH};

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

    /// Bodies of every kind: what the forwarded read makes of each must be what the parse
    /// into a value makes of it (same refusal, same field, the same JSON passed on).
    #[test]
    fn a_forwarded_body_is_refused_and_read_exactly_as_a_parsed_one() {
        let deep = format!("{{\"jobId\":\"job_1\",\"x\":{}}}", nested(MAX_JSON_DEPTH));
        let bodies: Vec<Vec<u8>> = [
            "",
            "{}",
            r#"{"jobId":"job_1","sequence":0,"payload":{"segments":[{"stream":"stdout","text":"a\n"}]}}"#,
            r#"  {"payload": {"jobId": "inner"}, "jobId": "job_\u00e9", "n": 1.50e3} "#,
            r#"{"jobId":"first","jobId":"last"}"#,
            r#"{"jobId":"first","jobId":7}"#,
            r#"{"jobId":7}"#,
            r#"{"jobId":null}"#,
            r#"["job_1"]"#,
            r#""job_1""#,
            "12.50",
            "true",
            "null",
            r#"{"jobId":"job_1"} trailing"#,
            r#"{"jobId":"job_1","#,
            r#"{"jobId":"job_1","x":[1,2,}"#,
            r#"{"jobId":"job_1","x":"\q"}"#,
            r#"{'jobId':'job_1'}"#,
            "{\"jobId\":\"job_1\",\"x\":\"tab\there\"}",
            &deep,
            &format!("{{\"jobId\":\"job_1\",\"x\":{}}}", nested(MAX_JSON_DEPTH + 1)),
        ]
        .iter()
        .map(|body| body.as_bytes().to_vec())
        .chain([
            b"{\"jobId\":\"job_1\",\"x\":\"\xff\"}".to_vec(),
            b"{\"jobId\":\"\xc3\"}".to_vec(),
        ])
        .collect();
        for body in bodies {
            let shown = String::from_utf8_lossy(&body).into_owned();
            let parsed = json_body_from_bytes(&body);
            let forwarded = forwarded_body(body, "jobId");
            match (parsed, forwarded) {
                (Ok(value), Ok(forwarded)) => {
                    let field = value
                        .get("jobId")
                        .and_then(|v| v.as_str())
                        .map(str::to_owned);
                    assert_eq!(forwarded.field, field, "{shown}");
                    let again: serde_json::Value =
                        serde_json::from_str(&forwarded.text).expect("forwarded text is JSON");
                    assert_eq!(again, value, "{shown}");
                }
                (Err(parsed), Err(forwarded)) => {
                    assert_eq!(
                        (forwarded.status(), forwarded.code()),
                        (parsed.status(), parsed.code()),
                        "{shown}"
                    );
                }
                (parsed, forwarded) => {
                    panic!(
                        "{shown}: parsed {parsed:?}, forwarded {:?}",
                        forwarded.map(|f| f.field)
                    )
                }
            }
        }
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let text = format!(r#"{{"a":"{}","b":"\"[[["}}"#, "[".repeat(500));
        assert!(depth_within(text.as_bytes(), 1));
        // An escaped backslash ends before the quote, which then closes the string.
        assert!(!depth_within(br#"["\\",[[1]]]"#, 2));
    }
}
