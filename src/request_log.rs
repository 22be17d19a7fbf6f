//! One structured line per request, for an operator to search (Workers Logs, `wrangler tail`,
//! or a local server's output): its route as the API document names it (never the path: no
//! id, no query), its status, the caller's organization when it authenticated, how long it
//! took and its request id, which the answer carries too (`x-request-id`).
//!
//! Nothing a caller sends is written but its method: not a header, not a body, not a path
//! segment. So no token, key or credential can reach the line (a test reads every line a
//! server wrote during the e2e suites for them).

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;
use worker::Request;

/// What authentication learned of the caller, for the request's line: shared between the
/// request's context (which fills it) and the entry point (which writes the line).
#[derive(Clone, Default)]
pub(crate) struct Seen(Rc<RefCell<Option<String>>>);

impl Seen {
    /// The caller's organization, once its key or credential is verified.
    pub(crate) fn organization(&self, organization_id: &str) {
        *self.0.borrow_mut() = Some(organization_id.to_owned());
    }

    fn organization_id(&self) -> Option<String> {
        self.0.borrow().clone()
    }
}

/// The longest request id taken from the platform (`cf-ray`); a longer one, or one with other
/// characters than letters, digits and `-`, is replaced by a fresh one.
const MAX_REQUEST_ID: usize = 64;

/// The request's id: Cloudflare's `cf-ray` where it is one, else 16 fresh hex digits.
pub(crate) fn request_id(req: &Request) -> String {
    let ray = req.headers().get("cf-ray").ok().flatten();
    match ray {
        Some(ray) if is_request_id(&ray) => ray,
        _ => crate::platform::random_id("req").unwrap_or_else(|_| "req_unavailable".to_owned()),
    }
}

fn is_request_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_REQUEST_ID
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The route a request's path names, without its ids: the API document's path
/// (`/api/remote-runners/jobs/{id}`), the panel's files, or `unmatched`.
pub(crate) fn route_of(segments: &[&str]) -> &'static str {
    if let Some(path) = crate::openapi::documented_path(segments) {
        return path;
    }
    match segments {
        [""] => "/",
        ["healthz"] => "/healthz",
        ["openapi.json"] => "/openapi.json",
        [first, ..] if *first == crate::panel::PREFIX => "/remote-runners/{file}",
        _ => "unmatched",
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a> {
    event: &'static str,
    method: &'a str,
    route: &'a str,
    status: u16,
    organization_id: Option<String>,
    duration_ms: i64,
    request_id: &'a str,
}

/// The line, as JSON.
pub(crate) fn line(
    method: &str,
    route: &str,
    status: u16,
    seen: &Seen,
    duration_ms: i64,
    request_id: &str,
) -> String {
    let line = Line {
        event: "request",
        // Only the methods the router knows are named; any other is `other`.
        method: match method {
            "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" => method,
            _ => "other",
        },
        route,
        status,
        organization_id: seen.organization_id(),
        duration_ms: duration_ms.max(0),
        request_id,
    };
    serde_json::to_string(&line).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_route_and_the_caller_and_nothing_it_was_sent() {
        let seen = Seen::default();
        let anonymous: serde_json::Value = serde_json::from_str(&line(
            "POST",
            "/api/remote-runners/session",
            401,
            &seen,
            3,
            "req_1",
        ))
        .expect("JSON");
        assert_eq!(anonymous["event"], "request");
        assert_eq!(anonymous["route"], "/api/remote-runners/session");
        assert_eq!(anonymous["status"], 401);
        assert!(anonymous["organizationId"].is_null());
        assert_eq!(anonymous["durationMs"], 3);
        assert_eq!(anonymous["requestId"], "req_1");

        seen.organization("org_1");
        let known: serde_json::Value =
            serde_json::from_str(&line("PROPFIND", "unmatched", 405, &seen, -1, "r"))
                .expect("JSON");
        assert_eq!(known["organizationId"], "org_1");
        assert_eq!(known["method"], "other");
        assert_eq!(known["durationMs"], 0);
    }

    #[test]
    fn routes_are_templates_never_paths() {
        assert_eq!(
            route_of(&["api", "remote-runners", "jobs", "job_abc"]),
            "/api/remote-runners/jobs/{id}"
        );
        assert_eq!(
            route_of(&["remote-runners", "app.js"]),
            "/remote-runners/{path}"
        );
        assert_eq!(
            route_of(&["remote-runners", "a", "b", "c", "d"]),
            "/remote-runners/{file}"
        );
        assert_eq!(route_of(&["erk_secret-in-a-path"]), "unmatched");
        assert_eq!(route_of(&[""]), "/");
    }

    #[test]
    fn only_a_plain_ray_id_is_taken() {
        assert!(is_request_id("8f1c2a3b4c5d6e7f-IAD"));
        assert!(!is_request_id(""));
        assert!(!is_request_id("a b"));
        assert!(!is_request_id("x\ny"));
        assert!(!is_request_id(&"a".repeat(65)));
    }
}
