//! The evidence views: evaluation runs and their test results, cost records, model calls and
//! traces, each with the accepted completion that took custody of it, if any.

use edgerunner_protocol::kind::{CostCategory, ModelCallStatus, RunStatus, TestStatus};
use serde::Serialize;
use serde_json::Value;

use super::stored_json;
use crate::platform::rfc3339;
use crate::store::evidence::{CostRecordRow, ModelCallRow, RunRow, TestResultRow, TraceRow};

/// `EvidenceAttachment`: the accepted completion a row is attached to, as the LEFT JOIN on
/// `completion_evidence` returns it (`null` when none).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AttachmentView<'a> {
    completion_id: &'a str,
    job_id: &'a str,
    attached_at: Option<String>,
}

fn attachment<'a>(
    completion_id: &'a Option<String>,
    job_id: &'a Option<String>,
    at: Option<i64>,
) -> Option<AttachmentView<'a>> {
    Some(AttachmentView {
        completion_id: completion_id.as_deref()?,
        job_id: job_id.as_deref()?,
        attached_at: at.and_then(rfc3339),
    })
}

/// `EvaluationRun`: a run, its display name and metadata read out of its `metadata` column
/// (`{"name"?, "metadata"?}`, see `store::evidence::run_metadata`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunView<'a> {
    id: &'a str,
    name: Value,
    metadata: Value,
    evaluation_id: Option<&'a str>,
    status: RunStatus,
    created_at: Option<String>,
    finished_at: Option<String>,
    attached_to: Option<AttachmentView<'a>>,
}

impl<'a> From<&'a RunRow> for RunView<'a> {
    fn from(run: &'a RunRow) -> Self {
        let mut stored = run.metadata.as_deref().map(stored_json).unwrap_or_default();
        let mut take = |key: &str| stored.get_mut(key).map(Value::take).unwrap_or_default();
        RunView {
            id: &run.id,
            name: take("name"),
            metadata: take("metadata"),
            evaluation_id: run.evaluation_id.as_deref(),
            status: run.status,
            created_at: rfc3339(run.created_at),
            finished_at: run.finished_at.and_then(rfc3339),
            attached_to: attachment(
                &run.attached_completion_id,
                &run.attached_job_id,
                run.attached_at,
            ),
        }
    }
}

/// `EvaluationRunDetail`: the run with every row of it, oldest first.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunDetailView<'a> {
    #[serde(flatten)]
    pub(crate) run: RunView<'a>,
    pub(crate) test_results: Vec<TestResultView<'a>>,
    pub(crate) cost_records: Vec<CostRecordView<'a>>,
    pub(crate) model_calls: Vec<ModelCallView<'a>>,
    pub(crate) traces: Vec<TraceView<'a>>,
}

/// `EvidenceTestResult`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TestResultView<'a> {
    id: &'a str,
    evaluation_run_id: &'a str,
    name: &'a str,
    passed: bool,
    status: TestStatus,
    score: Option<f64>,
    created_at: Option<String>,
    attached_to: Option<AttachmentView<'a>>,
}

impl<'a> From<&'a TestResultRow> for TestResultView<'a> {
    fn from(result: &'a TestResultRow) -> Self {
        TestResultView {
            id: &result.id,
            evaluation_run_id: &result.evaluation_run_id,
            name: &result.name,
            passed: result.status == TestStatus::Passed,
            status: result.status,
            score: result.score,
            created_at: rfc3339(result.created_at),
            attached_to: attachment(
                &result.attached_completion_id,
                &result.attached_job_id,
                result.attached_at,
            ),
        }
    }
}

/// `EvidenceCostRecord`: `provider` is the schema's free-text `description`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CostRecordView<'a> {
    id: &'a str,
    evaluation_run_id: &'a str,
    category: CostCategory,
    amount_micros: i64,
    currency: &'a str,
    provider: Option<&'a str>,
    created_at: Option<String>,
    attached_to: Option<AttachmentView<'a>>,
}

impl<'a> From<&'a CostRecordRow> for CostRecordView<'a> {
    fn from(record: &'a CostRecordRow) -> Self {
        CostRecordView {
            id: &record.id,
            evaluation_run_id: &record.evaluation_run_id,
            category: record.category,
            amount_micros: record.amount_micros,
            currency: &record.currency,
            provider: record.description.as_deref(),
            created_at: rfc3339(record.created_at),
            attached_to: attachment(
                &record.attached_completion_id,
                &record.attached_job_id,
                record.attached_at,
            ),
        }
    }
}

/// `EvidenceModelCall`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ModelCallView<'a> {
    id: &'a str,
    evaluation_run_id: &'a str,
    provider: &'a str,
    model: &'a str,
    status: ModelCallStatus,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    latency_ms: Option<i64>,
    created_at: Option<String>,
    attached_to: Option<AttachmentView<'a>>,
}

impl<'a> From<&'a ModelCallRow> for ModelCallView<'a> {
    fn from(call: &'a ModelCallRow) -> Self {
        ModelCallView {
            id: &call.id,
            evaluation_run_id: &call.evaluation_run_id,
            provider: &call.provider,
            model: &call.model,
            status: call.status,
            input_tokens: call.input_tokens,
            output_tokens: call.output_tokens,
            latency_ms: call.latency_ms,
            created_at: rfc3339(call.created_at),
            attached_to: attachment(
                &call.attached_completion_id,
                &call.attached_job_id,
                call.attached_at,
            ),
        }
    }
}

/// `EvidenceTrace`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TraceView<'a> {
    id: &'a str,
    evaluation_run_id: &'a str,
    name: Option<&'a str>,
    spans: Option<Value>,
    created_at: Option<String>,
    attached_to: Option<AttachmentView<'a>>,
}

