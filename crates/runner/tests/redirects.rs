//! The runner's HTTP client never follows a redirect: every request carries a credential (the
//! bootstrap token in the session body, a session or API key in `Authorization`), so a `3xx`
//! from the configured server must not hand it to the host its `Location` names. Each test
//! puts a stub on a loopback port that answers every request with a redirect to a second
//! loopback listener, and asserts that the client fails naming the `Location` while the second
//! listener never sees a connection.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgerunner::admin::AdminClient;
use edgerunner::client::RunnerClient;
use edgerunner::http::{ClientError, Http};
use edgerunner::session::{BootstrapToken, Credentials};
use edgerunner_protocol::envelope::RunnerId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const TOKEN: &str = "erb_redirect_secret_0123456789";
const API_KEY: &str = "erk_redirect_secret_0123456789";

/// The listener a redirect points at. It records each connection as it accepts it, then
/// answers `401` (so a client that followed fails fast instead of retrying): a client that had
/// followed the redirect is done only after that record was made.
struct Elsewhere {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Elsewhere {
    async fn bind() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut socket, from)) = listener.accept().await {
                record
                    .lock()
                    .expect("lock")
                    .push(format!("connection from {from}"));
                let record = Arc::clone(&record);
                tokio::spawn(async move {
                    let request = read_request(&mut socket).await;
                    record.lock().expect("lock").push(request);
                    let body = r#"{"error":{"code":"AUTHENTICATION_FAILED","message":"stolen"}}"#;
                    let answer = format!(
                        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        Self { url, seen }
    }

    fn assert_untouched(&self) {
        let seen = self.seen.lock().expect("lock").clone();
        assert!(seen.is_empty(), "the redirect was followed: {seen:?}");
    }
}

/// Bounds a call that, were the redirect followed to a silent host, could wait long.
const LIMIT: Duration = Duration::from_secs(60);

/// A stub answering every request with `status` and `Location: location`; returns its URL and
/// the requests it read (head and body, as text).
async fn redirecting(status: &'static str, location: String) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            let location = location.clone();
            tokio::spawn(async move {
                let request = read_request(&mut socket).await;
                record.lock().expect("lock").push(request);
                let answer = format!(
                    "HTTP/1.1 {status}\r\nlocation: {location}\r\ncontent-length: 0\r\n\
                     connection: close\r\n\r\n"
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, seen)
}

/// One request's head and its body (by `content-length`), at most 64 KiB.
async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    while bytes.len() < 64 * 1024 {
        let Ok(read) = socket.read(&mut buffer).await else {
            break;
        };
        if read == 0 {
            break;
        }
        bytes.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&bytes);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if bytes.len() >= end + 4 + length {
                break;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn bootstrap_client(url: &str) -> RunnerClient {
    RunnerClient::new(
        Http::new(url).expect("url"),
        Credentials::Bootstrap {
            runner_id: RunnerId::parse("run_redirected").expect("id"),
            token: BootstrapToken::new(TOKEN).expect("token"),
        },
    )
}

#[tokio::test]
async fn a_redirected_session_exchange_is_an_error_naming_the_location_and_is_not_followed() {
    for status in [
        "301 Moved Permanently",
        "302 Found",
        "303 See Other",
        "307 Temporary Redirect",
        "308 Permanent Redirect",
    ] {
        let elsewhere = Elsewhere::bind().await;
        let location = format!("{}/api/remote-runners/session", elsewhere.url);
        let (url, seen) = redirecting(status, location.clone()).await;
        let error = tokio::time::timeout(LIMIT, bootstrap_client(&url).whoami())
            .await
            .expect("answered in time")
            .expect_err("a redirect is an error");
        match &error {
            ClientError::Redirect {
                status: code,
                location: named,
                ..
            } => {
                assert_eq!(code.to_string(), status[..3], "{status}");
                assert_eq!(named, &location, "{status}");
            }
            other => panic!("{status}: not a redirect error: {other:?}"),
        }
        assert!(!error.is_transient(), "a redirect is not tried again");
        let shown = error.to_string();
        assert!(
            shown.contains(&location) && shown.contains("not followed"),
            "{shown}"
        );
        // The control: the configured server did get the request, token and all, once.
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen.len(), 1, "{status}: {seen:?}");
        assert!(
            seen[0].starts_with("POST /api/remote-runners/session") && seen[0].contains(TOKEN),
            "{seen:?}"
        );
        elsewhere.assert_untouched();
    }
}

#[tokio::test]
async fn the_admin_client_does_not_follow_a_redirect_with_its_api_key() {
    let elsewhere = Elsewhere::bind().await;
    let location = format!("{}/api/remote-runners", elsewhere.url);
    let (url, seen) = redirecting("307 Temporary Redirect", location.clone()).await;
    let admin = AdminClient::new(Http::new(&url).expect("url"), API_KEY).expect("client");
    let error = tokio::time::timeout(LIMIT, admin.list_runners())
        .await
        .expect("answered in time")
        .expect_err("a redirect is an error");
    assert!(
        matches!(&error, ClientError::Redirect { location: named, .. } if *named == location),
        "{error:?}"
    );
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains(API_KEY),
        "the control: the key went where configured"
    );
    elsewhere.assert_untouched();
}

#[tokio::test]
async fn runner_start_against_a_redirecting_server_exits_naming_the_location() {
    let elsewhere = Elsewhere::bind().await;
    let location = format!("{}/api/remote-runners/session", elsewhere.url);
    let (url, seen) = redirecting("307 Temporary Redirect", location.clone()).await;
    let dir = tempfile::tempdir().expect("scratch");
    let mut command = tokio::process::Command::from({
        let mut command = Command::new(env!("CARGO_BIN_EXE_edgerunner"));
        command
            .args(["runner", "start", "--log-format", "json", "--exec", "true"])
            .arg("--work-dir")
            .arg(dir.path().join("work"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("XDG_CONFIG_HOME", dir.path())
            .env("EVALGATE_BASE_URL", &url)
            .env("EVALGATE_RUNNER_ID", "run_redirected")
            .env("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", TOKEN)
            .stdin(Stdio::null());
        command
    });
    let output = tokio::time::timeout(LIMIT, command.kill_on_drop(true).output())
        .await
        .expect("edgerunner exits in time")
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&location) && stderr.contains("307"),
        "{stderr}"
    );
    assert!(!stderr.contains(TOKEN), "{stderr}");
    assert_eq!(seen.lock().expect("lock").len(), 1, "asked once, not again");
    elsewhere.assert_untouched();
}
