//! JSON over HTTP, and the one error type of the SDK layer.
//!
//! Every answer is read whole; a non-2xx answer becomes [`ClientError::Api`] carrying the
//! server's `{"error": {"code", "message"}}` (and the body, since a completion refusal carries
//! its decision beside the error). Bodies are parsed with number lexemes intact
//! (`serde_json`'s `arbitrary_precision`), because what the runner hashes must be what the
//! server sent.

use core::fmt;
use std::time::Duration;

use edgerunner_protocol::envelope::AssignmentError;
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// A JSON client for one server.
#[derive(Clone, Debug)]
pub struct Http {
    client: reqwest::Client,
    base: String,
}

/// A 2xx answer, read whole.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub text: String,
}

impl Answer {
    /// The body as JSON (`what` names the request in the error).
    pub fn json(&self, what: &str) -> Result<Value, ClientError> {
        serde_json::from_str(&self.text).map_err(|error| ClientError::Malformed {
            what: what.to_owned(),
            detail: format!("the answer is not JSON: {error}"),
        })
    }
}

impl Http {
    /// `base` is the server's origin, e.g. `http://127.0.0.1:8787` (a trailing `/` is dropped).
    pub fn new(base: &str) -> Result<Self, ClientError> {
        let base = base.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::Config(format!(
                "server URL {base:?} must start with http:// or https://"
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("edgerunner/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| {
                ClientError::Config(format!("cannot build the HTTP client: {error}"))
            })?;
        Ok(Self { client, base })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends one request; any status is an [`Answer`] (the caller decides what is an error).
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Answer, ClientError> {
        let what = format!("{method} {path}");
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|error| ClientError::Transport {
                connect: error.is_connect(),
                what: what.clone(),
                detail: error_chain(&error),
            })?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|error| ClientError::Transport {
                connect: false,
                what: what.clone(),
                detail: error_chain(&error),
            })?;
        Ok(Answer { status, text })
    }

    /// Sends one request; a status outside 2xx is [`ClientError::Api`].
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Answer, ClientError> {
        let what = format!("{method} {path}");
        let answer = self.raw(method, path, bearer, body).await?;
        check(&what, answer)
    }
}

/// `Ok(answer)` for 2xx, else the server's error.
pub fn check(what: &str, answer: Answer) -> Result<Answer, ClientError> {
    if (200..300).contains(&answer.status) {
        return Ok(answer);
    }
    let body: Value = serde_json::from_str(&answer.text).unwrap_or(Value::Null);
    let code = body["error"]["code"].as_str().map(str::to_owned);
    let message = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| {
            let reason = StatusCode::from_u16(answer.status)
                .ok()
                .and_then(|status| status.canonical_reason())
                .unwrap_or("error");
            format!("{} {reason}", answer.status)
        });
    Err(ClientError::Api {
        what: what.to_owned(),
        status: answer.status,
        code,
        message,
        body,
    })
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// What went wrong talking to the server, in the SDK's terms.
#[derive(Debug)]
pub enum ClientError {
    /// The request was not answered: refused connection, timeout, broken stream. `connect`
    /// says the request never reached the server (so even a claim may be repeated).
    Transport {
        what: String,
        detail: String,
        connect: bool,
    },
    /// The server answered with an error status.
    Api {
        what: String,
        status: u16,
        code: Option<String>,
        message: String,
        body: Value,
    },
    /// A 2xx answer that is not what the protocol says.
    Malformed { what: String, detail: String },
    /// A claim answer that failed local verification: the job was not executed.
    Refused(AssignmentError),
    /// Local configuration (URL, key, credentials) is unusable.
    Config(String),
}

impl ClientError {
    /// The server's error code, when it gave one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => code.as_deref(),
            Self::Refused(error) => Some(error.code()),
            _ => None,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether trying the same request again may succeed: no answer at all, or an answer that
    /// says "not now" (408, 429, 500, 502, 504, and a 503 without one of the protocol's codes,
    /// which a proxy or a restarting server gives).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport { .. } => true,
            Self::Api { status, code, .. } => {
                matches!(status, 408 | 429 | 500 | 502 | 504) || (*status == 503 && code.is_none())
            }
            _ => false,
        }
    }

    /// Whether the request certainly did not reach the server.
    pub fn never_sent(&self) -> bool {
        matches!(self, Self::Transport { connect: true, .. })
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transport { what, detail, .. } => write!(f, "{what}: no answer ({detail})"),
            Self::Api {
                what,
                status,
                code,
                message,
                ..
            } => match code {
                Some(code) => write!(f, "{what}: {status} {code}: {message}"),
                None => write!(f, "{what}: {status}: {message}"),
            },
            Self::Malformed { what, detail } => write!(f, "{what}: {detail}"),
            Self::Refused(error) => write!(
                f,
                "assignment refused before execution ({}): {error}",
                error.code()
            ),
            Self::Config(detail) => f.write_str(detail),
        }
    }
}

impl std::error::Error for ClientError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: Option<&str>) -> ClientError {
        ClientError::Api {
            what: "POST /x".into(),
            status,
            code: code.map(str::to_owned),
            message: "m".into(),
            body: Value::Null,
        }
    }

    #[test]
    fn only_no_answer_and_not_now_answers_are_transient() {
        assert!(api(500, None).is_transient());
        assert!(api(429, Some("RATE_LIMITED")).is_transient());
        assert!(api(503, None).is_transient());
        assert!(!api(503, Some("RUNNER_AT_CAPACITY")).is_transient());
        assert!(!api(409, Some("STREAM_DUPLICATE_SEQUENCE")).is_transient());
        assert!(!api(401, Some("AUTHENTICATION_FAILED")).is_transient());
        assert!(!ClientError::Config("x".into()).is_transient());
    }

    #[test]
    fn error_answers_carry_the_servers_code_and_message() {
        let answer = Answer {
            status: 422,
            text: r#"{"error":{"code":"STREAM_GAP","message":"sequence 3 leaves a gap"}}"#.into(),
        };
        let error = check("POST /api/remote-runners/stream", answer).expect_err("an error");
        assert_eq!(error.code(), Some("STREAM_GAP"));
        assert_eq!(
            error.to_string(),
            "POST /api/remote-runners/stream: 422 STREAM_GAP: sequence 3 leaves a gap"
        );
        let error = check(
            "GET /x",
            Answer {
                status: 502,
                text: "<html>".into(),
            },
        )
        .expect_err("an error");
        assert_eq!(error.to_string(), "GET /x: 502: 502 Bad Gateway");
    }
}
