//! HTTP: one request and its whole answer, each answer checked against the API document.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};
use serde_json::Value;

use crate::*;

/// One answer, kept whole so that a failed assertion shows what the server said.
pub struct Reply {
    pub what: String,
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {} {}", self.what, self.status, self.text)
    }
}

impl Reply {
    /// The body as JSON (panics, showing the body, when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("{self:?}: body is not JSON ({e})"))
    }

    /// The body as JSON after checking the status.
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "unexpected status: {self:?}");
        self.json()
    }

    /// Checks the status and the `{"error": {"code", "message"}}` body.
    pub fn expect_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "unexpected status: {self:?}");
        let body = self.json();
        assert_eq!(
            body["error"]["code"], code,
            "unexpected error code: {self:?}"
        );
        assert!(
            body["error"]["message"].is_string(),
            "error without a message: {self:?}"
        );
    }

    /// Checks the status and that the body is an error object (any code).
    pub fn expect_error_status(&self, status: u16) {
        assert_eq!(self.status, status, "unexpected status: {self:?}");
        let body = self.json();
        assert!(
            body["error"]["code"].is_string() && body["error"]["message"].is_string(),
            "not an error body: {self:?}"
        );
    }

    pub fn content_type(&self) -> String {
        self.header(reqwest::header::CONTENT_TYPE.as_str())
    }

    /// A header's value as text; empty when absent or not text.
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }
}

/// Sends a request, reads the whole answer, and checks it against the API document
/// ([`contract::check`]): an answer the document does not list fails the test here.
pub async fn send(what: String, request: RequestBuilder) -> Reply {
    let (client, request) = request.build_split();
    let request = request.unwrap_or_else(|e| panic!("{what}: building the request failed: {e}"));
    let method = request.method().as_str().to_owned();
    let path = request.url().path().to_owned();
    let response = client
        .execute(request)
        .await
        .unwrap_or_else(|e| panic!("{what}: request failed: {}", error_chain(&e)));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response
        .text()
        .await
        .unwrap_or_else(|e| panic!("{what}: reading the body failed: {}", error_chain(&e)));
    let reply = Reply {
        what,
        status,
        headers,
        text,
    };
    let answer = contract::Answer {
        method: &method,
        path: &path,
        status,
        content_type: &reply.content_type(),
        body: &reply.text,
    };
    if let Err(problem) = contract::check(&answer) {
        panic!("contract: docs/openapi.json does not list this answer: {problem}\n{reply:?}");
    }
    reply
}

/// An error and each of its sources, so that "error sending request" says why (connection
/// refused, reset, timed out).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A JSON request to the server under test, with an optional bearer token.
pub async fn call(method: Method, path: &str, bearer: Option<&str>, body: Option<&Value>) -> Reply {
    call_at(&base_url(), method, path, bearer, body).await
}

/// A client address of its own for one request (from the benchmarking range 198.18.0.0/15),
/// so that the per-address limits on unauthenticated routes count only what a test sends
/// from an address it chose (see `enroll_from`).
pub fn fresh_address() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) + u64::from(std::process::id()) * 7919;
    format!("198.{}.{}.{}", 18 + (n >> 16) % 2, (n >> 8) % 256, n % 256)
}

/// A JSON request to the server at `base`, from a [`fresh_address`].
pub async fn call_at(
    base: &str,
    method: Method,
    path: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
) -> Reply {
    let mut request = client()
        .request(method.clone(), format!("{base}{path}"))
        .header("CF-Connecting-IP", fresh_address());
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    send(format!("{method} {path}"), request).await
}

pub async fn get(path: &str, bearer: &str) -> Reply {
    call(Method::GET, path, Some(bearer), None).await
}

pub async fn post(path: &str, bearer: Option<&str>, body: &Value) -> Reply {
    call(Method::POST, path, bearer, Some(body)).await
}

pub async fn patch(path: &str, bearer: &str, body: &Value) -> Reply {
    call(Method::PATCH, path, Some(bearer), Some(body)).await
}

pub async fn delete(path: &str, bearer: &str) -> Reply {
    call(Method::DELETE, path, Some(bearer), None).await
}

/// `PUT` with a raw body (runner file uploads).
pub async fn put_raw(path: &str, bearer: &str, body: Vec<u8>) -> Reply {
    let request = client()
        .put(url(path))
        .bearer_auth(bearer)
        .header(reqwest::header::CONTENT_TYPE, "text/plain")
        .body(body);
    send(format!("PUT {path}"), request).await
}
