//! Local D1 reached straight on its SQLite file, for the tests that set or read a row the API
//! does not (an expiry moved into the past, a stored hash): the same file `wrangler d1 execute
//! --local` opens, without the node process and the workerd of its own that each such call
//! starts (about 2.5 CPU-seconds a call, where the suites make some 170: the largest part of an
//! e2e run's CPU after the server's).
//!
//! Local D1 keeps a database in one SQLite file in write-ahead-log mode under the state
//! directory; the server's workerd has it open with SQLite's own file locks, so a second process
//! reads and writes it as a second workerd would. What an operator is told to run
//! (`wrangler d1 execute`, in `docs/API.md`) is tested through wrangler itself
//! ([`crate::wrangler_d1`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::fallible_iterator::FallibleIterator as _;
use rusqlite::types::ValueRef;
use rusqlite::{Batch, Connection, TransactionBehavior};
use serde_json::{json, Map, Value};

/// How long a statement waits for the server's own write to end before it fails with
/// `SQLITE_BUSY` (a server transaction takes milliseconds).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `sql` (one statement or several, separated by `;`) in one transaction on the local D1
/// database under `state`, and answers in `wrangler d1 execute --json`'s shape: one
/// `{results, success, meta}` per statement, each row an object by column name (`meta` empty:
/// local D1 reports no row counts either).
pub(crate) fn execute(state: &str, sql: &str) -> Value {
    let path = database_file(Path::new(state));
    let mut connection = Connection::open(&path)
        .unwrap_or_else(|e| panic!("cannot open local D1 {}: {e}", path.display()));
    connection
        .busy_timeout(BUSY_TIMEOUT)
        .and_then(|()| connection.pragma_update(None, "foreign_keys", true))
        .unwrap_or_else(|e| panic!("cannot set up local D1 {}: {e}", path.display()));
    // The write lock first: a transaction that read before it wrote could not wait for it.
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap_or_else(|e| panic!("local D1 {}: cannot begin: {e}", path.display()));
    let answers = run_statements(&transaction, sql)
        .unwrap_or_else(|e| panic!("local D1 refused {sql:?}: {e}"));
    transaction
        .commit()
        .unwrap_or_else(|e| panic!("local D1 could not commit {sql:?}: {e}"));
    Value::Array(answers)
}

fn run_statements(connection: &Connection, sql: &str) -> rusqlite::Result<Vec<Value>> {
    let mut answers = Vec::new();
    let mut batch = Batch::new(connection, sql);
    while let Some(mut statement) = batch.next()? {
        let columns: Vec<String> = statement.column_names().map(str::to_owned).collect();
        let mut rows = statement.query([])?;
        let mut results = Vec::new();
        while let Some(row) = rows.next()? {
            let mut object = Map::new();
            for (index, name) in columns.iter().enumerate() {
                object.insert(name.clone(), json_of(row.get_ref(index)?));
            }
            results.push(Value::Object(object));
        }
        answers.push(json!({ "results": results, "success": true, "meta": {} }));
    }
    Ok(answers)
}

/// A column's value as wrangler shows it: numbers, text, null, and a blob as its bytes.
fn json_of(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::from(n),
        ValueRef::Real(x) => Value::from(x),
        ValueRef::Text(text) => Value::String(String::from_utf8_lossy(text).into_owned()),
        ValueRef::Blob(bytes) => Value::from(bytes.to_vec()),
    }
}

/// The state's one D1 database file (`v3/d1/miniflare-D1DatabaseObject/<id>.sqlite`; beside it,
/// `metadata.sqlite` is the object's own).
fn database_file(state: &Path) -> PathBuf {
    let folder = state.join("v3/d1/miniflare-D1DatabaseObject");
    let entries = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("no local D1 under {}: {e}", folder.display()));
    let files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "sqlite")
                && path
                    .file_name()
                    .is_some_and(|name| name != "metadata.sqlite")
        })
        .collect();
    match files.as_slice() {
        [one] => one.clone(),
        _ => panic!(
            "expected one D1 database file in {}, found {files:?}",
            folder.display()
        ),
    }
}
