//! JSON over HTTP, and the one error type of the SDK layer.
//!
//! Redirects are never followed: a `3xx` answer is [`ClientError::Redirect`], naming where it
//! pointed. Every request carries a credential (a bootstrap token in the body, a session or
//! API key in `Authorization`), and following a redirect would hand it to whatever host the
//! answer names; a 307 or 308 would even send the body again. The server never redirects.
//!
//! Every answer is read whole, up to a bound ([`MAX_ANSWER_BYTES`] unless the client says
//! otherwise): a server that sends more, by its `Content-Length` or its bytes, gets a
//! [`ClientError::Malformed`] and is not read further, so a hostile or broken server cannot
//! make the runner's memory grow with what it sends. A non-2xx answer becomes [`ClientError::Api`] carrying the
//! server's `{"error": {"code", "message"}}` (and the body, since a completion refusal carries
//! its decision beside the error). Bodies are parsed with number lexemes intact
//! (`serde_json`'s `arbitrary_precision`), because what the runner hashes must be what the
//! server sent.

use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use edgerunner_protocol::envelope::AssignmentError;
use edgerunner_protocol::error_code::ErrorCode;
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// The most bytes of one answer a client reads by default: far past anything the runner is
/// sent (a claim's input or artifact is at most 1 MiB, a stream page 1 MiB of payload).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// A JSON client for one server.
#[derive(Clone, Debug)]
pub struct Http {
    client: reqwest::Client,
    base: String,
    /// The most bytes of one answer it reads.
    answer_limit: usize,
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

/// How long a connection to a loopback server may sit idle before the client drops it: below
/// the 5 s after which local workerd closes it.
pub const LOCAL_IDLE_CONNECTION: Duration = Duration::from_secs(3);

impl Http {
    /// `base` is the server's origin, e.g. `https://edgerunner.example.com` (a trailing `/` is
    /// dropped). Plain `http://` is accepted only for a loopback host ([`check_server_url`]).
    pub fn new(base: &str) -> Result<Self, ClientError> {
        let base = base.trim().trim_end_matches('/').to_owned();
        check_server_url(&base).map_err(ClientError::Config)?;
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            // Never follow: see the module's head.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("edgerunner/", env!("CARGO_PKG_VERSION")));
        if reqwest::Url::parse(&base).is_ok_and(|url| is_loopback(url.host_str())) {
            // A local server (`wrangler dev`, workerd) closes a connection idle for 5 s, and a
            // request written to it at that moment is lost (cloudflare/workers-sdk#14641): a
            // heartbeat every 5 s would meet that moment. Idle connections are dropped first.
            builder = builder.pool_idle_timeout(LOCAL_IDLE_CONNECTION);
        }
        let client = builder.build().map_err(|error| {
            ClientError::Config(format!("cannot build the HTTP client: {error}"))
        })?;
        Ok(Self {
            client,
            base,
            answer_limit: MAX_ANSWER_BYTES,
        })
    }

    /// The same client, reading answers of up to `bytes` (an admin's custody bundle is
    /// larger than anything a runner is sent).
    #[must_use]
    pub fn with_answer_limit(mut self, bytes: usize) -> Self {
        self.answer_limit = bytes;
        self
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
        if response.status().is_redirection() {
            return Err(ClientError::Redirect {
                what,
                status,
                location: location(response.headers()),
            });
        }
        let text = read_bounded(response, self.answer_limit, &what).await?;
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

/// The answer's body as text (invalid UTF-8 replaced, as `reqwest`'s `text()` does), read
/// chunk by chunk and refused as soon as it would pass `limit` bytes, or at once when its
/// `Content-Length` says it will.
async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
    what: &str,
) -> Result<String, ClientError> {
    let too_large = || ClientError::Malformed {
        what: what.to_owned(),
        detail: format!("the answer is larger than {limit} bytes; it was not read further"),
    };
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        let chunk = response
            .chunk()
            .await
            .map_err(|error| ClientError::Transport {
                connect: false,
                what: what.to_owned(),
                detail: error_chain(&error),
            })?;
        let Some(chunk) = chunk else {
            break;
        };
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(match String::from_utf8(body) {
        Ok(text) => text,
        Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
    })
}

/// Accepts `https://` for any host, and `http://` only when the host is loopback: `localhost`,
/// `127.0.0.0/8` or `[::1]`. Over plain HTTP anyone on the path reads the bootstrap token, the
/// session credential and the job-signing secret the session answer carries.
///
/// The URL is read by the same parser the HTTP client connects with, so the host checked is
/// the host dialled: `http://localhost@evil.example` is `evil.example`, and
/// `http://127.0.0.1.evil.example` is a domain, not an address.
pub fn check_server_url(base: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(base)
        .map_err(|error| format!("server URL {base:?} is not a URL: {error}"))?;
    match url.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(url.host_str()) => Ok(()),
        "http" => Err(format!(
            "server URL {base:?} uses plain http:// for a host that is not this machine \
             ({}): the runner's credentials and its job-signing secret would travel in clear \
             text; use https:// (http:// is accepted only for localhost, 127.0.0.0/8 and [::1])",
            url.host_str().unwrap_or("no host")
        )),
        _ => Err(format!(
            "server URL {base:?} must start with https:// (or http:// for a loopback host)"
        )),
    }
}

/// `host` as the URL parser normalized it: IPv4 in dotted decimal, IPv6 in brackets, domains
/// lowercased.
fn is_loopback(host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner
            .parse::<Ipv6Addr>()
            .is_ok_and(|address| address == Ipv6Addr::LOCALHOST);
    }
    match host.parse::<Ipv4Addr>() {
        Ok(address) => address.is_loopback(),
        Err(_) => host == "localhost",
    }
}

