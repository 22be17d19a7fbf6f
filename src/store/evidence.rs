//! `evaluation_runs`, `test_results`, `cost_records`, `model_calls`, `traces`: the normal
//! EvalGate evidence a completion points at, read with its custody (`completion_evidence`).
//!
//! Rows are only ever inserted here. Every insert of a row of a run is guarded by the run
//! belonging to the caller's organization (the composite foreign key says the same), so zero
//! rows changed means "no such run" and never leaves a row behind.

use edgerunner_protocol::kind::{
    CostCategory, EvidenceKind, ModelCallStatus, RunStatus, TestStatus,
};
use serde::Deserialize;
use serde_json::Value;

use super::{all, first, stmt, Arg, Db};
use crate::error::ApiResult;

/// How many rows of each kind a run read returns (oldest first).
pub(crate) const MAX_ROWS_PER_KIND: i64 = 1000;

// ---------------------------------------------------------------------------------------------
// Evaluation runs
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct RunRow {
    pub(crate) id: String,
    pub(crate) evaluation_id: Option<String>,
    pub(crate) status: RunStatus,
    pub(crate) metadata: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) finished_at: Option<i64>,
    pub(crate) attached_completion_id: Option<String>,
    pub(crate) attached_job_id: Option<String>,
    pub(crate) attached_at: Option<i64>,
}

/// The `metadata` column of a run: `{"name"?, "metadata"?}` — the run's display name (the
/// schema has no column for it) beside whatever object the client attached.
pub(crate) fn run_metadata(name: Option<&str>, metadata: Option<Value>) -> Option<String> {
    let mut map = serde_json::Map::new();
    if let Some(name) = name {
        map.insert("name".to_owned(), Value::String(name.to_owned()));
    }
    if let Some(metadata) = metadata {
        map.insert("metadata".to_owned(), metadata);
    }
    (!map.is_empty()).then(|| Value::Object(map).to_string())
}

/// An evidence row's charge to its organization's quota (`quota`: the deployment's default).
struct Charge<'a> {
    org: &'a str,
    kind: EvidenceKind,
    id: &'a str,
    quota: i64,
}

/// One evidence row's insert and its charge to the organization's quota, in one batch (the
/// quota refuses the batch past it): the rows inserted.
async fn charged(db: &Db, charge: Charge<'_>, sql: &str, args: &[Arg<'_>]) -> ApiResult<usize> {
    let insert = stmt(db, sql, args)?;
    let charge =
        super::usage::evidence_added(db, charge.org, charge.kind, charge.id, charge.quota)?;
    let changed = super::batch(db, vec![insert, charge]).await?;
    Ok(changed.first().copied().unwrap_or(0))
}

pub(crate) struct NewRun<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) evaluation_id: Option<&'a str>,
    pub(crate) metadata_json: Option<&'a str>,
    pub(crate) now: i64,
}

pub(crate) async fn insert_run(db: &Db, new: &NewRun<'_>, quota: i64) -> ApiResult<usize> {
    charged(
        db,
        Charge {
            org: new.organization_id,
            kind: EvidenceKind::EvaluationRun,
            id: new.id,
            quota,
        },
        include_str!("queries/evidence/insert_run.sql"),
        &[
            new.id.into(),
            new.organization_id.into(),
            new.evaluation_id.into(),
            new.metadata_json.into(),
            Arg::Int(new.now),
            RunStatus::Running.as_str().into(),
        ],
    )
    .await
}

pub(crate) async fn get_run(db: &Db, org: &str, id: &str) -> ApiResult<Option<RunRow>> {
    first(
        db,
        include_str!("queries/evidence/get_run.sql"),
        &[org.into(), id.into()],
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Test results
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct TestResultRow {
    pub(crate) id: String,
    pub(crate) evaluation_run_id: String,
    pub(crate) name: String,
    pub(crate) status: TestStatus,
    pub(crate) score: Option<f64>,
    pub(crate) created_at: i64,
    pub(crate) attached_completion_id: Option<String>,
    pub(crate) attached_job_id: Option<String>,
    pub(crate) attached_at: Option<i64>,
}

pub(crate) struct NewTestResult<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) evaluation_run_id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) status: TestStatus,
    /// The score as decimal text: `Arg` binds no floats, so SQL casts it (`CAST(? AS REAL)`).
    pub(crate) score_text: Option<&'a str>,
    pub(crate) now: i64,
}

/// Rows inserted: 1, or 0 when the run is not the organization's.
pub(crate) async fn insert_test_result(
    db: &Db,
    new: &NewTestResult<'_>,
    quota: i64,
) -> ApiResult<usize> {
    charged(
        db,
        Charge {
            org: new.organization_id,
            kind: EvidenceKind::TestResult,
            id: new.id,
            quota,
        },
        include_str!("queries/evidence/insert_test_result.sql"),
        &[
            new.organization_id.into(),
            new.evaluation_run_id.into(),
            new.id.into(),
            new.name.into(),
            new.status.as_str().into(),
            new.score_text.into(),
            Arg::Int(new.now),
        ],
    )
    .await
}

pub(crate) async fn test_results_of(
    db: &Db,
    org: &str,
    run_id: &str,
) -> ApiResult<Vec<TestResultRow>> {
    all(
        db,
        include_str!("queries/evidence/test_results_of.sql"),
        &[org.into(), run_id.into(), Arg::Int(MAX_ROWS_PER_KIND)],
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Cost records
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct CostRecordRow {
    pub(crate) id: String,
    pub(crate) evaluation_run_id: String,
    pub(crate) category: CostCategory,
    pub(crate) amount_micros: i64,
    pub(crate) currency: String,
    /// The provider the cost was paid to (the schema's free-text `description`).
    pub(crate) description: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) attached_completion_id: Option<String>,
    pub(crate) attached_job_id: Option<String>,
    pub(crate) attached_at: Option<i64>,
}

pub(crate) struct NewCostRecord<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) evaluation_run_id: &'a str,
    pub(crate) category: CostCategory,
    pub(crate) amount_micros: i64,
    pub(crate) currency: &'a str,
    pub(crate) provider: Option<&'a str>,
    pub(crate) now: i64,
}

