//! The API's machine-readable contract, `docs/openapi.json`, served as written at
//! `GET /openapi.json`; and the router's answer for a path the document has but a method it
//! does not list there: `405 METHOD_NOT_ALLOWED` with the methods it does list in `Allow`.
//!
//! The document is the one source of the path table used here, so an `Allow` header cannot
//! disagree with it. The e2e suites check every answer against the same document, and a test
//! checks the route table in `lib.rs` against its paths (`tests/contract`).

use edgerunner_protocol::error_code::ErrorCode;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::de::IgnoredAny;
use serde::Deserialize;
use worker::Response;

use crate::error::{ApiError, ApiResult};

/// The document, byte for byte as committed.
pub(crate) const DOCUMENT: &str = include_str!("../docs/openapi.json");

/// `GET /openapi.json`: no credential; the same bytes for every caller.
pub(crate) fn serve() -> ApiResult<Response> {
    let mut res = Response::ok(DOCUMENT)?;
    let headers = res.headers_mut();
    headers.set("content-type", "application/json")?;
    headers.set("cache-control", "public, max-age=300")?;
    Ok(res)
}

/// HTTP methods, as the document's path items name them.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

#[derive(Deserialize)]
struct Document {
    paths: BTreeMap<String, BTreeMap<String, IgnoredAny>>,
}

/// Each documented path as its segments (`None` for a `{template}` segment), its methods and
/// its text as the document writes it.
type PathTable = Vec<(Vec<Option<String>>, Vec<String>, String)>;

fn path_table() -> &'static PathTable {
    static TABLE: OnceLock<PathTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The document is compiled in and parsed by a unit test; an unreadable one is no table.
        let document: Document = match serde_json::from_str(DOCUMENT) {
            Ok(document) => document,
            Err(_) => return Vec::new(),
        };
        document
            .paths
            .into_iter()
            .map(|(path, item)| {
                let segments = path
                    .trim_matches('/')
                    .split('/')
                    .map(|s| (!(s.starts_with('{') && s.ends_with('}'))).then(|| s.to_owned()))
                    .collect();
                let methods = item
                    .into_keys()
                    .filter(|k| METHODS.contains(&k.as_str()))
                    .map(|k| k.to_ascii_uppercase())
                    .collect();
                (segments, methods, path)
            })
            .collect()
    })
}

/// The methods the document lists for the path `segments` name (as the router splits it),
/// or `None` when it has no such path. As OpenAPI matches paths, the documented path with the
/// most literal segments is the one that applies: `/api/remote-runners/jobs` (GET, POST), not
/// `/api/remote-runners/{id}` (GET, PATCH).
pub(crate) fn documented_methods(segments: &[&str]) -> Option<&'static [String]> {
    documented(segments).map(|(methods, _)| methods.as_slice())
}

/// The documented path the path `segments` name, as the document writes it
/// (`/api/remote-runners/jobs/{id}`): a request's route with no id in it, for its log line.
pub(crate) fn documented_path(segments: &[&str]) -> Option<&'static str> {
    documented(segments).map(|(_, path)| path.as_str())
}

/// The documented path `segments` match (see [`documented_methods`]): its methods and text.
fn documented(segments: &[&str]) -> Option<(&'static Vec<String>, &'static String)> {
    path_table()
        .iter()
        .filter_map(|(pattern, methods, path)| {
            let matches = pattern.len() == segments.len()
                && pattern.iter().zip(segments).all(|(part, seg)| match part {
                    Some(literal) => literal == seg,
                    None => !seg.is_empty(),
                });
            matches.then(|| {
                (
                    pattern.iter().filter(|p| p.is_some()).count(),
                    methods,
                    path,
                )
            })
        })
        .max_by_key(|(literal, _, _)| *literal)
        .map(|(_, methods, path)| (methods, path))
}

/// The `Allow` header for a path's documented methods: those, and HEAD wherever GET is.
fn allow_header(documented: &[String]) -> String {
    let mut allow: Vec<&str> = documented.iter().map(String::as_str).collect();
    if allow.contains(&"GET") {
        allow.push("HEAD");
    }
    allow.sort_unstable();
    allow.join(", ")
}

/// `405 METHOD_NOT_ALLOWED`, with the documented methods in `Allow` (see [`allow_header`]),
/// for a request whose path the document has under other methods only (`OPTIONS` and unknown
/// methods included); `None` for every other request, which the route
/// table then takes (or answers `404`). So no `{id}` arm serves a method on a literal path
/// the document does not list (a `PATCH /api/remote-runners/jobs` is not a runner's `PATCH`).
pub(crate) fn refuse_undocumented_method(
    method: &str,
    segments: &[&str],
) -> Option<ApiResult<Response>> {
    let allowed = documented_methods(segments)?;
    if allowed.iter().any(|m| m == method) {
        return None;
    }
    let allow = allow_header(allowed);
    let refusal = ApiError::new(
        405,
        ErrorCode::MethodNotAllowed,
        format!("{method} is not a method this path answers (it answers {allow})"),
    );
    Some((|| {
        let mut res = refusal.into_response()?;
        res.headers_mut().set("allow", &allow)?;
        Ok(res)
    })())
}

#[cfg(test)]
mod tests {
    use super::{documented_methods, documented_path, Document, DOCUMENT};

    #[test]
    fn the_compiled_document_parses_and_has_the_runner_routes() {
        let document: Document = serde_json::from_str(DOCUMENT).expect("docs/openapi.json parses");
        assert!(document.paths.len() > 40, "{} paths", document.paths.len());
        assert_eq!(
            documented_methods(&["api", "remote-runners", "claim"]),
            Some(&["POST".to_owned()][..])
        );
        assert_eq!(
            documented_methods(&["api", "remote-runners", "jobs", "job_1"]),
            Some(&["GET".to_owned()][..])
        );
        assert_eq!(
            documented_methods(&["api", "remote-runners", "jobs"]),
            Some(&["GET".to_owned(), "POST".to_owned()][..])
        );
        assert_eq!(documented_methods(&["api", "nothing"]), None);
    }

    #[test]
    fn a_request_path_is_named_by_its_documented_template() {
        assert_eq!(
            documented_path(&["api", "remote-runners", "jobs", "job_1"]),
            Some("/api/remote-runners/jobs/{id}")
        );
        // The literal path wins over a template it also matches.
        assert_eq!(
            documented_path(&["api", "remote-runners", "jobs"]),
            Some("/api/remote-runners/jobs")
        );
        assert_eq!(documented_path(&["api", "nothing"]), None);
    }
}
