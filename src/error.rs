//! The edge's one error type, and the one place it becomes an HTTP response.
//!
//! Every failure a client can cause maps to a status and a stable machine code in
//! `{"error": {"code", "message"}}` (the shape the EvalGate SDK reads). Internal failures are
//! logged with their detail and answered with a generic 500, so storage errors never leak.

use worker::{console_error, Response};

#[derive(Debug)]
pub(crate) struct ApiError {
    status: u16,
    code: &'static str,
    message: String,
    /// For a schema guard that fired: the database's text naming it. Never sent to clients.
    violation: Option<String>,
}

pub(crate) type ApiResult<T> = std::result::Result<T, ApiError>;

impl ApiError {
    pub(crate) fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            violation: None,
        }
    }

    /// A constraint or trigger refused a write. Handlers that expect a particular guard turn
    /// this into their own answer (see [`ApiError::violation_text`]); unrefined, it is a 409.
    pub(crate) fn violation(detail: String) -> Self {
        console_error!("constraint violation: {detail}");
        Self {
            violation: Some(detail),
            ..Self::new(
                409,
                "CONFLICT",
                "the change conflicts with the current state; reload and retry",
            )
        }
    }

    pub(crate) fn violation_text(&self) -> Option<&str> {
        self.violation.as_deref()
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(400, code, message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "AUTHENTICATION_FAILED", message)
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "FORBIDDEN", message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "NOT_FOUND", message)
    }

    pub(crate) fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(409, code, message)
    }

    pub(crate) fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(422, code, message)
    }

    pub(crate) fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(503, code, message)
    }

    /// A failure of ours, not the client's: the detail goes to the log only.
    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        console_error!("internal error: {detail}");
        Self::new(500, "INTERNAL", "internal error")
    }

    pub(crate) fn into_response(self) -> worker::Result<Response> {
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        json_response(self.status, &body)
    }
}

impl From<worker::Error> for ApiError {
    fn from(err: worker::Error) -> Self {
        Self::internal(err)
    }
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
                ApiError::new(err.http_status(), err.code(), err.to_string())
            }
        }
    )*};
}

from_protocol_error!(
    edgerunner_protocol::capability::CapabilityError,
    edgerunner_protocol::state::StateError,
    edgerunner_protocol::keypair::KeyError,
    edgerunner_protocol::envelope::EnvelopeError,
);
