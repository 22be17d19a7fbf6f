//! The environment a suite runs in: the server's address and an HTTP client for it, its state
//! directory, the clock, names no other test uses, scratch directories and child processes with
//! a time limit.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use edgerunner_protocol::time::UnixMillis;
use sha2::{Digest as _, Sha256};

/// The server under test. Panics (failing the test, never skipping it) when unset, because a
/// suite that silently passes without a server proves nothing.
pub fn base_url() -> String {
    match std::env::var("BASE_URL") {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_owned(),
        _ => panic!("BASE_URL is not set: run the end-to-end suites through scripts/test"),
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        // Long enough for a 64 MiB custody bundle on a loaded 2-core machine; still a bound.
        .timeout(Duration::from_secs(120))
        .build()
        .expect("an HTTP client with only a timeout set always builds")
}

pub fn url(path: &str) -> String {
    format!("{}{}", base_url(), path)
}

/// An environment variable the suite cannot run without.
pub fn required_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!("{name} is not set: run the end-to-end suites through scripts/test"),
    }
}

/// The repository root (scripts, wrangler.toml and node_modules live there).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the e2e crate lives two levels under the repository root")
}

/// The local state directory the server under test persists to.
pub fn state_dir() -> String {
    required_env("EDGERUNNER_STATE_DIR")
}

/// Milliseconds since the Unix epoch, by this machine's clock (the server's too).
pub fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_millis()).expect("milliseconds since 1970 fit in i64")
}

/// 32 bytes from the operating system's random source.
pub fn random_bytes() -> [u8; 32] {
    use std::io::Read as _;
    let mut buf = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("read 32 bytes from /dev/urandom");
    buf
}

/// A name no other test (or earlier run on the same state) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tail = hex_lower(&random_bytes()[..4]);
    format!("{prefix}-{n}-{tail}")
}

/// A scratch directory of its own (`<temp>/edgerunner-e2e-<name>-…`), removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(unique(&format!("edgerunner-e2e-{name}")));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Self(dir)
    }

    /// The directory itself.
    pub fn root(&self) -> &std::path::Path {
        &self.0
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// A fresh directory inside, made now.
    pub fn dir(&self, name: &str) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).expect("directory");
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits for `child` (its stdout and stderr piped) to exit, at most `limit`, and returns its
/// output; past the limit it is killed and the test fails with its stderr.
pub async fn output_within(
    mut child: std::process::Child,
    limit: Duration,
    what: &str,
) -> std::process::Output {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("output");
            panic!(
                "{what} did not exit within {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lowercase hex SHA-256 of `bytes` (how the server stores secrets it must never keep).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_lower(&Sha256::digest(bytes))
}

/// Whether `text` is 64 lowercase hex digits.
pub fn is_hex64(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Parses an RFC 3339 timestamp the way the protocol reads them, to Unix milliseconds.
pub fn parse_time(text: &str) -> i64 {
    UnixMillis::parse_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text:?} is not an RFC 3339 timestamp: {e:?}"))
        .get()
}
