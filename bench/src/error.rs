//! The load generator's one error type: why a run stopped, named by the step that failed.
//!
//! A run stops at its first error (scripts/bench then fails); the one exception is a reap
//! pass, whose failure scenario 4 records and reports (see `recovery`).

use std::fmt;

use edgerunner::http::ClientError;
use reqwest::StatusCode;

pub(crate) type Res<T> = Result<T, BenchError>;

#[derive(Debug)]
pub(crate) enum BenchError {
    /// The runner SDK (a runner's or the admin's client) failed, or the server refused it.
    /// Boxed: the SDK's error carries the server's answer, and every `Res` would carry its size.
    Client {
        what: String,
        source: Box<ClientError>,
    },
    /// A request the harness sends itself got no answer, or its answer could not be read.
    Http {
        what: String,
        source: reqwest::Error,
    },
    /// A request sent once that got no answer: shown with the transport's own account (a
    /// reset, a closed connection), which its short form leaves out.
    NoAnswer {
        what: String,
        source: reqwest::Error,
    },
    /// The server answered the harness's own request with an error status.
    Status {
        what: String,
        status: StatusCode,
        body: String,
    },
    /// An answer, or a probe's output, that is not the JSON expected (`text`: the answer, when
    /// it helps to see it).
    Json {
        what: String,
        source: serde_json::Error,
        text: Option<String>,
    },
    /// `wrangler d1 execute` ran and failed.
    Wrangler { stdout: String, stderr: String },
    /// A local file or process.
    Io {
        what: String,
        source: std::io::Error,
    },
    /// A value the SDK or the protocol refused before sending anything (an id, the job
    /// environment, the work directory).
    Invalid { what: String, detail: String },
    /// A task of the run panicked or was cancelled.
    Task {
        what: String,
        source: tokio::task::JoinError,
    },
    /// The server, or the run, did not do what the scenario needs (an empty queue, a job to
    /// claim, an accepted completion, an index search).
    Unexpected(String),
}

impl BenchError {
    pub(crate) fn client(what: &str) -> impl FnOnce(ClientError) -> Self + '_ {
        move |source| Self::Client {
            what: what.to_owned(),
            source: Box::new(source),
        }
    }

    pub(crate) fn http(what: &str) -> impl FnOnce(reqwest::Error) -> Self + '_ {
        move |source| Self::Http {
            what: what.to_owned(),
            source,
        }
    }

    pub(crate) fn json(what: &str) -> impl FnOnce(serde_json::Error) -> Self + '_ {
        move |source| Self::Json {
            what: what.to_owned(),
            source,
            text: None,
        }
    }

    pub(crate) fn io(what: &str) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Self::Io {
            what: what.to_owned(),
            source,
        }
    }

    pub(crate) fn invalid<E: fmt::Display>(what: &str) -> impl FnOnce(E) -> Self + '_ {
        move |error| Self::Invalid {
            what: what.to_owned(),
            detail: error.to_string(),
        }
    }

    pub(crate) fn task(what: &str) -> impl FnOnce(tokio::task::JoinError) -> Self + '_ {
        move |source| Self::Task {
            what: what.to_owned(),
            source,
        }
    }

    pub(crate) fn unexpected(what: impl Into<String>) -> Self {
        Self::Unexpected(what.into())
    }

    /// Whether `wrangler d1 execute` found the local database locked by the server
    /// (`SQLITE_BUSY`), which a later try may not.
    pub(crate) fn is_database_busy(&self) -> bool {
        match self {
            Self::Wrangler { stdout, stderr } => {
                stdout.contains("SQLITE_BUSY") || stderr.contains("SQLITE_BUSY")
            }
            _ => false,
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Client { what, source } => write!(f, "{what}: {source}"),
            Self::Http { what, source } => write!(f, "{what}: {source}"),
            Self::NoAnswer { what, source } => write!(f, "{what}: no answer: {source:?}"),
            Self::Status { what, status, body } => write!(f, "{what}: {status}: {body}"),
            Self::Json {
                what,
                source,
                text: None,
            } => write!(f, "{what}: {source}"),
            Self::Json {
                what,
                source,
                text: Some(text),
            } => write!(f, "{what}: {source}: {text}"),
            Self::Wrangler { stdout, stderr } => {
                write!(f, "wrangler d1 execute failed: {stdout}\n{stderr}")
            }
            Self::Io { what, source } => write!(f, "{what}: {source}"),
            Self::Invalid { what, detail } => write!(f, "{what}: {detail}"),
            Self::Task { what, source } => write!(f, "{what}: {source}"),
            Self::Unexpected(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Client { source, .. } => Some(source.as_ref()),
            Self::Http { source, .. } | Self::NoAnswer { source, .. } => Some(source),
            Self::Json { source, .. } => Some(source),
            Self::Io { source, .. } => Some(source),
            Self::Task { source, .. } => Some(source),
            Self::Status { .. }
            | Self::Wrangler { .. }
            | Self::Invalid { .. }
            | Self::Unexpected(_) => None,
        }
    }
}
