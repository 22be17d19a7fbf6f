//! Evidence: evaluation runs and their test results, cost records, model calls and traces —
//! the rows a completion's `evidence` names — and a read that shows which completion, if any,
//! took custody of each.

use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::{CostCategory, ModelCallStatus, RunStatus, TestStatus};
use edgerunner_protocol::stable_json::MAX_PORTABLE_INTEGER;
use serde::Serialize;
use serde_json::{Map, Value};
use worker::{Request, Response};

use super::views::evidence::{
    CostRecordView, ModelCallView, RunDetailView, RunView, TestResultView, TraceView,
};
use super::views::respond;
use super::{optional_name, optional_str, refuse_unknown, required_str};
use crate::auth::{self, AdminCaller, Scope};
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::json_object;
use crate::platform::random_id;
use crate::store::{self, evidence};

fn run_not_found() -> ApiError {
    ApiError::not_found("no such evaluation run")
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::unprocessable(ErrorCode::InvalidField, message)
}

/// An optional whole number from 0 to 2^53 - 1 (token counts, latencies).
fn optional_count(body: &Map<String, Value>, field: &str) -> ApiResult<Option<i64>> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .filter(|n| *n <= MAX_PORTABLE_INTEGER)
            .and_then(|n| i64::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                invalid(format!(
                    "{field} must be a whole number from 0 to {MAX_PORTABLE_INTEGER}"
                ))
            }),
    }
}

/// The names of `all`, comma-separated, for a refusal that lists them.
fn names<T: std::fmt::Display>(all: &[T]) -> String {
    all.iter().map(T::to_string).collect::<Vec<_>>().join(", ")
}

/// Authenticates a writer and reads the body, refusing fields it does not know.
async fn writer(
    req: &mut Request,
    ctx: &Ctx,
    allowed: &[&str],
) -> ApiResult<(AdminCaller, Map<String, Value>)> {
    let caller = auth::admin(req, ctx).await?;
    caller.require(Scope::RunsWrite)?;
    let body = json_object(req).await?;
    refuse_unknown(&body, allowed)?;
    Ok((caller, body))
}

fn created<T: Serialize>(view: &T) -> ApiResult<Response> {
    respond(201, view)
}

pub(crate) async fn create_run(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let (caller, body) = writer(&mut req, ctx, &["name", "evaluationId", "metadata"]).await?;
    let name = optional_name(&body, "name", 200)?;
    let evaluation_id = optional_str(&body, "evaluationId", 200)?;
    let client_metadata = match body.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => Some(Value::Object(map.clone())),
        Some(_) => return Err(invalid("metadata must be a JSON object")),
    };
    let metadata = evidence::run_metadata(name, client_metadata);
    let id = random_id("evr")?;
    let row = evidence::NewRun {
        id: &id,
        organization_id: &caller.organization_id,
        evaluation_id,
        metadata_json: metadata.as_deref(),
        now: ctx.now,
    };
    let changed =
        evidence::insert_run(&ctx.db, &row, crate::store::usage::default_quota(&ctx.env)).await?;
    store::expect_one(changed, || {
        ApiError::internal("evaluation run insert changed no row")
    })?;
    let run = evidence::RunRow {
        id,
        evaluation_id: evaluation_id.map(str::to_owned),
        status: RunStatus::Running,
        metadata,
        created_at: ctx.now,
        finished_at: None,
        attached_completion_id: None,
        attached_job_id: None,
        attached_at: None,
    };
    created(&RunView::from(&run))
}

pub(crate) async fn create_test_result(
    mut req: Request,
    ctx: &Ctx,
    run_id: &str,
) -> ApiResult<Response> {
    let (caller, body) = writer(&mut req, ctx, TEST_RESULT_FIELDS).await?;
    test_result_in(ctx, &caller.organization_id, run_id, &body).await
}

const TEST_RESULT_FIELDS: &[&str] = &["name", "passed", "status", "score"];

async fn test_result_in(
    ctx: &Ctx,
    organization_id: &str,
    run_id: &str,
    body: &Map<String, Value>,
) -> ApiResult<Response> {
    let name = required_str(body, "name", 500)?;
    let passed = match body.get("passed") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(passed)) => Some(*passed),
        Some(_) => return Err(invalid("passed must be a boolean")),
    };
    // `passed` is the short form; `status` (the schema's four outcomes) the long one.
    let status = match (passed, optional_str(body, "status", 16)?) {
        (None, None) => {
            return Err(ApiError::unprocessable(
                ErrorCode::MissingField,
                "passed (a boolean) or status is required",
            ))
        }
        (Some(true), None) => TestStatus::Passed,
        (Some(false), None) => TestStatus::Failed,
        (passed, Some(status)) => {
            let status = TestStatus::parse(status).ok_or_else(|| {
                invalid(format!("status must be one of {}", names(TestStatus::ALL)))
            })?;
            if passed.is_some_and(|passed| passed != (status == TestStatus::Passed)) {
                return Err(invalid("passed and status disagree"));
            }
            status
        }
    };
    let score = match body.get("score") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_f64()
                .filter(|s| s.is_finite())
                .ok_or_else(|| invalid("score must be a finite number"))?,
        ),
    };
    let score_text = score.map(|s| s.to_string());
    let id = random_id("tst")?;
    let row = evidence::NewTestResult {
        id: &id,
        organization_id,
        evaluation_run_id: run_id,
        name,
        status,
        score_text: score_text.as_deref(),
        now: ctx.now,
    };
    let changed =
        evidence::insert_test_result(&ctx.db, &row, crate::store::usage::default_quota(&ctx.env))
            .await?;
    store::expect_one(changed, run_not_found)?;
    let result = evidence::TestResultRow {
        id,
        evaluation_run_id: run_id.to_owned(),
        name: name.to_owned(),
        status,
        score,
        created_at: ctx.now,
        attached_completion_id: None,
        attached_job_id: None,
        attached_at: None,
    };
    created(&TestResultView::from(&result))
}

