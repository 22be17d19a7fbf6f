//! D1 access. Every statement is a named `.sql` file (`queries/`) behind one typed function of
//! the module of its table group; nothing outside this module sees SQL or binds a parameter by
//! position, and rows are decoded into typed rows here, once.
//!
//! Every state-changing statement carries its guard (`… AND state = ?`) and its row count is
//! checked: a guarded UPDATE that matches nothing succeeds silently in SQLite, so a batch says
//! which statements must change one row ([`writes::Writes::one`], checked when it commits) and
//! [`expect_one`] turns a count a caller reads ([`writes::Slot`]) into the error it must handle.
//! A read of several statements in one round trip is decoded here too ([`batched`]): no caller
//! reads a batch's results by position.

pub(crate) mod api_keys;
pub(crate) mod archive;
pub(crate) mod batched;
pub(crate) mod counters;
pub(crate) mod enrollment;
pub(crate) mod events;
pub(crate) mod evidence;
pub(crate) mod guards;
pub(crate) mod history;
pub(crate) mod jobs;
pub(crate) mod lifecycle;
pub(crate) mod queues;
pub(crate) mod releases;
pub(crate) mod retention;
pub(crate) mod runners;
pub(crate) mod states;
pub(crate) mod usage;
pub(crate) mod writes;

use std::cell::Cell;
use std::ops::Deref;
use std::rc::Rc;

use serde::de::DeserializeOwned;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, D1Result, Env};

use crate::error::{ApiError, ApiResult};

/// The database as every query here reaches it: D1, and the count of round trips one request
/// (or one object operation) made through it.
pub(crate) struct Db {
    d1: D1Database,
    trips: RoundTrips,
}

impl Db {
    /// The `DB` binding, counting into `trips`.
    pub(crate) fn of(env: &Env, trips: RoundTrips) -> ApiResult<Self> {
        Ok(Self {
            d1: env.d1("DB")?,
            trips,
        })
    }

    pub(crate) fn trips(&self) -> &RoundTrips {
        &self.trips
    }
}

impl Deref for Db {
    type Target = D1Database;

    fn deref(&self) -> &D1Database {
        &self.d1
    }
}

/// D1 round trips: every statement or batch sent counts one, a retry of it one more. Counted
/// by the Worker itself, per request: an object operation reports its count to its caller
/// ([`crate::objects::call`]), and the bench build answers the request's total in a header
/// (`scripts/bench` reads it; see BENCHMARKS.md).
#[derive(Clone, Default)]
pub(crate) struct RoundTrips(Rc<Cell<u32>>);

impl RoundTrips {
    pub(crate) fn count(&self) -> u32 {
        self.0.get()
    }

    pub(crate) fn add(&self, n: u32) {
        self.0.set(self.0.get().saturating_add(n));
    }
}

/// A bind value. D1 takes JS values; these are the only shapes we store.
pub(crate) enum Arg<'a> {
    Text(&'a str),
    Int(i64),
    Null,
}

