//! Where a completion's evidence comes from.
//!
//! The server accepts a completion only if it names an existing evaluation run of the job's
//! organization, and attaches each run to one accepted completion at most. Creating a run
//! (`POST /api/evidence/runs`) takes an API key with `runs:write`; a runner credential cannot.
//! Each job's run comes from one of three places, tried in this order:
//!
//! 1. **The job input**: when the input is an object with the configured field (default
//!    `evaluationRunId`), that run is used. The enqueuer creates it with the job.
//! 2. **An evidence API key** given to the runner (`--evidence-api-key-file`,
//!    `EDGERUNNER_EVIDENCE_API_KEY`): the runner creates one run per job before running it, and
//!    records the outcome in it as a test result before completing.
//! 3. **The runner's own credential**: the holder of a job's active claim may create a run for
//!    that job (`POST /api/remote-runners/jobs/{job}/evidence/runs`) and add test results to it.
//!    This is the default: no API key ever needs to reach a runner machine.

use std::sync::Arc;

use edgerunner_protocol::completion::{Evidence, EvidenceId};
use edgerunner_protocol::state::CompletionStatus;
use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::client::{Assignment, RunnerClient};
use crate::http::{ClientError, Http};
use crate::retry::{retry, RetryPolicy};

/// The runner's evidence configuration.
#[derive(Clone, Debug, Default)]
pub struct EvidenceSource {
    /// The input field naming a pre-created evaluation run (`None` disables the lookup).
    pub input_field: Option<String>,
    /// Creates a run per job when the input names none.
    pub api: Option<EvidenceApi>,
}

/// An API key with `runs:write`, used only for `/api/evidence/*`.
#[derive(Clone)]
pub struct EvidenceApi {
    pub http: Http,
    pub api_key: Arc<str>,
    /// The `evaluationId` new runs are filed under.
    pub evaluation_id: Option<String>,
}

impl std::fmt::Debug for EvidenceApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvidenceApi")
            .field("server", &self.http.base())
            .field("api_key", &"<redacted>")
            .field("evaluation_id", &self.evaluation_id)
            .finish()
    }
}

/// The run a job's completion will name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedEvidence {
    pub evaluation_run_id: EvidenceId,
    /// Who made the run (a run this runner made gets the outcome recorded in it).
    pub made_by: MadeBy,
}

/// Where a job's evaluation run came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MadeBy {
    /// The enqueuer, named in the job input.
    Enqueuer,
    /// This runner, through the evidence API key.
    ApiKey,
    /// This runner, through its own credential and the job it holds.
    Runner,
}

impl EvidenceSource {
    /// Finds or creates the job's evaluation run.
    pub async fn prepare(
        &self,
        client: &RunnerClient,
        assignment: &Assignment,
        input: &Value,
    ) -> Result<PreparedEvidence, ClientError> {
        if let Some(field) = &self.input_field {
            match input.get(field) {
                None | Some(Value::Null) => {}
                Some(value) => {
                    return evidence_id(value)
                        .map(|evaluation_run_id| PreparedEvidence {
                            evaluation_run_id,
                            made_by: MadeBy::Enqueuer,
                        })
                        .ok_or_else(|| {
                            ClientError::Config(format!(
                                "the job input's {field:?} is {value}, not an evaluation run id"
                            ))
                        })
                }
            }
        }
        let name = format!(
            "edgerunner job {} attempt {}",
            assignment.job_id(),
            assignment.attempt()
        );
        let Some(api) = &self.api else {
            let created = client
                .job_evidence(assignment.job_id(), "runs", &json!({ "name": name }))
                .await?;
            let evaluation_run_id =
                evidence_id(&created["id"]).ok_or_else(|| ClientError::Malformed {
                    what: "POST …/evidence/runs".into(),
                    detail: "the answer has no run id".into(),
                })?;
            return Ok(PreparedEvidence {
                evaluation_run_id,
                made_by: MadeBy::Runner,
            });
        };
        let mut body = json!({
            "name": name,
            "metadata": {
                "jobId": assignment.job_id().as_str(),
                "claimId": assignment.claim_id().as_str(),
                "dispatchAttempt": assignment.attempt().get(),
                "runnerId": assignment.runner_id().as_str(),
            },
        });
        if let Some(evaluation_id) = &api.evaluation_id {
            body["evaluationId"] = Value::from(evaluation_id.as_str());
        }
        let created = api.post("/api/evidence/runs", &body).await?;
        let evaluation_run_id =
            evidence_id(&created["id"]).ok_or_else(|| ClientError::Malformed {
                what: "POST /api/evidence/runs".into(),
                detail: "the answer has no run id".into(),
            })?;
        Ok(PreparedEvidence {
            evaluation_run_id,
            made_by: MadeBy::ApiKey,
        })
    }

    /// The completion's evidence. A run this runner created gets a test result recording the
    /// outcome first; if that fails, the completion names the run alone (and `warning` says so).
    pub async fn finish(
        &self,
        client: &RunnerClient,
        prepared: &PreparedEvidence,
        assignment: &Assignment,
        status: CompletionStatus,
    ) -> (Evidence, Option<ClientError>) {
        let mut evidence = Evidence {
            evaluation_run_id: prepared.evaluation_run_id.clone(),
            test_result_ids: Vec::new(),
            cost_record_ids: Vec::new(),
            model_call_ids: Vec::new(),
            trace_id: None,
            extra: Map::new(),
        };
        if prepared.made_by == MadeBy::Enqueuer {
            return (evidence, None);
        }
        let outcome = match status {
            CompletionStatus::Succeeded => "passed",
            CompletionStatus::Failed => "failed",
            CompletionStatus::Cancelled => "skipped",
        };
        let body = json!({
            "name": format!("job {} attempt {}", assignment.job_id(), assignment.attempt()),
            "status": outcome,
        });
        let run = prepared.evaluation_run_id.key();
        let (path, answer) = match (&self.api, prepared.made_by) {
            (Some(api), MadeBy::ApiKey) => {
                let path = format!("/api/evidence/runs/{run}/test-results");
                let answer = api.post(&path, &body).await;
                (path, answer)
            }
            _ => {
                let rest = format!("runs/{run}/test-results");
                let answer = client.job_evidence(assignment.job_id(), &rest, &body).await;
                (format!("…/evidence/{rest}"), answer)
            }
        };
        match answer {
            Ok(row) => match evidence_id(&row["id"]) {
                Some(id) => {
                    evidence.test_result_ids.push(id);
                    (evidence, None)
                }
                None => (
                    evidence,
                    Some(ClientError::Malformed {
                        what: format!("POST {path}"),
                        detail: "the answer has no id".into(),
                    }),
                ),
            },
            Err(error) => (evidence, Some(error)),
        }
    }
}

impl EvidenceApi {
    async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        // Creating evidence is not idempotent: only a request that never left is repeated.
        let answer = retry(RetryPolicy::DEFAULT, ClientError::never_sent, || {
            self.http
                .send(Method::POST, path, Some(&self.api_key), Some(body))
        })
        .await?;
        answer.json(&format!("POST {path}"))
    }
}

/// An evidence id as JSON: a whole number or a non-empty string.
pub fn evidence_id(value: &Value) -> Option<EvidenceId> {
    match value {
        Value::String(text) if !text.is_empty() => Some(EvidenceId::Text(text.clone())),
        Value::Number(number) => number.as_u64().map(EvidenceId::Integer),
        _ => None,
    }
}