pub(crate) async fn create_cost_record(
    mut req: Request,
    ctx: &Ctx,
    run_id: &str,
) -> ApiResult<Response> {
    let (caller, body) = writer(
        &mut req,
        ctx,
        &["amountMicros", "currency", "provider", "category"],
    )
    .await?;
    let amount_micros = optional_count(&body, "amountMicros")?.ok_or_else(|| {
        ApiError::unprocessable(ErrorCode::MissingField, "amountMicros is required")
    })?;
    let currency = match optional_str(&body, "currency", 3)? {
        None => "USD",
        Some(c) if c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()) => c,
        Some(_) => {
            return Err(invalid(
                "currency must be a three-letter upper-case code such as USD",
            ))
        }
    };
    let provider = optional_str(&body, "provider", 200)?;
    let category = match body.get("category") {
        None | Some(Value::Null) => Some(CostCategory::Other),
        Some(Value::String(name)) => CostCategory::parse(name),
        Some(_) => None,
    }
    .ok_or_else(|| {
        invalid(format!(
            "category must be one of {}",
            names(CostCategory::ALL)
        ))
    })?;
    let id = random_id("cst")?;
    let row = evidence::NewCostRecord {
        id: &id,
        organization_id: &caller.organization_id,
        evaluation_run_id: run_id,
        category,
        amount_micros,
        currency,
        provider,
        now: ctx.now,
    };
    let changed =
        evidence::insert_cost_record(&ctx.db, &row, crate::store::usage::default_quota(&ctx.env))
            .await?;
    store::expect_one(changed, run_not_found)?;
    let record = evidence::CostRecordRow {
        id,
        evaluation_run_id: run_id.to_owned(),
        category,
        amount_micros,
        currency: currency.to_owned(),
        description: provider.map(str::to_owned),
        created_at: ctx.now,
        attached_completion_id: None,
        attached_job_id: None,
        attached_at: None,
    };
    created(&CostRecordView::from(&record))
}

pub(crate) async fn create_model_call(
    mut req: Request,
    ctx: &Ctx,
    run_id: &str,
) -> ApiResult<Response> {
    let (caller, body) = writer(
        &mut req,
        ctx,
        &[
            "model",
            "provider",
            "status",
            "inputTokens",
            "outputTokens",
            "latencyMs",
        ],
    )
    .await?;
    let model = required_str(&body, "model", 200)?;
    let provider = optional_str(&body, "provider", 200)?.unwrap_or("unknown");
    let status = match body.get("status") {
        None | Some(Value::Null) => ModelCallStatus::Succeeded,
        Some(value) => value
            .as_str()
            .and_then(ModelCallStatus::parse)
            .ok_or_else(|| {
                invalid(format!(
                    "status must be one of {}",
                    names(ModelCallStatus::ALL)
                ))
            })?,
    };
    let input_tokens = optional_count(&body, "inputTokens")?;
    let output_tokens = optional_count(&body, "outputTokens")?;
    let latency_ms = optional_count(&body, "latencyMs")?;
    let id = random_id("mdl")?;
    let row = evidence::NewModelCall {
        id: &id,
        organization_id: &caller.organization_id,
        evaluation_run_id: run_id,
        provider,
        model,
        status,
        input_tokens,
        output_tokens,
        latency_ms,
        now: ctx.now,
    };
    let changed =
        evidence::insert_model_call(&ctx.db, &row, crate::store::usage::default_quota(&ctx.env))
            .await?;
    store::expect_one(changed, run_not_found)?;
    let call = evidence::ModelCallRow {
        id,
        evaluation_run_id: run_id.to_owned(),
        provider: provider.to_owned(),
        model: model.to_owned(),
        status,
        input_tokens,
        output_tokens,
        latency_ms,
        created_at: ctx.now,
        attached_completion_id: None,
        attached_job_id: None,
        attached_at: None,
    };
    created(&ModelCallView::from(&call))
}

