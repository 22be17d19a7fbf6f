//! The runner never follows a redirect. Its first request carries `{"runnerId",
//! "bootstrapToken"}`, every later one a credential in `Authorization`, and the admin commands
//! their API key: a `307` or `308` from the configured server (or from whatever answers in its
//! name) would have the client send the same body, token and all, to the host its `Location`
//! names. Each test points the real CLI at a stub on a loopback port that answers `307` to a
//! second loopback listener, and asserts that the CLI fails naming that `Location` while the
//! second listener never sees a connection; the control is the same CLI, same credentials,
//! against the real server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgerunner_e2e::*;

/// A loopback listener that records every request it reads, then answers with `answer`.
struct Stub {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Stub {
    fn start(answer: impl Fn() -> String + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let answer = Arc::new(answer);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                // Recorded on accept: a client that followed is done only after this.
                record.lock().expect("lock").push("a connection".to_owned());
                let record = Arc::clone(&record);
                let answer = Arc::clone(&answer);
                std::thread::spawn(move || serve(stream, &record, answer()));
            }
        });
        Self { url, seen }
    }

    /// Answers every request `307 Temporary Redirect` to `location`.
    fn redirecting_to(location: String) -> Self {
        Self::start(move || {
            format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\n\
                 connection: close\r\n\r\n"
            )
        })
    }

    /// Answers `401`, so a client that followed a redirect here fails at once.
    fn elsewhere() -> Self {
        Self::start(|| {
            let body = r#"{"error":{"code":"AUTHENTICATION_FAILED","message":"stolen"}}"#;
            format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
        })
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().expect("lock").clone()
    }
}

/// Reads one request (head and `content-length` body, at most 64 KiB), records it, answers.
fn serve(mut stream: TcpStream, record: &Mutex<Vec<String>>, answer: String) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut request = String::new();
    let mut length = 0usize;
    for _ in 0..200 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0).min(64 * 1024);
            }
        }
        request.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_ok() {
        request.push_str(&String::from_utf8_lossy(&body));
    }
    record.lock().expect("lock").push(request);
    let _ = stream.write_all(answer.as_bytes());
}

/// `edgerunner ARGS` with exactly `env` (and PATH, a private XDG_CONFIG_HOME), run to its end
/// (at most 60 s).
async fn edgerunner(dir: &PathBuf, args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = Command::new(required_env("EDGERUNNER_BIN"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("edgerunner starts");
    output_within(child, Duration::from_secs(60), "edgerunner").await
}

#[tokio::test]
async fn a_runner_redirected_by_its_server_exits_naming_the_location_and_keeps_its_token() {
    let org = bootstrap_org("attack-redirect-runner");
    let (runner_id, token) = register_simple_runner(&org, "redirected").await;
    let scratch = Scratch::new("redirect-runner");
    let dir = scratch.root().to_path_buf();
    let base = base_url();

    // The control: these credentials work against the real server.
    let output = edgerunner(
        &dir,
        &["runner", "whoami"],
        &[
            ("EVALGATE_BASE_URL", base.as_str()),
            ("EVALGATE_RUNNER_ID", runner_id.as_str()),
            ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token.as_str()),
        ],
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let elsewhere = Stub::elsewhere();
    let location = format!("{}/api/remote-runners/session", elsewhere.url);
    let redirecting = Stub::redirecting_to(location.clone());
    let output = edgerunner(
        &dir,
        &["runner", "start", "--log-format", "json", "--exec", "env"],
        &[
            ("EVALGATE_BASE_URL", redirecting.url.as_str()),
            ("EVALGATE_RUNNER_ID", runner_id.as_str()),
            ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token.as_str()),
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&location) && stderr.contains("307"),
        "the error names the Location: {stderr}"
    );
    assert!(!stderr.contains(&token), "{stderr}");
    // The configured address got the token (that is whom it was given to), once; the
    // redirect's target got nothing at all.
    let asked = redirecting.seen();
    assert!(
        asked.iter().any(
            |request| request.starts_with("POST /api/remote-runners/session")
                && request.contains(&token)
        ),
        "{asked:?}"
    );
    assert_eq!(
        elsewhere.seen(),
        Vec::<String>::new(),
        "the redirect was followed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_admin_command_redirected_by_its_server_keeps_its_api_key() {
    let org = bootstrap_org("attack-redirect-admin");
    let scratch = Scratch::new("redirect-admin");
    let dir = scratch.root().to_path_buf();
    let base = base_url();
    let admin = |server: String| {
        let dir = dir.clone();
        let key = org.admin_key.clone();
        async move {
            edgerunner(
                &dir,
                &["admin", "--server", &server, "runners", "list"],
                &[("EDGERUNNER_API_KEY", key.as_str())],
            )
            .await
        }
    };

    // The control: the key lists the organization's runners on the real server.
    let output = admin(base).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let elsewhere = Stub::elsewhere();
    let location = format!("{}/api/remote-runners", elsewhere.url);
    let redirecting = Stub::redirecting_to(location.clone());
    let output = admin(redirecting.url.clone()).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&location), "{stderr}");
    assert_eq!(
        redirecting.seen().len(),
        2,
        "one connection, one request, not repeated"
    );
    assert_eq!(
        elsewhere.seen(),
        Vec::<String>::new(),
        "the redirect was followed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
