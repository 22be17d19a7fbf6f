//! One job's task: read and check what it needs, heartbeat, run its command, complete once;
//! or hand its claim back when it cannot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use edgerunner_protocol::state::CompletionStatus;
use serde_json::Value;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tracing::{error, info, warn};

use super::{JobOutcome, JobReport, OutputFigures, ShutdownState, WorkerConfig};
use crate::client::{Assignment, RunnerClient};
use crate::heartbeat::{is_claim_lost, ClaimStatus, Heartbeat};
use crate::stream::ChunkStream;
use crate::workdir::JobDir;

/// Everything one job's task needs. Its events are reported inside the job's span.
pub(super) struct JobRun {
    pub(super) client: Arc<RunnerClient>,
    pub(super) config: Arc<WorkerConfig>,
    pub(super) shutdown: watch::Receiver<ShutdownState>,
    pub(super) handed_back: Arc<AtomicBool>,
}

impl JobRun {
    pub(super) async fn run(
        self,
        assignment: Assignment,
        permit: OwnedSemaphorePermit,
    ) -> JobReport {
        let mut output = None;
        let outcome = self.execute(&assignment, &mut output).await;
        drop(permit);
        JobReport {
            job_id: assignment.job_id().as_str().to_owned(),
            attempt: assignment.attempt().get(),
            outcome,
            output,
        }
    }

    /// Hands this job's claim back, so that the server requeues it now rather than after its
    /// lease; says what happened, for the job's report. Never fatal: if it fails the lease lapses.
    pub(super) async fn hand_back(&self, assignment: &Assignment, why: &str) -> String {
        match self
            .client
            .release(assignment.claim_id().as_str(), why)
            .await
        {
            Ok(state) => {
                self.handed_back.store(true, Ordering::SeqCst);
                format!("handed back (the job is {state} now)")
            }
            Err(error) if error.code() == Some(ErrorCode::ClaimNotActive) => {
                "the claim was already over".to_owned()
            }
            Err(error) => format!("could not hand it back ({error}); its lease will lapse"),
        }
    }

    fn not_completed(&self, assignment: &Assignment, event: &str, reason: String) -> JobOutcome {
        error!(
            event,
            reason = reason.as_str(),
            "job {} (attempt {}): {reason}",
            assignment.job_id(),
            assignment.attempt()
        );
        JobOutcome::NotCompleted { reason }
    }

