//! The edge's one error type, and the one place it becomes an HTTP response.
//!
//! Every failure a client can cause maps to a status and a stable machine code in
//! `{"error": {"code", "message"}}` (the shape the EvalGate SDK reads). Internal failures are
//! logged with their detail and answered with a generic 500, so storage errors never leak.

use std::collections::BTreeMap;

use edgerunner_protocol::error_code::ErrorCode;
use serde::Serialize;
use worker::{console_error, console_log, Response};

use crate::answers::Answer;

#[derive(Debug)]
pub(crate) struct ApiError {
    status: u16,
    code: ErrorCode,
    message: String,
    /// For a schema guard that fired: its name in [`crate::store::guards::GUARDS`].
    guard: Option<&'static str>,
    /// For a `429`: seconds until the caller may try again (`Retry-After`).
    retry_after: Option<u64>,
    /// Members of the body beside `error`, for a refusal that says more than why (a refused
    /// completion carries its `decision`).
    beside: Vec<(&'static str, serde_json::Value)>,
}

pub(crate) type ApiResult<T> = std::result::Result<T, ApiError>;

impl ApiError {
    pub(crate) fn new(status: u16, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            guard: None,
            retry_after: None,
            beside: Vec::new(),
        }
    }

    /// A constraint or trigger refused a write. A guard in the table answers as the table
    /// says (handlers that give it a meaning of their own match [`ApiError::guard`]); any other
    /// constraint is a bug of ours: a 500, with the database's text in the log.
    pub(crate) fn violation(detail: &str) -> Self {
        match crate::store::guards::Guard::reported(detail) {
            Some(guard) => {
                // An expected refusal, not a failure: one line, without the driver's stack.
                console_log!(
                    "refused by schema guard {} ({} {}): {}",
                    guard.name,
                    guard.answer.status,
                    guard.answer.code,
                    first_sentence(detail)
                );
                Self::guarded(guard)
            }
            None => Self::internal(format!("constraint not in the guard table: {detail}")),
        }
    }

    /// A refusal's answer (`crate::answers`) with what the deciding object knows of the case
    /// after its one message: `message (facts)`.
    pub(crate) fn stating(answer: Answer, facts: impl std::fmt::Display) -> Self {
        Self::new(
            answer.status,
            answer.code,
            format!("{} ({facts})", answer.message),
        )
    }

    /// The answer the guard table gives for `guard`.
    pub(crate) fn guarded(guard: &'static crate::store::guards::Guard) -> Self {
        Self {
            guard: Some(guard.name),
            ..guard.answer.into()
        }
    }

    /// The schema guard that refused the write, by name.
    pub(crate) fn guard(&self) -> Option<&'static str> {
        self.guard
    }

    pub(crate) fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(400, code, message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, ErrorCode::AuthenticationFailed, message)
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, ErrorCode::Forbidden, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, ErrorCode::NotFound, message)
    }

    pub(crate) fn conflict(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(409, code, message)
    }

    pub(crate) fn unprocessable(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(422, code, message)
    }

    pub(crate) fn unavailable(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(503, code, message)
    }

    /// A failure of ours, not the client's: the detail goes to the log only.
    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        console_error!("internal error: {detail}");
        Self::failed_elsewhere()
    }

    /// The answer to a failure already logged where it happened (in a Durable Object).
    pub(crate) fn failed_elsewhere() -> Self {
        Self::new(500, ErrorCode::Internal, "internal error")
    }

    pub(crate) fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The `Retry-After` this answer carries, in seconds.
    #[cfg(test)]
    pub(crate) fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// The body's member `name` beside `error`.
    pub(crate) fn with_member(mut self, name: &'static str, value: serde_json::Value) -> Self {
        self.beside.push((name, value));
        self
    }

    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    pub(crate) fn code(&self) -> ErrorCode {
        self.code
    }

    /// The JSON body of the answer ([`ErrorBody`]).
    pub(crate) fn body(&self) -> serde_json::Value {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.as_str(),
                message: &self.message,
            },
            beside: self
                .beside
                .iter()
                .map(|(name, value)| (*name, value))
                .collect(),
        };
        // A struct of strings and JSON values always serializes.
        serde_json::to_value(body).unwrap_or_default()
    }

    pub(crate) fn into_response(self) -> worker::Result<Response> {
        let mut res = json_response(self.status, &self.body())?;
        if let Some(seconds) = self.retry_after {
            res.headers_mut().set("retry-after", &seconds.to_string())?;
        }
        Ok(res)
    }
}

/// A refusal's answer as written (`crate::answers`, or a guard's in the guard table).
impl From<Answer> for ApiError {
    fn from(answer: Answer) -> Self {
        Self::new(answer.status, answer.code, answer.message)
    }
}

impl From<worker::Error> for ApiError {
    fn from(err: worker::Error) -> Self {
        Self::internal(err)
    }
}

/// `Error` of docs/openapi.json: `{"error": {"code", "message"}}`, and the members a refusal
/// says beside it (a refused completion's `decision`).
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
    #[serde(flatten)]
    beside: BTreeMap<&'static str, &'a serde_json::Value>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'static str,
    message: &'a str,
}

/// A JSON response with the given status.
pub(crate) fn json_response(status: u16, body: &serde_json::Value) -> worker::Result<Response> {
    let mut res = Response::ok(body.to_string())?.with_status(status);
    res.headers_mut().set("content-type", "application/json")?;
    Ok(res)
}

/// Protocol-crate errors already know their status and stable code; this is their one mapping.
macro_rules! from_protocol_error {
    ($($ty:ty),* $(,)?) => {$(
        impl From<$ty> for ApiError {
            fn from(err: $ty) -> Self {
                ApiError::new(err.http_status(), err.error_code(), err.to_string())
            }
        }
    )*};
}

from_protocol_error!(
    edgerunner_protocol::capability::CapabilityError,
    edgerunner_protocol::chunk::ChunkError,
    edgerunner_protocol::completion::CompletionError,
    edgerunner_protocol::state::StateError,
    edgerunner_protocol::keypair::KeyError,
    edgerunner_protocol::envelope::EnvelopeError,
);

/// The database's own words from a driver error's text: from its first `Error: ` to the end of
/// that line, without the `: SQLITE_…` suffix (the whole text when it has no such shape).
fn first_sentence(detail: &str) -> &str {
    let from = detail
        .find("Error: ")
        .map_or(detail, |at| &detail[at + "Error: ".len()..]);
    let line = from.lines().next().unwrap_or(from);
    line.find(": SQLITE_").map_or(line, |at| &line[..at])
}

#[cfg(test)]
mod log_tests {
    use super::first_sentence;

    #[test]
    fn a_guard_log_line_keeps_the_database_words_only() {
        let detail = "D1: D1Error {\n    cause: JsValue(Error: UNIQUE constraint failed: runners.fingerprint: SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_UNIQUE)\n    Error: UNIQUE …\n        at D1DatabaseSessionAlwaysPrimary._sendOrThrow";
        assert_eq!(
            first_sentence(detail),
            "UNIQUE constraint failed: runners.fingerprint"
        );
        assert_eq!(first_sentence("plain words"), "plain words");
    }
}