/// Rows inserted: 1, or 0 when the run is not the organization's.
pub(crate) async fn insert_cost_record(
    db: &Db,
    new: &NewCostRecord<'_>,
    quota: i64,
) -> ApiResult<usize> {
    charged(
        db,
        Charge {
            org: new.organization_id,
            kind: EvidenceKind::CostRecord,
            id: new.id,
            quota,
        },
        include_str!("queries/evidence/insert_cost_record.sql"),
        &[
            new.organization_id.into(),
            new.evaluation_run_id.into(),
            new.id.into(),
            new.category.as_str().into(),
            Arg::Int(new.amount_micros),
            new.currency.into(),
            new.provider.into(),
            Arg::Int(new.now),
        ],
    )
    .await
}

pub(crate) async fn cost_records_of(
    db: &Db,
    org: &str,
    run_id: &str,
) -> ApiResult<Vec<CostRecordRow>> {
    all(
        db,
        include_str!("queries/evidence/cost_records_of.sql"),
        &[org.into(), run_id.into(), Arg::Int(MAX_ROWS_PER_KIND)],
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Model calls
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct ModelCallRow {
    pub(crate) id: String,
    pub(crate) evaluation_run_id: String,
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) status: ModelCallStatus,
    pub(crate) input_tokens: Option<i64>,
    pub(crate) output_tokens: Option<i64>,
    pub(crate) latency_ms: Option<i64>,
    pub(crate) created_at: i64,
    pub(crate) attached_completion_id: Option<String>,
    pub(crate) attached_job_id: Option<String>,
    pub(crate) attached_at: Option<i64>,
}

pub(crate) struct NewModelCall<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) evaluation_run_id: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) model: &'a str,
    pub(crate) status: ModelCallStatus,
    pub(crate) input_tokens: Option<i64>,
    pub(crate) output_tokens: Option<i64>,
    pub(crate) latency_ms: Option<i64>,
    pub(crate) now: i64,
}

/// Rows inserted: 1, or 0 when the run is not the organization's.
pub(crate) async fn insert_model_call(
    db: &Db,
    new: &NewModelCall<'_>,
    quota: i64,
) -> ApiResult<usize> {
    charged(
        db,
        Charge {
            org: new.organization_id,
            kind: EvidenceKind::ModelCall,
            id: new.id,
            quota,
        },
        include_str!("queries/evidence/insert_model_call.sql"),
        &[
            new.organization_id.into(),
            new.evaluation_run_id.into(),
            new.id.into(),
            new.provider.into(),
            new.model.into(),
            new.status.as_str().into(),
            new.input_tokens.into(),
            new.output_tokens.into(),
            new.latency_ms.into(),
            Arg::Int(new.now),
        ],
    )
    .await
}

pub(crate) async fn model_calls_of(
    db: &Db,
    org: &str,
    run_id: &str,
) -> ApiResult<Vec<ModelCallRow>> {
    all(
        db,
        include_str!("queries/evidence/model_calls_of.sql"),
        &[org.into(), run_id.into(), Arg::Int(MAX_ROWS_PER_KIND)],
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Traces
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct TraceRow {
    pub(crate) id: String,
    pub(crate) evaluation_run_id: String,
    pub(crate) name: Option<String>,
    pub(crate) spans: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) attached_completion_id: Option<String>,
    pub(crate) attached_job_id: Option<String>,
    pub(crate) attached_at: Option<i64>,
}

pub(crate) struct NewTrace<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) evaluation_run_id: &'a str,
    pub(crate) name: Option<&'a str>,
    pub(crate) spans_json: Option<&'a str>,
    pub(crate) now: i64,
}

/// Rows inserted: 1, or 0 when the run is not the organization's.
pub(crate) async fn insert_trace(db: &Db, new: &NewTrace<'_>, quota: i64) -> ApiResult<usize> {
    charged(
        db,
        Charge {
            org: new.organization_id,
            kind: EvidenceKind::Trace,
            id: new.id,
            quota,
        },
        include_str!("queries/evidence/insert_trace.sql"),
        &[
            new.organization_id.into(),
            new.evaluation_run_id.into(),
            new.id.into(),
            new.name.into(),
            new.spans_json.into(),
            Arg::Int(new.now),
        ],
    )
    .await
}

pub(crate) async fn traces_of(db: &Db, org: &str, run_id: &str) -> ApiResult<Vec<TraceRow>> {
    all(
        db,
        include_str!("queries/evidence/traces_of.sql"),
        &[org.into(), run_id.into(), Arg::Int(MAX_ROWS_PER_KIND)],
    )
    .await
}

/// Whether `run` was made for `job` through the runner's side (its metadata names the job).
pub(crate) async fn run_is_for_job(db: &Db, org: &str, run: &str, job: &str) -> ApiResult<bool> {
    #[derive(Deserialize)]
    struct Found {
        #[allow(dead_code)]
        id: String,
    }
    let found: Option<Found> = first(
        db,
        include_str!("queries/evidence/run_is_for_job.sql"),
        &[org.into(), run.into(), job.into()],
    )
    .await?;
    Ok(found.is_some())
}