    async fn execute(
        &self,
        assignment: &Assignment,
        output: &mut Option<OutputFigures>,
    ) -> JobOutcome {
        let label = format!(
            "job {} (attempt {})",
            assignment.job_id(),
            assignment.attempt()
        );
        info!(
            event = "job.claimed",
            lease_expires_at = assignment.lease_expires_at.as_deref(),
            "{label}: claimed; envelope verified"
        );

        let (input_text, input) = match self.client.job_input(assignment.job_id()).await {
            Ok(input) => input,
            Err(error) => {
                let handed = self
                    .hand_back(assignment, "the runner cannot read the job input")
                    .await;
                return self.not_completed(
                    assignment,
                    "job.abandoned",
                    format!("cannot read the job input ({error}); {handed}"),
                );
            }
        };
        let prepared = match self
            .config
            .evidence
            .prepare(&self.client, assignment, &input)
            .await
        {
            Ok(prepared) => prepared,
            Err(error) => {
                let handed = self
                    .hand_back(
                        assignment,
                        "the runner has no evaluation run to complete it with",
                    )
                    .await;
                return self.not_completed(
                    assignment,
                    "job.abandoned",
                    format!("{error}; {handed}"),
                );
            }
        };

        let mut status = ClaimStatus::default();
        match self
            .client
            .heartbeat(assignment.claim_id(), self.config.heartbeat.extend_seconds)
            .await
        {
            Ok(answer) => status.record(&answer),
            Err(error) => {
                if status.record_error(&error) {
                    return self.not_completed(
                        assignment,
                        "job.lost",
                        format!("the claim is no longer ours: {error}"),
                    );
                }
                warn!(
                    event = "heartbeat.failed",
                    "{label}: first heartbeat failed ({error}); retrying on schedule"
                );
            }
        }
        let heartbeat = Heartbeat::spawn(
            Arc::clone(&self.client),
            assignment.claim_id().clone(),
            self.config.heartbeat,
            status.clone(),
        );
        let mut stream = ChunkStream::new(Arc::clone(&self.client), assignment.identity());

        let job_dir = self.config.work_dir.create_job_dir(&format!(
            "{}-{}",
            sanitize(assignment.job_id().as_str()),
            assignment.attempt()
        ));
        let outcome = self
            .run_command(
                assignment,
                &heartbeat,
                &mut stream,
                job_dir.as_ref(),
                (&input, &input_text),
                output,
            )
            .await;
        let (status, result_hash, summary) = match outcome {
            Prepared::Complete {
                status,
                result_hash,
                summary,
            } => (status, result_hash, summary),
            Prepared::Stop(outcome) => {
                drop(heartbeat);
                self.finish_dir(job_dir.ok());
                return outcome;
            }
        };

        let (evidence, warning) = self
            .config
            .evidence
            .finish(&self.client, &prepared, assignment, status)
            .await;
        if let Some(warning) = warning {
            warn!(
                event = "evidence.partial",
                "{label}: could not record the outcome in the evaluation run: {warning}"
            );
        }
        if let Err(error) = stream.flush().await {
            warn!(
                event = "stream.unsettled",
                "{label}: the last chunk's delivery is unknown ({error})"
            );
        }
        let completion =
            assignment.completion(status, result_hash, stream.final_checksum(), evidence);
        let answer = self.client.complete(&completion).await;
        drop(heartbeat);
        self.finish_dir(job_dir.ok());
        match answer {
            Ok(answer) => {
                let message = format!(
                    "{label}: {} ({summary}); completion {}",
                    status.as_str(),
                    answer.decision.as_str()
                );
                if answer.is_settled() {
                    info!(
                        event = "job.completed",
                        status = status.as_str(),
                        decision = answer.decision.as_str(),
                        rationale = answer.rationale.as_str(),
                        completion_checksum = completion.checksum().as_str(),
                        chunks = stream.len(),
                        "{message}"
                    );
                } else {
                    warn!(
                        event = "job.completion_not_applied",
                        status = status.as_str(),
                        decision = answer.decision.as_str(),
                        rationale = answer.rationale.as_str(),
                        completion_checksum = completion.checksum().as_str(),
                        chunks = stream.len(),
                        "{message}: {}",
                        answer.rationale
                    );
                }
                JobOutcome::Completed {
                    status,
                    decision: answer.decision,
                }
            }
            Err(error) => {
                // Reported first; then, if the claim is still ours, it goes back to the queue
                // rather than holding this runner's capacity until its lease lapses.
                let handed = if is_claim_lost(&error) {
                    "the claim is over".to_owned()
                } else {
                    self.hand_back(
                        assignment,
                        &format!(
                            "the completion was refused: {}",
                            error.code_text().unwrap_or("error")
                        ),
                    )
                    .await
                };
                self.not_completed(
                    assignment,
                    "job.completion_failed",
                    format!(
                        "{} but the completion was refused: {error}; {handed}",
                        status.as_str()
                    ),
                )
            }
        }
    }

    /// The bound artifact, read and checked against the signed `contentHash`; `Err` says why
    /// the job must not run.
    pub(super) async fn checked_artifact(&self, assignment: &Assignment) -> Result<Value, String> {
        let artifact = self
            .client
            .job_artifact(assignment.job_id())
            .await
            .map_err(|error| format!("cannot read the bound artifact: {error}"))?;
        let signed = &assignment.envelope().subject.content_hash;
        let computed = stable_json::hash(&artifact["content"]);
        if &computed != signed {
            return Err(format!(
                "the served artifact hashes to {computed}, not the signed contentHash {signed}"
            ));
        }
        Ok(artifact)
    }

    pub(super) fn stop(&self, assignment: &Assignment, event: &str, reason: String) -> Prepared {
        Prepared::Stop(self.not_completed(assignment, event, reason))
    }

    /// Removes the job's directory, or keeps it when asked to.
    fn finish_dir(&self, job_dir: Option<JobDir>) {
        if let Some(dir) = job_dir.filter(|_| self.config.keep_work) {
            let path = dir.keep();
            info!(
                event = "job.dir_kept",
                path = %path.display(),
                "kept the job's directory {}",
                path.display()
            );
        }
    }
}

pub(super) enum Prepared {
    Complete {
        status: CompletionStatus,
        result_hash: Option<Sha256Hex>,
        summary: String,
    },
    Stop(JobOutcome),
}

/// Job ids are the server's; keep directory names to a safe alphabet anyway.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