impl From<&Arg<'_>> for JsValue {
    fn from(arg: &Arg<'_>) -> Self {
        match arg {
            Arg::Text(text) => JsValue::from_str(text),
            // Times (ms) and counters stay far below 2^53, where f64 is exact.
            Arg::Int(n) => JsValue::from_f64(*n as f64),
            Arg::Null => JsValue::NULL,
        }
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(text: &'a str) -> Self {
        Arg::Text(text)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(text: &'a String) -> Self {
        Arg::Text(text)
    }
}

impl From<i64> for Arg<'_> {
    fn from(n: i64) -> Self {
        Arg::Int(n)
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(text: Option<&'a str>) -> Self {
        text.map_or(Arg::Null, Arg::Text)
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(n: Option<i64>) -> Self {
        n.map_or(Arg::Null, Arg::Int)
    }
}

pub(crate) fn stmt(db: &Db, sql: &str, args: &[Arg<'_>]) -> ApiResult<D1PreparedStatement> {
    let values: Vec<JsValue> = args.iter().map(JsValue::from).collect();
    db.prepare(sql).bind(&values).map_err(ApiError::from)
}

pub(crate) async fn first<T: DeserializeOwned>(
    db: &Db,
    sql: &str,
    args: &[Arg<'_>],
) -> ApiResult<Option<T>> {
    let statement = stmt(db, sql, args)?;
    retry_busy(db, || statement.first::<T>(None))
        .await
        .map_err(ApiError::from)
}

pub(crate) async fn all<T: DeserializeOwned>(
    db: &Db,
    sql: &str,
    args: &[Arg<'_>],
) -> ApiResult<Vec<T>> {
    let statement = stmt(db, sql, args)?;
    retry_busy(db, || statement.all())
        .await?
        .results::<T>()
        .map_err(ApiError::from)
}

/// Runs one statement and returns how many rows it changed.
pub(crate) async fn run(db: &Db, sql: &str, args: &[Arg<'_>]) -> ApiResult<usize> {
    let statement = stmt(db, sql, args)?;
    let result = retry_busy(db, || statement.run())
        .await
        .map_err(constraint_or_internal)?;
    changes(&result)
}

/// Runs statements as one transaction (D1 `batch`): all commit or none do.
pub(crate) async fn batch(db: &Db, statements: Vec<D1PreparedStatement>) -> ApiResult<Vec<usize>> {
    write_batch(db, statements)
        .await?
        .iter()
        .map(changes)
        .collect()
}

/// [`batch`], answering each statement's result (the rows a `RETURNING` gives back).
pub(crate) async fn write_batch(
    db: &Db,
    statements: Vec<D1PreparedStatement>,
) -> ApiResult<Vec<D1Result>> {
    read_batch(db, statements)
        .await
        .map_err(constraint_or_internal)
}

/// `db.batch` (one transaction), retried like every statement here when the database is busy.
pub(crate) async fn read_batch(
    db: &Db,
    statements: Vec<D1PreparedStatement>,
) -> worker::Result<Vec<D1Result>> {
    retry_busy(db, || db.batch(statements.clone())).await
}

/// The rows of the `index`-th statement of a [`read_batch`].
pub(crate) fn rows_of<T: DeserializeOwned>(
    results: &[D1Result],
    index: usize,
) -> ApiResult<Vec<T>> {
    results
        .get(index)
        .ok_or_else(|| ApiError::internal(format!("batch answered no result {index}")))?
        .results::<T>()
        .map_err(ApiError::from)
}

/// Local D1 (`wrangler dev`) shares its SQLite file with `wrangler d1 execute` (operator
/// scripts such as `scripts/bootstrap-admin`, and tests). A statement that meets that process's
/// lock fails with `SQLITE_BUSY` *without applying*, so it is safe to run again: we do, a few
/// times with a short growing pause. Nothing else is retried here.
async fn retry_busy<T, F, Fut>(db: &Db, mut attempt: F) -> worker::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = worker::Result<T>>,
{
    const ATTEMPTS: u64 = 8;
    let mut tried = 1;
    loop {
        db.trips.add(1);
        match attempt().await {
            Err(err) if tried < ATTEMPTS && is_busy(&err) => {
                worker::Delay::from(std::time::Duration::from_millis(20 * tried)).await;
                tried += 1;
            }
            outcome => return outcome,
        }
    }
}

fn is_busy(err: &worker::Error) -> bool {
    let text = err.to_string();
    text.contains("SQLITE_BUSY")
        || text.contains("database is locked")
        || is_local_d1_internal_failure(&text)
}

/// Local D1 (miniflare) reports a lock met *inside* its SQLite as a sanitized workerd internal
/// error, which its D1 object then fails to parse: `Failed to parse body as JSON, got: Error:
/// internal error; reference = …` (the log shows `SQLITE_BUSY` for the same reference). The
/// object's transaction is rolled back when it throws, so nothing applied. Deployed D1 never
/// answers in this shape.
fn is_local_d1_internal_failure(text: &str) -> bool {
    text.contains("Failed to parse body as JSON, got: Error: internal error; reference =")
}

pub(crate) fn changes(result: &D1Result) -> ApiResult<usize> {
    Ok(result.meta()?.and_then(|m| m.changes).unwrap_or(0))
}

/// A guarded write must have changed exactly one row; zero means the guard did not hold.
pub(crate) fn expect_one(changed: usize, on_zero: impl FnOnce() -> ApiError) -> ApiResult<()> {
    match changed {
        1 => Ok(()),
        0 => Err(on_zero()),
        n => Err(ApiError::internal(format!(
            "guarded write changed {n} rows"
        ))),
    }
}

/// D1 errors arrive as JS errors whose text names the constraint or the trigger's RAISE code.
/// Constraint failures become [`ApiError::violation`] (the guard table's answer, or a 500 for a
/// constraint not in it); anything else is a 500.
fn constraint_or_internal(err: worker::Error) -> ApiError {
    let text = err.to_string();
    if text.contains("SQLITE_CONSTRAINT") || text.contains("constraint failed") {
        ApiError::violation(&text)
    } else {
        ApiError::internal(text)
    }
}

/// One row of the benchmark floor's table (the `bench-floor` build only; `scripts/bench`
/// creates the table before the run).
#[cfg(feature = "bench-floor")]
pub(crate) fn bench_floor_write(db: &Db, now: i64) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/bench/floor_write.sql"),
        &[now.into()],
    )
}

#[cfg(test)]
mod tests {
    /// A row type's columns, in the order it is read with, and every statement that reads it
    /// whole: each must select exactly those columns, in that order (serde reads a row by name,
    /// so a missing column is a failed read at run time, and this finds it at build time).
    const ROWS: [(&str, &str, &[&str]); 6] = [
        (
            "jobs::JobRow",
            "id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash, requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason, created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum, last_unstored_decision, last_unstored_at, held_at, held_by, held_reason",
            &[
                include_str!("queries/jobs/select_job.sql"),
                include_str!("queries/jobs/by_idempotency_key.sql"),
                include_str!("queries/jobs/select_by_idempotency_key_of_key.sql"),
                include_str!("queries/claim_candidates.sql"),
            ],
        ),
        (
            "jobs::JobRow with its artifact's name",
            "id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash, requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason, created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum, last_unstored_decision, last_unstored_at, held_at, held_by, held_reason, (SELECT name FROM release_artifacts WHERE id = subject_artifact_id) AS subject_artifact_name",
            &[include_str!("queries/jobs/get.sql")],
        ),
        (
            "runners::RunnerRow",
            "id, organization_id, identity_model, name, runner_key, bootstrap_token_hash, bootstrap_token_expires_at, public_key, fingerprint, product, version, machine, address, state, state_reason, capabilities, capabilities_hash, protocol_version, problem_types, external, tags, max_concurrent_jobs, active_claims, credential_generation, key_id, registered_at, approved_at, revoked_at, last_seen_at, last_heartbeat_at, completed_jobs, ephemeral",
            &[
                include_str!("queries/runners/get.sql"),
                include_str!("queries/runners/select.sql"),
                include_str!("queries/runners/get_unscoped.sql"),
                include_str!("queries/runners/by_fingerprint.sql"),
            ],
        ),
        (
            "events::EventRow",
            "id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at",
            &[
                include_str!("queries/events/for_job.sql"),
                include_str!("queries/events/for_runner.sql"),
            ],
        ),
        (
            "enrollment::TokenRow",
            "id, name, token_prefix, max_uses, uses, created_at, created_by, expires_at, revoked_at, last_used_at",
            &[
                include_str!("queries/enrollment/by_hash.sql"),
                include_str!("queries/enrollment/list.sql"),
            ],
        ),
        (
            "releases::TargetRow",
            "id, target_key, repository, entrypoint, requirements, evaluation_id, version_id, content_hash, created_at, updated_at",
            &[
                include_str!("queries/releases/get_target.sql"),
                include_str!("queries/releases/list_targets.sql"),
                include_str!("queries/releases/list_targets_2.sql"),
            ],
        ),
    ];

    fn words(text: &str) -> Vec<&str> {
        text.split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
            .collect()
    }

    /// The columns of each arm's first `SELECT … FROM` (a statement may read a job from
    /// `jobs` and then `archived_job_rows`, `UNION ALL`), comments left out; a column may be a
    /// subquery in parentheses.
    fn selected(sql: &str) -> Vec<String> {
        let text = sql
            .lines()
            .filter(|line| !line.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join(" ");
        text.split("UNION ALL")
            .map(|arm| {
                let (_, rest) = arm.split_once("SELECT").expect("a SELECT");
                let mut depth = 0_i32;
                let end = rest
                    .char_indices()
                    .find(|&(at, c)| {
                        depth += match c {
                            '(' => 1,
                            ')' => -1,
                            _ => 0,
                        };
                        depth == 0 && rest[at..].starts_with("FROM")
                    })
                    .map(|(at, _)| at)
                    .expect("a SELECT … FROM");
                rest[..end].to_owned()
            })
            .collect()
    }

    #[test]
    fn every_statement_that_reads_a_whole_row_selects_its_columns_in_order() {
        for (row, columns, statements) in ROWS {
            for sql in statements {
                for arm in selected(sql) {
                    assert_eq!(words(&arm), words(columns), "{row}: {sql}");
                }
            }
        }
    }
}