/// The most characters of a `Location` shown in an error.
const MAX_LOCATION_CHARS: usize = 300;

/// A redirect's `Location` as text fit for a message: visible ASCII only (what
/// [`reqwest::header::HeaderValue::to_str`] accepts), cut to [`MAX_LOCATION_CHARS`].
fn location(headers: &reqwest::header::HeaderMap) -> String {
    match headers.get(reqwest::header::LOCATION) {
        None => "no Location".to_owned(),
        Some(value) => match value.to_str() {
            Ok(text) if text.chars().count() > MAX_LOCATION_CHARS => {
                let cut: String = text.chars().take(MAX_LOCATION_CHARS).collect();
                format!("{cut}…")
            }
            Ok(text) => text.to_owned(),
            Err(_) => "a Location that is not text".to_owned(),
        },
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
            // Not our JSON (a proxy's or the runtime's own page): its first words say whose.
            let text: String = answer.text.trim().chars().take(200).collect();
            if text.is_empty() {
                format!("{} {reason}", answer.status)
            } else {
                format!("{} {reason}: {text}", answer.status)
            }
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
    /// The answer was a redirect (`3xx`): not followed, since the request carried a credential.
    Redirect {
        what: String,
        status: u16,
        location: String,
    },
    /// A claim answer that failed local verification: the job was not executed.
    Refused(AssignmentError),
    /// Local configuration (URL, key, credentials) is unusable.
    Config(String),
    /// The server bound a session to another runner or organization than this runner's
    /// configuration names: it was not used.
    IdentityMismatch(String),
}

impl ClientError {
    /// The server's error code, when it gave one this version knows. A code from a newer
    /// server is `None` here, as is a local refusal's: the callers that decide on a code
    /// treat both as a code they do not act on ([`Self::code_text`] still shows it).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Api { code, .. } => code.as_deref().and_then(ErrorCode::parse),
            _ => None,
        }
    }

    /// The code as text, for messages and logs: the server's (known to this version or not),
    /// or the local verification's for a refused assignment.
    pub fn code_text(&self) -> Option<&str> {
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
            Self::Redirect {
                what,
                status,
                location,
            } => write!(
                f,
                "{what}: the server answered {status} redirecting to {location}; not followed \
                 (the runner never follows a redirect, which would send its credentials \
                 elsewhere): configure the server's final URL"
            ),
            Self::Refused(error) => write!(
                f,
                "assignment refused before execution ({}): {error}",
                error.code()
            ),
            Self::Config(detail) | Self::IdentityMismatch(detail) => f.write_str(detail),
        }
    }
}

