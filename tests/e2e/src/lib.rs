//! Shared helpers for the end-to-end suites. They talk HTTP to a real local workerd
//! (`wrangler dev` with embedded D1 and Durable Objects), exactly as a runner or admin would.
//! `scripts/test` starts the server on fresh state and sets `BASE_URL`.
//!
//! Besides HTTP, a few helpers reach the server's state the way an operator would:
//! [`bootstrap_org`] runs `scripts/bootstrap-admin`, and [`d1`] runs `wrangler d1 execute`
//! against the same local state directory (`EDGERUNNER_STATE_DIR`), which lets a test move an
//! expiry into the past instead of sleeping. [`signing_secret`] reads the server's
//! `REMOTE_RUNNER_SIGNING_SECRET` from `EDGERUNNER_DEV_VARS`, so a test can mint a credential
//! the server must refuse for one reason only (its expiry).
//!
//! Every helper that needs its environment panics when it is missing: a suite that silently
//! passes without a server proves nothing.

pub mod contract;

use std::fmt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use edgerunner_protocol::credential::{self, CredentialClaims};
use edgerunner_protocol::envelope::MasterSigningSecret;
use edgerunner_protocol::keypair::RunnerSigningKey;
use edgerunner_protocol::time::UnixMillis;
use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------

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

fn hex_lower(bytes: &[u8]) -> String {
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

// ---------------------------------------------------------------------------------------------
// Operator tools: bootstrap-admin and wrangler d1
// ---------------------------------------------------------------------------------------------

/// An organization and its first admin API key.
#[derive(Clone, Debug)]
pub struct Org {
    pub id: String,
    pub admin_key: String,
}

/// `scripts/bootstrap-admin --org NAME --state $EDGERUNNER_STATE_DIR`.
pub fn bootstrap_org(name: &str) -> Org {
    bootstrap_org_in(&state_dir(), name)
}

/// `scripts/bootstrap-admin --org NAME --state STATE`, for a server persisting to `STATE`.
pub fn bootstrap_org_in(state: &str, name: &str) -> Org {
    let root = repo_root();
    let name = unique(name);
    let stdout = operator_tool("scripts/bootstrap-admin", || {
        let mut command = Command::new(root.join("scripts/bootstrap-admin"));
        command.args(["--org", &name, "--state", state]);
        command
    });
    let line = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_else(|| panic!("scripts/bootstrap-admin printed nothing"));
    let parsed: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("bootstrap-admin printed {line:?}, not JSON: {e}"));
    let field = |key: &str| {
        parsed[key]
            .as_str()
            .unwrap_or_else(|| panic!("bootstrap-admin output {parsed} has no {key}"))
            .to_owned()
    };
    Org {
        id: field("organizationId"),
        admin_key: field("apiKey"),
    }
}

/// Runs a tool that writes the local D1 file beside the running server, from the repository
/// root, and returns its stdout (panicking with its output when it fails).
///
/// Local D1 is one SQLite file: two writers at once make one of them fail with `SQLITE_BUSY`.
/// The tests of one binary take turns (a process-wide lock), and a write that still meets the
/// server's own transaction is retried a bounded number of times.
fn operator_tool(what: &str, make: impl Fn() -> Command) -> String {
    static TURN: Mutex<()> = Mutex::new(());
    const ATTEMPTS: u64 = 8;
    let root = repo_root();
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let output = make()
            .current_dir(&root)
            .env("WRANGLER_SEND_METRICS", "false")
            .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
            .env("XDG_CONFIG_HOME", root.join(".cache/config"))
            .env("XDG_CACHE_HOME", root.join(".cache"))
            .env("WRANGLER_LOG_PATH", root.join(".cache/wrangler-logs"))
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            return stdout;
        }
        last = format!(
            "{what} failed ({}): {stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        if !(last.contains("SQLITE_BUSY") || last.contains("database is locked")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200 * attempt));
    }
    panic!("{last}");
}

/// Runs one SQL text against the server's local D1 (`EDGERUNNER_STATE_DIR`) and returns
/// wrangler's `--json` answer (an array with one `{results, success, meta}` per statement).
/// Local D1 reports no row counts: write `UPDATE … RETURNING id` and count [`d1_rows`].
pub fn d1(sql: &str) -> Value {
    d1_in(&state_dir(), sql)
}

pub fn d1_in(state: &str, sql: &str) -> Value {
    let root = repo_root();
    let stdout = operator_tool("wrangler d1 execute", || {
        let mut command = Command::new(root.join("node_modules/.bin/wrangler"));
        command.args([
            "d1",
            "execute",
            "DB",
            "--local",
            "--persist-to",
            state,
            "--yes",
            "--json",
            "--command",
            sql,
        ]);
        command
    });
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("wrangler d1 execute {sql:?} printed non-JSON ({e}): {stdout}"))
}

/// The rows of the first statement of a [`d1`] answer.
pub fn d1_rows(answer: &Value) -> Vec<Value> {
    answer[0]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results in wrangler's answer {answer}"))
        .clone()
}

