//! Operator tools: `scripts/bootstrap-admin`, `wrangler d1 execute` against the server's local
//! state (and the same SQL straight on its SQLite file, [`d1`]), and credentials minted with the
//! server's own signing secret.

use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use edgerunner_protocol::credential::{self, CredentialClaims};
use edgerunner_protocol::envelope::MasterSigningSecret;
use serde_json::Value;

use crate::*;

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

/// An organization of its own for a test on the server persisting to `STATE`, named after
/// `name` (made unique). Organizations are made ahead, [`ORGS_PER_BATCH`] in one
/// `scripts/bootstrap-admin --count` (one `wrangler d1 execute`, about 2 CPU-seconds, where the
/// suites make some 200 organizations): the caller gets the batch's first, named `name`, and
/// the next callers on the same state take the rest, which carry that first caller's name. A
/// test that reads its organization's name back makes it alone ([`bootstrap_named_org`]).
pub fn bootstrap_org_in(state: &str, name: &str) -> Org {
    static SPARE: Mutex<Vec<(String, Org)>> = Mutex::new(Vec::new());
    let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(at) = spare.iter().position(|(of, _)| of == state) {
        return spare.swap_remove(at).1;
    }
    let mut made = bootstrap_admin(state, name, ORGS_PER_BATCH).into_iter();
    let first = made
        .next()
        .unwrap_or_else(|| panic!("scripts/bootstrap-admin made no organization"));
    spare.extend(made.map(|org| (state.to_owned(), org)));
    first
}

/// Organizations made ahead in one call of `scripts/bootstrap-admin` ([`bootstrap_org_in`]).
pub const ORGS_PER_BATCH: usize = 16;

/// `scripts/bootstrap-admin --org NAME` alone, for a test that reads the name back.
pub fn bootstrap_named_org(name: &str) -> Org {
    bootstrap_admin(&state_dir(), name, 1)
        .pop()
        .unwrap_or_else(|| panic!("scripts/bootstrap-admin made no organization"))
}

/// `scripts/bootstrap-admin --org NAME --state STATE --count COUNT`: its organizations.
fn bootstrap_admin(state: &str, name: &str, count: usize) -> Vec<Org> {
    let root = repo_root();
    let name = unique(name);
    let stdout = operator_tool("scripts/bootstrap-admin", || {
        let mut command = Command::new(root.join("scripts/bootstrap-admin"));
        command.args([
            "--org",
            &name,
            "--state",
            state,
            "--count",
            &count.to_string(),
        ]);
        command
    });
    let orgs: Vec<Org> = stdout
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
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
        })
        .collect();
    assert_eq!(orgs.len(), count, "bootstrap-admin printed {stdout:?}");
    orgs
}

/// Runs a tool that writes the local D1 file beside the running server, from the repository
/// root, and returns its stdout (panicking with its output when it fails).
///
/// Local D1 is one SQLite file: two writers at once make one of them fail with `SQLITE_BUSY`.
/// The tests of one binary take turns (a process-wide lock), and a write that still meets the
/// server's own transaction is retried a bounded number of times.
pub(crate) fn operator_tool(what: &str, make: impl Fn() -> Command) -> String {
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

/// Runs one SQL text against the server's local D1 (`EDGERUNNER_STATE_DIR`) and returns an
/// answer in `wrangler d1 execute --json`'s shape (an array with one `{results, success, meta}`
/// per statement), straight on its SQLite file ([`crate::local_d1`]). Local D1 reports no row
/// counts: write `UPDATE … RETURNING id` and count [`d1_rows`].
pub fn d1(sql: &str) -> Value {
    crate::local_d1::execute(&state_dir(), sql)
}

/// [`d1`] as an operator runs it: `wrangler d1 execute --local`, for the tests of what
/// `docs/API.md` tells an operator to run that way.
pub fn wrangler_d1(sql: &str) -> Value {
    let root = repo_root();
    let state = state_dir();
    let stdout = operator_tool("wrangler d1 execute", || {
        let mut command = Command::new(root.join("node_modules/.bin/wrangler"));
        command.args([
            "d1",
            "execute",
            "DB",
            "--local",
            "--persist-to",
            &state,
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