impl std::error::Error for ClientError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on a loopback port that answers one request with `head` then `body_bytes`
    /// bytes of `x`, then closes.
    async fn answering(head: &'static str, body_bytes: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("one request");
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let _ = socket.write_all(head.as_bytes()).await;
            let body = vec![b'x'; body_bytes];
            let _ = socket.write_all(&body).await;
            let _ = socket.shutdown().await;
        });
        url
    }

    const UNSIZED: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";

    #[tokio::test]
    async fn an_answer_past_the_limit_is_refused_and_not_read_further() {
        let url = answering(UNSIZED, 4_097).await;
        let http = Http::new(&url).expect("url").with_answer_limit(4_096);
        let refused = http.raw(Method::GET, "/", None, None).await.unwrap_err();
        assert!(
            matches!(&refused, ClientError::Malformed { detail, .. } if detail.contains("4096 bytes")),
            "{refused:?}"
        );
        // At the limit: read whole.
        let url = answering(UNSIZED, 4_096).await;
        let http = Http::new(&url).expect("url").with_answer_limit(4_096);
        let answer = http.raw(Method::GET, "/", None, None).await.expect("read");
        assert_eq!(answer.text.len(), 4_096);
    }

    #[tokio::test]
    async fn a_content_length_past_the_limit_is_refused_before_any_byte_is_read() {
        // It claims a terabyte and sends nothing: waiting for it would hang, reading it whole
        // would not fit.
        let head = "HTTP/1.1 200 OK\r\ncontent-length: 1000000000000\r\nconnection: close\r\n\r\n";
        let url = answering(head, 0).await;
        let refused = Http::new(&url)
            .expect("url")
            .raw(Method::GET, "/", None, None)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, ClientError::Malformed { .. }),
            "{refused:?}"
        );
    }

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
    fn plain_http_is_refused_for_hosts_that_are_not_loopback() {
        for url in [
            "http://example.com",
            "http://10.0.0.1:8787",
            "http://0.0.0.0:8787",
            "http://127.0.0.1.evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1@evil.example",
            "http://localhost:8787@evil.example/",
            "http://user:pw@evil.example",
            "http://evil.example/127.0.0.1",
            "http://evil.example?host=localhost",
            "http://evil.example#@127.0.0.1",
            "http://[::ffff:7f00:1]",
            "http://[fe80::1]",
            "http://[::]",
            "HTTP://evil.example",
        ] {
            let error = check_server_url(url).expect_err(url);
            assert!(
                error.contains("clear text") && error.contains("https://"),
                "{url}: {error}"
            );
            assert!(
                matches!(Http::new(url), Err(ClientError::Config(_))),
                "{url}"
            );
        }
        for url in ["ftp://127.0.0.1", "127.0.0.1:8787", "localhost", ""] {
            assert!(check_server_url(url).is_err(), "{url}");
        }
    }

    #[test]
    fn plain_http_is_accepted_for_loopback_hosts() {
        for url in [
            "http://127.0.0.1:8787",
            "http://127.0.0.1",
            "http://127.8.9.10:1/",
            "http://localhost:8787",
            "http://LOCALHOST",
            "http://[::1]:8787",
            "http://[::1]",
            "http://evil.example@127.0.0.1:8787",
        ] {
            assert_eq!(check_server_url(url), Ok(()), "{url}");
            assert!(Http::new(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn https_is_accepted_for_any_host() {
        for url in [
            "https://edgerunner.example.com",
            "https://10.0.0.1:8443/",
            "https://[2001:db8::1]",
            "https://localhost",
        ] {
            assert_eq!(check_server_url(url), Ok(()), "{url}");
        }
        assert_eq!(
            Http::new("https://edgerunner.example.com/")
                .expect("accepted")
                .base(),
            "https://edgerunner.example.com"
        );
    }

    #[test]
    fn error_answers_carry_the_servers_code_and_message() {
        let answer = Answer {
            status: 422,
            text: r#"{"error":{"code":"STREAM_GAP","message":"sequence 3 leaves a gap"}}"#.into(),
        };
        let error = check("POST /api/remote-runners/stream", answer).expect_err("an error");
        // A code this version does not know (a newer server's) is shown, never acted on.
        assert_eq!(error.code_text(), Some("STREAM_GAP"));
        assert_eq!(error.code(), None);
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
        assert_eq!(error.to_string(), "GET /x: 502: 502 Bad Gateway: <html>");
        // A body that is not ours says whose it is; an empty one leaves the status alone.
        let proxy = "Your worker restarted mid-request. Please try sending the request again.";
        let error = check(
            "POST /y",
            Answer {
                status: 503,
                text: format!("{proxy}{}", " x".repeat(300)),
            },
        )
        .expect_err("an error");
        let shown = error.to_string();
        assert!(shown.starts_with(&format!("POST /y: 503: 503 Service Unavailable: {proxy}")));
        assert_eq!(
            shown.chars().count(),
            "POST /y: 503: 503 Service Unavailable: ".len() + 200
        );
        let error = check(
            "GET /z",
            Answer {
                status: 504,
                text: " \n".into(),
            },
        )
        .expect_err("an error");
        assert_eq!(error.to_string(), "GET /z: 504: 504 Gateway Timeout");
    }
}