/// Quotes `text` as an SQL string literal.
pub fn sql_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `REMOTE_RUNNER_SIGNING_SECRET` from the `KEY=VALUE` file named by `EDGERUNNER_DEV_VARS`.
pub fn signing_secret() -> MasterSigningSecret {
    let path = required_env("EDGERUNNER_DEV_VARS");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read EDGERUNNER_DEV_VARS file {path}: {e}"));
    let value = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("REMOTE_RUNNER_SIGNING_SECRET="))
        .unwrap_or_else(|| panic!("{path} has no REMOTE_RUNNER_SIGNING_SECRET line"))
        .trim()
        .trim_matches('"')
        .to_owned();
    MasterSigningSecret::new(value)
        .unwrap_or_else(|e| panic!("the dev vars signing secret is unusable: {e:?}"))
}

/// The claims inside a runner credential `erc_<base64url(json)>.<mac>`, as JSON.
pub fn credential_payload(token: &str) -> Value {
    let payload = token
        .strip_prefix("erc_")
        .and_then(|rest| rest.split_once('.'))
        .map(|(payload, _)| payload)
        .unwrap_or_else(|| panic!("{token:?} is not shaped erc_<payload>.<mac>"));
    let bytes = URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap_or_else(|e| panic!("credential payload is not base64url: {e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("credential payload is not JSON: {e}"))
}

/// The [`CredentialClaims`] a server-issued credential carries.
pub fn credential_claims(token: &str) -> CredentialClaims {
    let body = credential_payload(token);
    let text = |key: &str| {
        body[key]
            .as_str()
            .unwrap_or_else(|| panic!("credential payload {body} has no string {key}"))
            .to_owned()
    };
    let int = |key: &str| {
        body[key]
            .as_i64()
            .unwrap_or_else(|| panic!("credential payload {body} has no integer {key}"))
    };
    CredentialClaims {
        id: text("jti"),
        runner_id: text("rid"),
        organization_id: text("org"),
        generation: body["gen"]
            .as_u64()
            .unwrap_or_else(|| panic!("credential payload {body} has no generation")),
        issued_at_ms: int("iat"),
        expires_at_ms: int("exp"),
    }
}

/// A credential signed with the server's own secret.
pub fn mint_credential(claims: &CredentialClaims) -> String {
    credential::issue(&signing_secret(), claims)
        .unwrap_or_else(|e| panic!("credential::issue refused {claims:?}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Admin API
// ---------------------------------------------------------------------------------------------

/// The smallest valid capability document: the two fields that have no default.
pub fn minimal_capabilities() -> Value {
    json!({ "executionKinds": ["prompt"], "runtimes": ["python3.12"] })
}

/// A registration body with a fresh `runnerKey` and the minimal capabilities.
pub fn registration(name: &str) -> Value {
    json!({
        "name": name,
        "runnerKey": unique(name),
        "capabilities": minimal_capabilities(),
    })
}

/// `POST /api/remote-runners` expecting `201`: the runner record and its bootstrap token.
pub async fn register_runner(admin_key: &str, body: &Value) -> (Value, String) {
    let reply = post("/api/remote-runners", Some(admin_key), body).await;
    let answer = reply.expect(201);
    let token = answer["bootstrapToken"]
        .as_str()
        .unwrap_or_else(|| panic!("no bootstrapToken: {reply:?}"))
        .to_owned();
    assert!(
        answer["runner"]["id"].is_string(),
        "no runner.id: {reply:?}"
    );
    (answer["runner"].clone(), token)
}

/// Registers a runner with minimal capabilities; returns its id and bootstrap token.
pub async fn register_simple_runner(org: &Org, name: &str) -> (String, String) {
    let (runner, token) = register_runner(&org.admin_key, &registration(name)).await;
    (id_of(&runner), token)
}

/// The `id` of a JSON record.
pub fn id_of(record: &Value) -> String {
    record["id"]
        .as_str()
        .unwrap_or_else(|| panic!("record without a string id: {record}"))
        .to_owned()
}

pub async fn get_runner(bearer: &str, runner_id: &str) -> Reply {
    get(&format!("/api/remote-runners/{runner_id}"), bearer).await
}

/// `GET /api/remote-runners/{id}` expecting `200`.
pub async fn runner_record(bearer: &str, runner_id: &str) -> Value {
    get_runner(bearer, runner_id).await.expect(200)
}

pub async fn list_runners(bearer: &str) -> Reply {
    get("/api/remote-runners", bearer).await
}

pub async fn patch_runner(bearer: &str, runner_id: &str, body: &Value) -> Reply {
    patch(&format!("/api/remote-runners/{runner_id}"), bearer, body).await
}

/// `PATCH` a runner's status with a reason, expecting success (`200`).
pub async fn set_status(bearer: &str, runner_id: &str, status: &str, reason: &str) {
    let reply = patch_runner(
        bearer,
        runner_id,
        &json!({ "status": status, "reason": reason }),
    )
    .await;
    assert_eq!(reply.status, 200, "PATCH status {status}: {reply:?}");
}

/// Approves a pending key-pair runner, naming the fingerprint the admin compared.
pub async fn approve(bearer: &str, runner_id: &str, fingerprint: &str, reason: &str) {
    let reply = patch_runner(
        bearer,
        runner_id,
        &json!({ "status": "active", "reason": reason, "fingerprint": fingerprint }),
    )
    .await;
    assert_eq!(reply.status, 200, "approve: {reply:?}");
}

pub async fn rotate(bearer: &str, runner_id: &str) -> Reply {
    post(
        &format!("/api/remote-runners/{runner_id}/rotate"),
        Some(bearer),
        &json!({}),
    )
    .await
}

pub async fn runner_events(bearer: &str, runner_id: &str) -> Reply {
    get(&format!("/api/remote-runners/{runner_id}/events"), bearer).await
}

pub async fn create_api_key(admin_key: &str, body: &Value) -> Reply {
    post("/api/developer/api-keys", Some(admin_key), body).await
}

/// Creates an API key expecting `201`; returns the whole answer (with `apiKey`).
pub async fn new_api_key(admin_key: &str, body: &Value) -> Value {
    create_api_key(admin_key, body).await.expect(201)
}

// ---------------------------------------------------------------------------------------------
// Runner API
// ---------------------------------------------------------------------------------------------

/// `POST /api/remote-runners/session` with a bootstrap token.
pub async fn session(runner_id: &str, bootstrap_token: &str) -> Reply {
    post(
        "/api/remote-runners/session",
        None,
        &json!({ "runnerId": runner_id, "bootstrapToken": bootstrap_token }),
    )
    .await
}

/// Exchanges a bootstrap token expecting `200`; returns the credential (`token`).
pub async fn exchange(runner_id: &str, bootstrap_token: &str) -> String {
    let reply = session(runner_id, bootstrap_token).await;
    credential_of(&reply)
}

/// The `token` of a successful session answer.
pub fn credential_of(reply: &Reply) -> String {
    let answer = reply.expect(200);
    answer["token"]
        .as_str()
        .unwrap_or_else(|| panic!("session answer without token: {reply:?}"))
        .to_owned()
}

/// `GET /api/remote-runners/self` with a runner credential.
pub async fn runner_self(credential: &str) -> Reply {
    get("/api/remote-runners/self", credential).await
}

/// A self-registering runner: an ed25519 key pair generated for the test.
pub struct KeyPairRunner {
    key: RunnerSigningKey,
}

impl Default for KeyPairRunner {
    fn default() -> Self {
        Self::generate()
    }
}

impl KeyPairRunner {
    pub fn generate() -> Self {
        Self {
            key: RunnerSigningKey::from_random_bytes(random_bytes()),
        }
    }

    /// Standard padded base64 of the 32 raw public key bytes.
    pub fn public_key(&self) -> String {
        self.key.public_key().to_base64()
    }

    /// `SHA256:` + unpadded base64 of SHA-256 of the raw key, computed here from the spec
    /// (not by the protocol crate), and checked against the crate's.
    pub fn fingerprint(&self) -> String {
        let raw = self.key.public_key();
        let ours = format!(
            "SHA256:{}",
            STANDARD_NO_PAD.encode(Sha256::digest(raw.as_bytes()))
        );
        assert_eq!(ours, raw.fingerprint().as_str());
        ours
    }

    /// Signs `"edgerunner-challenge-v1\n" + fingerprint + "\n" + challenge` as API.md states
    /// it; standard base64 of the 64-byte signature.
    pub fn sign(&self, challenge: &str) -> String {
        self.sign_for(&self.fingerprint(), challenge)
    }

    /// Signs a challenge message naming `fingerprint` (which need not be this key's).
    pub fn sign_for(&self, fingerprint: &str, challenge: &str) -> String {
        let signing = SigningKey::from_bytes(&self.key.to_seed());
        let message = format!("edgerunner-challenge-v1\n{fingerprint}\n{challenge}");
        STANDARD.encode(signing.sign(message.as_bytes()).to_bytes())
    }

    /// Signs `"edgerunner-enroll-v1\n" + organizationId + "\n" + fingerprint` as API.md
    /// states it: the enrollment's proof that this key's holder is enrolling it.
    pub fn sign_enrollment(&self, organization_id: &str) -> String {
        let signing = SigningKey::from_bytes(&self.key.to_seed());
        let message = format!(
            "edgerunner-enroll-v1\n{organization_id}\n{}",
            self.fingerprint()
        );
        STANDARD.encode(signing.sign(message.as_bytes()).to_bytes())
    }

    /// A complete, signed enrollment body for `organization_id`.
    pub fn enrollment(&self, organization_id: &str) -> Value {
        json!({
            "organizationId": organization_id,
            "publicKey": self.public_key(),
            "signature": self.sign_enrollment(organization_id),
            "name": unique("keypair-runner"),
            "product": "edgerunner-e2e",
            "version": "0.1.0",
            "problemTypes": ["e2e/identity"],
            "external": false,
            "capabilities": {
                "executionKinds": ["prompt", "scorer"],
                "runtimes": ["python3.12"],
                "problemTypes": ["e2e/identity"],
                "external": false,
            },
            "machine": { "cpus": 4, "os": "linux" },
        })
    }

    /// `POST /api/remote-runners/enroll`, seen as coming from `address` (`CF-Connecting-IP`).
    pub async fn enroll_from(&self, address: &str, body: &Value) -> Reply {
        let request = client()
            .post(url("/api/remote-runners/enroll"))
            .header("CF-Connecting-IP", address)
            .json(body);
        send("POST /api/remote-runners/enroll".to_owned(), request).await
    }

    /// Enrolls with [`Self::enrollment`] expecting `201`; returns the runner id.
    pub async fn enroll(&self, org: &Org) -> String {
        let reply = self
            .enroll_from(&fresh_address(), &self.enrollment(&org.id))
            .await;
        id_of(&reply.expect(201)["runner"])
    }

    /// Enrolls and has the org's admin approve it; returns the runner id.
    pub async fn enroll_approved(&self, org: &Org) -> String {
        let id = self.enroll(org).await;
        approve(
            &org.admin_key,
            &id,
            &self.fingerprint(),
            "fingerprint checked by e2e",
        )
        .await;
        id
    }

    /// `POST /api/remote-runners/challenge` for this key's fingerprint.
    pub async fn challenge(&self) -> Reply {
        post(
            "/api/remote-runners/challenge",
            None,
            &json!({ "fingerprint": self.fingerprint() }),
        )
        .await
    }

    /// A challenge, expecting `200`.
    pub async fn fresh_challenge(&self) -> String {
        let reply = self.challenge().await;
        reply.expect(200)["challenge"]
            .as_str()
            .unwrap_or_else(|| panic!("challenge answer without challenge: {reply:?}"))
            .to_owned()
    }

    /// `POST /api/remote-runners/session` with this fingerprint and the given answer.
    pub async fn session_with(&self, challenge: &str, signature: &str) -> Reply {
        post(
            "/api/remote-runners/session",
            None,
            &json!({
                "fingerprint": self.fingerprint(),
                "challenge": challenge,
                "signature": signature,
            }),
        )
        .await
    }

    /// Challenge, sign, session: the whole key-pair exchange.
    pub async fn signed_session(&self) -> Reply {
        let challenge = self.fresh_challenge().await;
        self.session_with(&challenge, &self.sign(&challenge)).await
    }
}

// ---------------------------------------------------------------------------------------------
// Jobs: release registry, evidence, enqueue, and a runner that claims, streams and completes
// ---------------------------------------------------------------------------------------------

/// Helpers for the jobs suites (`tests/jobs.rs`): a release to run, evidence rows to attach,
/// enqueue/inspect/cancel with an API key, and [`jobs::Runner`], a registered runner holding a
/// session that claims (verifying every assignment as the SDK does), heartbeats, streams and
/// completes. Kept in one module so that its names cannot collide with other helpers here.
pub mod jobs {
    use std::collections::HashSet;
    use std::time::{SystemTime, UNIX_EPOCH};

    use edgerunner_protocol::chunk::{ChunkIdentity, ChunkWriter};
    use edgerunner_protocol::completion::{Completion, CompletionFields, Evidence, EvidenceId};
    use edgerunner_protocol::envelope::{
        verify_assignment, AssignmentError, ClaimId, DispatchAttempt, JobId, JobSigning, Nonce,
        OrganizationId, RunnerId, ServedTarget, SessionBinding, VerifiedAssignment,
    };
    use edgerunner_protocol::stable_json::{self, Sha256Hex};
    use edgerunner_protocol::state::CompletionStatus;
    use edgerunner_protocol::time::{Timestamp, UnixMillis};
    use serde_json::{json, Map, Value};

    use super::{get, now_ms, post, unique, Org, Reply};

    /// The runtime every fixture runner declares and every fixture job requires.
    pub const RUNTIME: &str = "python3.12";

    /// A JSON value parsed from text, so that number lexemes (`1e-07`, `1.50`) are kept as
    /// written (`json!` would route them through `f64`).
    pub fn lexical(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"))
    }

    /// `H(value)` as text.
    pub fn h(value: &Value) -> String {
        stable_json::hash(value).as_str().to_owned()
    }

    fn text<'a>(value: &'a Value, key: &str) -> &'a str {
        value[key]
            .as_str()
            .unwrap_or_else(|| panic!("no string {key:?} in {value}"))
    }

    /// A created record: `201` (or `200`) with a JSON body.
    fn created(reply: &Reply) -> Value {
        assert!(
            reply.status == 201 || reply.status == 200,
            "expected a created record: {reply:?}"
        );
        reply.json()
    }

    // -----------------------------------------------------------------------------------------
    // Release registry
    // -----------------------------------------------------------------------------------------

    /// One immutable release version (and the artifact it belongs to).
    #[derive(Clone, Debug)]
    pub struct Release {
        pub kind: String,
        pub artifact_id: String,
        pub version_id: u64,
        pub content_hash: String,
        pub content: Value,
    }

    impl Release {
        /// `{"versionId", "contentHash"}`, a claim's served target for this version.
        pub fn served_target(&self) -> Value {
            json!({ "versionId": self.version_id, "contentHash": self.content_hash })
        }

        /// The job `subject` for this version in `environment`.
        pub fn subject(&self, environment: &str) -> Value {
            json!({
                "kind": self.kind,
                "artifactId": self.artifact_id,
                "versionId": self.version_id,
                "environment": environment,
            })
        }
    }

    /// `POST /api/releases/artifacts` `{kind, name}`.
    pub async fn create_artifact(bearer: &str, kind: &str, name: &str) -> Reply {
        post(
            "/api/releases/artifacts",
            Some(bearer),
            &json!({ "kind": kind, "name": name }),
        )
        .await
    }

    /// `POST /api/releases/artifacts/{id}/versions` `{content}`.
    pub async fn create_version(bearer: &str, artifact_id: &str, content: &Value) -> Reply {
        post(
            &format!("/api/releases/artifacts/{artifact_id}/versions"),
            Some(bearer),
            &json!({ "content": content }),
        )
        .await
    }

    /// `POST /api/releases/versions/{id}/promote` `{environment}`.
    pub async fn promote(bearer: &str, version_id: u64, environment: &str) -> Reply {
        post(
            &format!("/api/releases/versions/{version_id}/promote"),
            Some(bearer),
            &json!({ "environment": environment }),
        )
        .await
    }

    /// A new version of `artifact_id` with `content`, promoted to each of `environments`.
    /// Checks that the version id is an integer and `contentHash = H(content)`.
    pub async fn add_version(
        bearer: &str,
        kind: &str,
        artifact_id: &str,
        content: Value,
        environments: &[&str],
    ) -> Release {
        let reply = create_version(bearer, artifact_id, &content).await;
        let version = created(&reply);
        let version_id = version["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("version id is not an integer: {reply:?}"));
        assert_eq!(
            text(&version, "contentHash"),
            h(&content),
            "contentHash is not H(content): {reply:?}"
        );
        for environment in environments {
            let reply = promote(bearer, version_id, environment).await;
            assert!(
                reply.status == 200 || reply.status == 201,
                "promote to {environment}: {reply:?}"
            );
        }
        Release {
            kind: kind.to_owned(),
            artifact_id: artifact_id.to_owned(),
            version_id,
            content_hash: h(&content),
            content,
        }
    }

    /// A new artifact of `kind` with one version of `content`, promoted to `environments`.
    pub async fn release(
        bearer: &str,
        kind: &str,
        content: Value,
        environments: &[&str],
    ) -> Release {
        let reply = create_artifact(bearer, kind, &unique("e2e-artifact")).await;
        let artifact_id = text(&created(&reply), "id").to_owned();
        add_version(bearer, kind, &artifact_id, content, environments).await
    }

    /// The content of the fixture's prompt release (a float and non-ASCII text on purpose).
    pub fn prompt_content() -> Value {
        lexical(
            r#"{"template": "Réponds à {{question}} ✨", "model": "e2e-model", "temperature": 0.25, "maxTokens": 256}"#,
        )
    }

    // -----------------------------------------------------------------------------------------
    // Jobs (API key)
    // -----------------------------------------------------------------------------------------

    /// `{cpuSeconds, memoryMb, wallSeconds, outputBytes}`.
    pub fn limits(cpu_seconds: u64, memory_mb: u64, wall_seconds: u64, output_bytes: u64) -> Value {
        json!({
            "cpuSeconds": cpu_seconds,
            "memoryMb": memory_mb,
            "wallSeconds": wall_seconds,
            "outputBytes": output_bytes,
        })
    }

    /// Requirements every fixture runner (see [`capabilities`]) satisfies.
    pub fn requirements(kind: &str) -> Value {
        json!({
            "executionKind": kind,
            "runtime": RUNTIME,
            "limits": limits(60, 512, 120, 1_048_576),
            "network": { "mode": "deny_all" },
            "streaming": true,
            "cancellation": true,
        })
    }

    /// The capability document of a fixture runner for `kinds` (defaults for everything else).
    pub fn capabilities(kinds: &[&str]) -> Value {
        json!({ "executionKinds": kinds, "runtimes": [RUNTIME] })
    }

    /// An enqueue body.
    pub fn enqueue_body(
        idempotency_key: &str,
        release: &Release,
        environment: &str,
        input: &Value,
        requirements: &Value,
    ) -> Value {
        json!({
            "idempotencyKey": idempotency_key,
            "subject": release.subject(environment),
            "input": input,
            "requirements": requirements,
        })
    }

    /// `POST /api/remote-runners/jobs`.
    pub async fn enqueue(bearer: &str, body: &Value) -> Reply {
        post("/api/remote-runners/jobs", Some(bearer), body).await
    }

    /// Enqueues `input` for `release` in `staging` with `requirements`, expecting `201`.
    pub async fn enqueue_job(
        bearer: &str,
        release: &Release,
        input: &Value,
        requirements: &Value,
    ) -> Value {
        let body = enqueue_body(&unique("e2e-job"), release, "staging", input, requirements);
        let reply = enqueue(bearer, &body).await;
        reply.expect(201)
    }

    /// `GET /api/remote-runners/jobs/{id}`.
    pub async fn get_job(bearer: &str, job_id: &str) -> Reply {
        get(&format!("/api/remote-runners/jobs/{job_id}"), bearer).await
    }

    /// The job with its timeline, expecting `200`.
    pub async fn job(bearer: &str, job_id: &str) -> Value {
        get_job(bearer, job_id).await.expect(200)
    }

    /// `POST /api/remote-runners/jobs/{id}/cancel` `{reason}`.
    pub async fn cancel_job(bearer: &str, job_id: &str, reason: &str) -> Reply {
        post(
            &format!("/api/remote-runners/jobs/{job_id}/cancel"),
            Some(bearer),
            &json!({ "reason": reason }),
        )
        .await
    }

    // -----------------------------------------------------------------------------------------
    // Evidence (API key)
    // -----------------------------------------------------------------------------------------

    /// An evidence id as the server returned it (integer or text).
    pub fn evidence_id(record: &Value) -> EvidenceId {
        match &record["id"] {
            Value::String(id) => EvidenceId::Text(id.clone()),
            Value::Number(n) => EvidenceId::Integer(
                n.as_u64()
                    .unwrap_or_else(|| panic!("evidence id is not a whole number: {record}")),
            ),
            _ => panic!("evidence record without an id: {record}"),
        }
    }

    /// `POST /api/evidence/runs`.
    pub async fn evaluation_run(bearer: &str) -> EvidenceId {
        let reply = post(
            "/api/evidence/runs",
            Some(bearer),
            &json!({ "evaluationId": unique("e2e-eval"), "metadata": { "suite": "jobs" } }),
        )
        .await;
        evidence_id(&created(&reply))
    }

    async fn run_row(bearer: &str, run: &EvidenceId, path: &str, body: Value) -> EvidenceId {
        let reply = post(
            &format!("/api/evidence/runs/{}/{path}", run.key()),
            Some(bearer),
            &body,
        )
        .await;
        evidence_id(&created(&reply))
    }

    /// `POST /api/evidence/runs/{id}/test-results`.
    pub async fn test_result(bearer: &str, run: &EvidenceId) -> EvidenceId {
        let body = json!({ "name": unique("case"), "status": "passed", "score": 1 });
        run_row(bearer, run, "test-results", body).await
    }

    /// `POST /api/evidence/runs/{id}/cost-records`.
    pub async fn cost_record(bearer: &str, run: &EvidenceId) -> EvidenceId {
        let body = json!({ "category": "model", "amountMicros": 1250, "currency": "USD" });
        run_row(bearer, run, "cost-records", body).await
    }

    /// `POST /api/evidence/runs/{id}/model-calls`.
    pub async fn model_call(bearer: &str, run: &EvidenceId) -> EvidenceId {
        let body = json!({
            "provider": "e2e", "model": "e2e-model", "status": "succeeded",
            "inputTokens": 12, "outputTokens": 34, "latencyMs": 56,
        });
        run_row(bearer, run, "model-calls", body).await
    }

    /// `POST /api/evidence/runs/{id}/traces`.
    pub async fn trace(bearer: &str, run: &EvidenceId) -> EvidenceId {
        let body = json!({ "name": "e2e-trace", "spans": [{ "name": "root", "durationMs": 5 }] });
        run_row(bearer, run, "traces", body).await
    }

    /// A run with one row of every kind, as a completion's evidence.
    pub async fn full_evidence(bearer: &str) -> Evidence {
        let run = evaluation_run(bearer).await;
        Evidence {
            test_result_ids: vec![test_result(bearer, &run).await],
            cost_record_ids: vec![cost_record(bearer, &run).await],
            model_call_ids: vec![model_call(bearer, &run).await],
            trace_id: Some(trace(bearer, &run).await),
            evaluation_run_id: run,
            extra: Map::new(),
        }
    }

    /// A run with nothing in it: the least evidence a completion can name.
    pub async fn bare_evidence(bearer: &str) -> Evidence {
        Evidence {
            evaluation_run_id: evaluation_run(bearer).await,
            test_result_ids: Vec::new(),
            cost_record_ids: Vec::new(),
            model_call_ids: Vec::new(),
            trace_id: None,
            extra: Map::new(),
        }
    }

    /// `(kind, id)` for every row of `evidence`, with the kinds of the custody table.
    pub fn evidence_rows(evidence: &Evidence) -> Vec<(String, String)> {
        let mut rows = vec![(
            "evaluation_run".to_owned(),
            evidence.evaluation_run_id.key(),
        )];
        let lists = [
            ("test_result", &evidence.test_result_ids),
            ("cost_record", &evidence.cost_record_ids),
            ("model_call", &evidence.model_call_ids),
        ];
        for (kind, ids) in lists {
            rows.extend(ids.iter().map(|id| (kind.to_owned(), id.key())));
        }
        if let Some(id) = &evidence.trace_id {
            rows.push(("trace".to_owned(), id.key()));
        }
        rows
    }

    // -----------------------------------------------------------------------------------------
    // Time
    // -----------------------------------------------------------------------------------------

    /// Now, as the SDK writes `emittedAt` and `completedAt`: UTC with microseconds and `Z`.
    pub fn timestamp_now() -> Timestamp {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the clock is after 1970")
            .as_micros();
        let millis = i64::try_from(micros / 1000).expect("milliseconds fit in i64");
        let rendered = UnixMillis::new(millis)
            .expect("now is a representable instant")
            .to_rfc3339();
        let text = format!("{}{:03}Z", rendered.trim_end_matches('Z'), micros % 1000);
        Timestamp::parse(&text).unwrap_or_else(|e| panic!("{text:?} does not parse: {e:?}"))
    }

    // -----------------------------------------------------------------------------------------
    // A runner
    // -----------------------------------------------------------------------------------------

    /// A registered runner with a live session.
    pub struct Runner {
        pub id: String,
        pub organization_id: String,
        pub bootstrap_token: String,
        /// The runner credential (`erc_…`).
        pub token: String,
        pub signing: JobSigning,
        /// The whole session answer.
        pub session: Value,
        nonces: HashSet<Nonce>,
    }

    impl Runner {
        /// Registers a runner with `capabilities` and `maxConcurrentJobs`, and exchanges its
        /// bootstrap token.
        pub async fn register(org: &Org, capabilities: Value, max_concurrent_jobs: u32) -> Self {
            let body = json!({
                "name": unique("jobs-runner"),
                "runnerKey": unique("jobs-runner"),
                "capabilities": capabilities,
                "maxConcurrentJobs": max_concurrent_jobs,
            });
            let (runner, token) = super::register_runner(&org.admin_key, &body).await;
            Self::connect(&super::id_of(&runner), &token).await
        }

        /// A fixture runner for `kinds`.
        pub async fn simple(org: &Org, kinds: &[&str], max_concurrent_jobs: u32) -> Self {
            Self::register(org, capabilities(kinds), max_concurrent_jobs).await
        }

        /// Exchanges `bootstrap_token` for a session of runner `id`.
        pub async fn connect(id: &str, bootstrap_token: &str) -> Self {
            let reply = super::session(id, bootstrap_token).await;
            let session = reply.expect(200);
            let signing = JobSigning::from_json(&session["jobSigning"])
                .unwrap_or_else(|e| panic!("unusable jobSigning ({e}): {reply:?}"));
            Self {
                id: id.to_owned(),
                organization_id: text(&session["claims"], "organizationId").to_owned(),
                bootstrap_token: bootstrap_token.to_owned(),
                token: text(&session, "token").to_owned(),
                signing,
                session,
                nonces: HashSet::new(),
            }
        }

        /// What [`verify_assignment`] checks an assignment against.
        pub fn binding(&self, served_targets: &[Value]) -> SessionBinding {
            SessionBinding {
                organization_id: OrganizationId::parse(&self.organization_id)
                    .expect("the session's organization id is an identifier"),
                signing: self.signing.clone(),
                served_targets: served_targets
                    .iter()
                    .map(|target| {
                        ServedTarget::from_json(target)
                            .unwrap_or_else(|e| panic!("bad served target {target}: {e}"))
                    })
                    .collect(),
            }
        }

        /// `POST /api/remote-runners/claim` with `body`.
        pub async fn claim_with(&self, body: &Value) -> Reply {
            post("/api/remote-runners/claim", Some(&self.token), body).await
        }

        /// `POST /api/remote-runners/claim` `{}`.
        pub async fn claim(&self) -> Reply {
            self.claim_with(&json!({})).await
        }

        /// Verifies a `200` claim answer as the SDK would (served targets as declared).
        pub fn verify(
            &mut self,
            reply: &Reply,
            served_targets: &[Value],
        ) -> Result<Claimed, AssignmentError> {
            let assignment = reply.expect(200);
            let binding = self.binding(served_targets);
            let verified = verify_assignment(
                &assignment,
                &binding,
                UnixMillis::new(now_ms()).expect("now is representable"),
                &mut self.nonces,
            )?;
            Ok(Claimed {
                assignment,
                verified,
            })
        }

        /// Claims (`{}`), expecting `200`, and verifies the assignment.
        pub async fn claim_job(&mut self) -> Claimed {
            let reply = self.claim().await;
            self.verify(&reply, &[])
                .unwrap_or_else(|e| panic!("assignment refused by verification ({e}): {reply:?}"))
        }

        /// `POST /api/remote-runners/heartbeat`.
        pub async fn heartbeat(&self, claim_id: &str, extend_seconds: i64) -> Reply {
            post(
                "/api/remote-runners/heartbeat",
                Some(&self.token),
                &json!({ "claimId": claim_id, "extendSeconds": extend_seconds }),
            )
            .await
        }

        /// `POST /api/remote-runners/stream`.
        pub async fn stream(&self, chunk: &Value) -> Reply {
            post("/api/remote-runners/stream", Some(&self.token), chunk).await
        }

        /// `POST /api/remote-runners/complete`.
        pub async fn complete(&self, completion: &Value) -> Reply {
            post(
                "/api/remote-runners/complete",
                Some(&self.token),
                completion,
            )
            .await
        }

        /// `GET /api/remote-runners/jobs/{id}/input`.
        pub async fn input(&self, job_id: &str) -> Reply {
            get(
                &format!("/api/remote-runners/jobs/{job_id}/input"),
                &self.token,
            )
            .await
        }

        /// `GET /api/remote-runners/jobs/{id}/artifact`.
        pub async fn artifact(&self, job_id: &str) -> Reply {
            get(
                &format!("/api/remote-runners/jobs/{job_id}/artifact"),
                &self.token,
            )
            .await
        }
    }

    /// A verified assignment.
    #[derive(Clone, Debug)]
    pub struct Claimed {
        /// The claim answer as received.
        pub assignment: Value,
        pub verified: VerifiedAssignment,
    }

    impl Claimed {
        pub fn job_id(&self) -> String {
            self.verified.envelope().job_id.as_str().to_owned()
        }

        pub fn claim_id(&self) -> String {
            self.verified.claim_id().as_str().to_owned()
        }

        pub fn attempt(&self) -> DispatchAttempt {
            self.verified.envelope().dispatch_attempt
        }

        /// The claim identity its chunks carry.
        pub fn identity(&self) -> ChunkIdentity {
            let envelope = self.verified.envelope();
            ChunkIdentity {
                job_id: envelope.job_id.clone(),
                claim_id: envelope.claim_id.clone(),
                dispatch_attempt: envelope.dispatch_attempt,
            }
        }

        /// A fresh chain for this claim.
        pub fn writer(&self) -> ChunkWriter {
            ChunkWriter::new(self.identity())
        }

        /// The completion fields a well-behaved runner sends (the envelope's input hash, now).
        pub fn fields(
            &self,
            status: CompletionStatus,
            result_hash: Option<Sha256Hex>,
            final_stream_checksum: Option<Sha256Hex>,
            evidence: Evidence,
        ) -> CompletionFields {
            let envelope = self.verified.envelope();
            CompletionFields {
                job_id: envelope.job_id.clone(),
                claim_id: envelope.claim_id.clone(),
                runner_id: envelope.runner_id.clone(),
                organization_id: envelope.organization_id.clone(),
                dispatch_attempt: envelope.dispatch_attempt,
                status,
                input_hash: envelope.input_hash.clone(),
                result_hash,
                final_stream_checksum,
                evidence,
                completed_at: timestamp_now(),
                extra: Map::new(),
            }
        }

        /// A sealed `succeeded` completion closing `final_stream_checksum`.
        pub fn succeeded(
            &self,
            final_stream_checksum: Option<&Sha256Hex>,
            evidence: Evidence,
        ) -> Value {
            let result = json!({ "jobId": self.job_id(), "answer": "ok" });
            Completion::seal(self.fields(
                CompletionStatus::Succeeded,
                Some(stable_json::hash(&result)),
                final_stream_checksum.cloned(),
                evidence,
            ))
            .to_json()
        }
    }

    /// Typed ids for building chunks and completions by hand.
    pub fn job_id(text: &str) -> JobId {
        JobId::parse(text).expect("job id")
    }

    pub fn claim_id(text: &str) -> ClaimId {
        ClaimId::parse(text).expect("claim id")
    }

    pub fn runner_id(text: &str) -> RunnerId {
        RunnerId::parse(text).expect("runner id")
    }
}

// ---------------------------------------------------------------------------------------------
// Recovery: the cron trigger, the reap endpoint, and leases moved into the past
// ---------------------------------------------------------------------------------------------

/// Helpers for the recovery suite (`tests/recovery.rs`): fire the cron trigger the way
/// `wrangler dev --test-scheduled` allows, call `POST /api/remote-runners/jobs/reap`, read
/// `CRON_SECRET`, and move a lease into the past through D1 (so that a test need not wait for
/// it to lapse).
pub mod recovery {
    use serde_json::{json, Value};

    use super::{base_url, client, d1, post, required_env, send, sql_text, Reply};

    /// `CRON_SECRET` from the `KEY=VALUE` file named by `EDGERUNNER_DEV_VARS`.
    pub fn cron_secret() -> String {
        let path = required_env("EDGERUNNER_DEV_VARS");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read EDGERUNNER_DEV_VARS file {path}: {e}"));
        let value = text
            .lines()
            .find_map(|line| line.trim().strip_prefix("CRON_SECRET="))
            .unwrap_or_else(|| panic!("{path} has no CRON_SECRET line"))
            .trim()
            .trim_matches('"')
            .to_owned();
        assert!(!value.is_empty(), "{path} has an empty CRON_SECRET");
        value
    }

    /// `GET /__scheduled?cron=*+*+*+*+*`: runs the cron trigger (one recovery pass over every
    /// organization) and answers once the pass has run. Expects `200`.
    pub async fn fire_cron() -> Reply {
        let request = client().get(format!("{}/__scheduled?cron=*+*+*+*+*", base_url()));
        let reply = send("GET /__scheduled".to_owned(), request).await;
        assert_eq!(reply.status, 200, "the cron trigger did not run: {reply:?}");
        reply
    }

    /// `POST /api/remote-runners/jobs/reap` with an optional bearer (API key or `CRON_SECRET`).
    pub async fn reap(bearer: Option<&str>, body: &Value) -> Reply {
        post("/api/remote-runners/jobs/reap", bearer, body).await
    }

    /// A reap answer, checked to be exactly `{examined, requeued, ended, unchanged, failed,
    /// more}` with these counts.
    pub fn expect_report(
        reply: &Reply,
        examined: u64,
        requeued: u64,
        ended: u64,
        more: bool,
    ) -> Value {
        let report = reply.expect(200);
        assert_eq!(
            report,
            json!({
                "examined": examined,
                "requeued": requeued,
                "ended": ended,
                "unchanged": 0,
                "failed": 0,
                "more": more,
            }),
            "unexpected reap report: {reply:?}"
        );
        report
    }

    /// The rows of statement `index` of a [`d1`] answer.
    pub fn d1_statement_rows(answer: &Value, index: usize) -> Vec<Value> {
        answer[index]["results"]
            .as_array()
            .unwrap_or_else(|| panic!("no results for statement {index} in {answer}"))
            .clone()
    }

    /// Moves each `(job id, claim id, at_ms)` lease to `at_ms`, in one D1 call: the job's
    /// `lease_expires_at` (what recovery reads) while it holds that claim, and the active
    /// claim's. Panics unless every statement changed exactly one row. The job's own alarm is
    /// left where it was.
    pub fn set_leases(leases: &[(&str, &str, i64)]) {
        let sql: String = leases
            .iter()
            .map(|(job, claim, at)| {
                let (job, claim) = (sql_text(job), sql_text(claim));
                format!(
                    "UPDATE jobs SET lease_expires_at = {at} WHERE id = {job} AND active_claim_id = {claim} \
                       AND state IN ('claimed', 'running', 'cancel_requested') RETURNING id; \
                     UPDATE job_claims SET lease_expires_at = {at} WHERE id = {claim} AND job_id = {job} \
                       AND state = 'active' RETURNING id; "
                )
            })
            .collect();
        let answer = d1(&sql);
        for index in 0..leases.len() * 2 {
            let rows = d1_statement_rows(&answer, index);
            assert_eq!(
                rows.len(),
                1,
                "statement {index} of {sql:?} changed {} rows: {answer}",
                rows.len()
            );
        }
    }

    /// [`set_leases`] for one lease.
    pub fn set_lease(job_id: &str, claim_id: &str, at_ms: i64) {
        set_leases(&[(job_id, claim_id, at_ms)]);
    }
}