impl<'a> From<&'a TraceRow> for TraceView<'a> {
    fn from(trace: &'a TraceRow) -> Self {
        TraceView {
            id: &trace.id,
            evaluation_run_id: &trace.evaluation_run_id,
            name: trace.name.as_deref(),
            spans: trace
                .spans
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok()),
            created_at: rfc3339(trace.created_at),
            attached_to: attachment(
                &trace.attached_completion_id,
                &trace.attached_job_id,
                trace.attached_at,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;
    use crate::routes::views::to_value;

    /// 2026-01-01T00:00:00Z.
    const NOW: i64 = 1_767_225_600_000;

    /// A row as D1 answers it: its columns by name.
    fn row<T: DeserializeOwned>(columns: Value) -> T {
        serde_json::from_value(columns).unwrap()
    }

    /// The custody columns of a row attached to `cmp_1` of `job_1`, or of one attached to none.
    fn custody(attached: bool) -> Value {
        if attached {
            json!({"attached_completion_id": "cmp_1", "attached_job_id": "job_1", "attached_at": NOW})
        } else {
            json!({"attached_completion_id": null, "attached_job_id": null, "attached_at": null})
        }
    }

    fn with_custody(mut columns: Value, attached: bool) -> Value {
        for (key, value) in custody(attached).as_object().unwrap() {
            columns[key] = value.clone();
        }
        columns
    }

    const ATTACHED: &str =
        r#"{"attachedAt":"2026-01-01T00:00:00.000Z","completionId":"cmp_1","jobId":"job_1"}"#;

    #[test]
    fn a_run_reads_its_name_and_metadata_out_of_the_stored_column_and_its_custody() {
        let run: RunRow = row(with_custody(
            json!({
                "id": "er_1", "evaluation_id": "ev_1", "status": "running",
                "metadata": r#"{"name":"nightly","metadata":{"branch":"main"}}"#,
                "created_at": NOW, "finished_at": null,
            }),
            true,
        ));
        let detail = RunDetailView {
            run: RunView::from(&run),
            test_results: Vec::new(),
            cost_records: Vec::new(),
            model_calls: Vec::new(),
            traces: Vec::new(),
        };
        assert_eq!(
            to_value(&detail).unwrap(),
            json!({
                "id": "er_1", "name": "nightly", "metadata": {"branch": "main"},
                "evaluationId": "ev_1", "status": "running",
                "createdAt": "2026-01-01T00:00:00.000Z", "finishedAt": null,
                "attachedTo": serde_json::from_str::<Value>(ATTACHED).unwrap(),
                "testResults": [], "costRecords": [], "modelCalls": [], "traces": [],
            })
        );
        let bare: RunRow = row(with_custody(
            json!({
                "id": "er_2", "evaluation_id": null, "status": "running", "metadata": null,
                "created_at": NOW, "finished_at": null,
            }),
            false,
        ));
        let view = to_value(&RunView::from(&bare)).unwrap();
        assert_eq!(
            (&view["name"], &view["metadata"], &view["attachedTo"]),
            (&Value::Null, &Value::Null, &Value::Null)
        );
    }

    #[test]
    fn each_row_kind_reads_with_its_custody() {
        let result: TestResultRow = row(with_custody(
            json!({
                "id": "tr_1", "evaluation_run_id": "er_1", "name": "capital", "status": "passed",
                "score": 0.5, "created_at": NOW,
            }),
            true,
        ));
        let view = to_value(&TestResultView::from(&result))
            .unwrap()
            .to_string();
        assert_eq!(
            view,
            format!(
                r#"{{"attachedTo":{ATTACHED},"createdAt":"2026-01-01T00:00:00.000Z","evaluationRunId":"er_1","id":"tr_1","name":"capital","passed":true,"score":0.5,"status":"passed"}}"#
            )
        );
        let cost: CostRecordRow = row(with_custody(
            json!({
                "id": "cr_1", "evaluation_run_id": "er_1", "category": "model",
                "amount_micros": 1200, "currency": "USD", "description": "acme",
                "created_at": NOW,
            }),
            false,
        ));
        assert_eq!(
            to_value(&CostRecordView::from(&cost)).unwrap(),
            json!({
                "id": "cr_1", "evaluationRunId": "er_1", "category": "model",
                "amountMicros": 1200, "currency": "USD", "provider": "acme",
                "createdAt": "2026-01-01T00:00:00.000Z", "attachedTo": null,
            })
        );
        let call: ModelCallRow = row(with_custody(
            json!({
                "id": "mc_1", "evaluation_run_id": "er_1", "provider": "acme", "model": "m-1",
                "status": "succeeded", "input_tokens": 10, "output_tokens": null, "latency_ms": 250,
                "created_at": NOW,
            }),
            false,
        ));
        assert_eq!(
            to_value(&ModelCallView::from(&call)).unwrap(),
            json!({
                "id": "mc_1", "evaluationRunId": "er_1", "provider": "acme", "model": "m-1",
                "status": "succeeded", "inputTokens": 10, "outputTokens": null, "latencyMs": 250,
                "createdAt": "2026-01-01T00:00:00.000Z", "attachedTo": null,
            })
        );
        let trace: TraceRow = row(with_custody(
            json!({
                "id": "tc_1", "evaluation_run_id": "er_1", "name": null,
                "spans": r#"[{"name":"llm"}]"#, "created_at": NOW,
            }),
            false,
        ));
        assert_eq!(
            to_value(&TraceView::from(&trace)).unwrap(),
            json!({
                "id": "tc_1", "evaluationRunId": "er_1", "name": null,
                "spans": [{"name": "llm"}], "createdAt": "2026-01-01T00:00:00.000Z",
                "attachedTo": null,
            })
        );
    }
}