pub(crate) async fn create_trace(mut req: Request, ctx: &Ctx, run_id: &str) -> ApiResult<Response> {
    let (caller, body) = writer(&mut req, ctx, &["name", "spans"]).await?;
    let name = optional_name(&body, "name", 200)?;
    let spans = match body.get("spans") {
        None | Some(Value::Null) => None,
        Some(spans @ Value::Array(_)) => Some(spans.to_string()),
        Some(_) => return Err(invalid("spans must be a JSON array")),
    };
    let id = random_id("trc")?;
    let row = evidence::NewTrace {
        id: &id,
        organization_id: &caller.organization_id,
        evaluation_run_id: run_id,
        name,
        spans_json: spans.as_deref(),
        now: ctx.now,
    };
    let changed =
        evidence::insert_trace(&ctx.db, &row, crate::store::usage::default_quota(&ctx.env)).await?;
    store::expect_one(changed, run_not_found)?;
    let trace = evidence::TraceRow {
        id,
        evaluation_run_id: run_id.to_owned(),
        name: name.map(str::to_owned),
        spans,
        created_at: ctx.now,
        attached_completion_id: None,
        attached_job_id: None,
        attached_at: None,
    };
    created(&TraceView::from(&trace))
}

/// The run, every row of it (up to [`evidence::MAX_ROWS_PER_KIND`] of each kind, oldest first)
/// and, for each, the accepted completion that holds it.
pub(crate) async fn get_run(req: Request, ctx: &Ctx, run_id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require(Scope::RunsRead)?;
    let org = &caller.organization_id;
    let run = evidence::get_run(&ctx.db, org, run_id)
        .await?
        .ok_or_else(run_not_found)?;
    let test_results = evidence::test_results_of(&ctx.db, org, run_id).await?;
    let cost_records = evidence::cost_records_of(&ctx.db, org, run_id).await?;
    let model_calls = evidence::model_calls_of(&ctx.db, org, run_id).await?;
    let traces = evidence::traces_of(&ctx.db, org, run_id).await?;
    respond(
        200,
        &RunDetailView {
            run: RunView::from(&run),
            test_results: test_results.iter().map(TestResultView::from).collect(),
            cost_records: cost_records.iter().map(CostRecordView::from).collect(),
            model_calls: model_calls.iter().map(ModelCallView::from).collect(),
            traces: traces.iter().map(TraceView::from).collect(),
        },
    )
}

// ------------------------------------------------------------------------------------------
// The runner's side: evidence for the job it holds
// ------------------------------------------------------------------------------------------

/// The runner holding `job_id`'s active claim, with the request body (unknown fields refused).
async fn job_holder(
    req: &mut Request,
    ctx: &Ctx,
    job_id: &str,
    allowed: &[&str],
) -> ApiResult<(auth::RunnerCaller, Map<String, Value>)> {
    let caller = auth::runner(req, ctx).await?;
    crate::store::jobs::held_job_data(
        &ctx.db,
        caller.organization_id(),
        job_id,
        caller.runner_id(),
    )
    .await?
    .ok_or_else(|| ApiError::not_found("no such job held by this runner"))?;
    let body = json_object(req).await?;
    refuse_unknown(&body, allowed)?;
    Ok((caller, body))
}

/// `POST /api/remote-runners/jobs/{jobId}/evidence/runs`: an evaluation run for the job the
/// runner holds, so a runner can complete with evidence without an API key. The run records
/// which job and runner it was made for; a runner may add rows only to such runs.
pub(crate) async fn create_job_run(
    mut req: Request,
    ctx: &Ctx,
    job_id: &str,
) -> ApiResult<Response> {
    let (caller, body) = job_holder(&mut req, ctx, job_id, &["name"]).await?;
    let name = optional_name(&body, "name", 200)?;
    let metadata = evidence::run_metadata(
        name,
        Some(serde_json::json!({ "jobId": job_id, "runnerId": caller.runner_id() })),
    );
    let id = random_id("evr")?;
    let row = evidence::NewRun {
        id: &id,
        organization_id: caller.organization_id(),
        evaluation_id: None,
        metadata_json: metadata.as_deref(),
        now: ctx.now,
    };
    let changed =
        evidence::insert_run(&ctx.db, &row, crate::store::usage::default_quota(&ctx.env)).await?;
    store::expect_one(changed, || {
        ApiError::internal("evaluation run insert changed no row")
    })?;
    let run = evidence::RunRow {
        id,
        evaluation_id: None,
        status: RunStatus::Running,
        metadata,
        created_at: ctx.now,
        finished_at: None,
        attached_completion_id: None,
        attached_job_id: None,
        attached_at: None,
    };
    created(&RunView::from(&run))
}

/// `POST /api/remote-runners/jobs/{jobId}/evidence/runs/{runId}/test-results`: a test result in
/// a run made for the job the runner holds.
pub(crate) async fn create_job_test_result(
    mut req: Request,
    ctx: &Ctx,
    job_id: &str,
    run_id: &str,
) -> ApiResult<Response> {
    let (caller, body) = job_holder(&mut req, ctx, job_id, TEST_RESULT_FIELDS).await?;
    if !evidence::run_is_for_job(&ctx.db, caller.organization_id(), run_id, job_id).await? {
        return Err(run_not_found());
    }
    test_result_in(ctx, caller.organization_id(), run_id, &body).await
}
