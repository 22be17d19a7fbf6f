//! The job's object (`JobObject`, one per job, `id_from_name(job id)`): what it is asked
//! ([`JobOp`]), what it answers ([`JobReply`], one variant per kind of success, or
//! [`JobRefusal`], one variant per reason it says no, with every refusal's HTTP answer in
//! `From<JobRefusal> for ApiError`), and the stub the edge calls it through ([`call`], [`ask`]).
//!
//! Answers cross the object's wire as serde enums inside a `Result` (`{"Ok": {"heartbeat": …}}`,
//! `{"Err": {"claimNotActive": …}}`), externally tagged so the variant is read before its fields
//! and a chunk's or a completion's number lexemes (which the protocol hashes) reach the object
//! unbuffered and intact.
//!
//! The object itself lives beside its messages: [`object`] (the Durable Object: its lock, its
//! alarm, the warm-cache retry loop), `snapshot` (what an operation decides from), `commit`
//! (the batch with its assertions), and one file per operation (`heartbeat`, `stream`,
//! `complete`, `hand_back`, `cancel`, `recover`, `watch`), each a pure `decide` and a thin
//! `run`. The messages import none of them.

mod cancel;
mod commit;
mod complete;
#[cfg(test)]
mod fixtures;
mod hand_back;
mod heartbeat;
pub(crate) mod object;
mod recover;
mod snapshot;
mod stream;
mod watch;

use edgerunner_protocol::chunk::ChunkError;
use edgerunner_protocol::completion::{CompletionError, Decision};
use edgerunner_protocol::envelope::EnvelopeError;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::EvidenceKind;
use edgerunner_protocol::recovery::{RecoveryCode, ReleaseCode};
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::state::{ClaimState, JobState, StateError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use worker::{Env, Response};

use super::JOBS;
use crate::answers;
use crate::error::{json_response, ApiError, ApiResult};
use crate::secrets::SecretRefusal;
use crate::store::guards::{self, Guard};
pub(crate) use crate::store::lifecycle::EvidenceHolder;
use crate::store::RoundTrips;

/// An operation of a job's object (`JobObject`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum JobOp {
    /// A runner's object's alarm, at the first lease of a claim it granted: does this object
    /// watch that lease now (it wrote since, and its alarm is set, or the claim is over)? If
    /// not, recovery looks at the lease.
    Watch { job_id: String, attempt: i64 },
    Heartbeat {
        job_id: String,
        holder: Holder,
        claim_id: String,
        extend_seconds: i64,
    },
    /// A chunk as the runner sent it.
    Stream {
        job_id: String,
        holder: Holder,
        chunk: Value,
    },
    /// A completion as the runner sent it.
    Complete {
        job_id: String,
        holder: Holder,
        completion: Value,
    },
    /// The holder hands its claim back.
    HandBack {
        job_id: String,
        holder: Holder,
        claim_id: String,
        reason: String,
    },
    Cancel {
        job_id: String,
        organization_id: String,
        actor: String,
        reason: String,
    },
    /// Recovery's look at the lease (the alarm, the cron pass, an admin's reap).
    Recover { job_id: String, actor: String },
    /// The next step of a finished job's archive (its alarm, the cron pass, an operator).
    Archive {
        job_id: String,
        mode: crate::archive::Mode,
    },
}

impl JobOp {
    pub(crate) fn job_id(&self) -> &str {
        match self {
            JobOp::Watch { job_id, .. }
            | JobOp::Heartbeat { job_id, .. }
            | JobOp::Stream { job_id, .. }
            | JobOp::Complete { job_id, .. }
            | JobOp::HandBack { job_id, .. }
            | JobOp::Cancel { job_id, .. }
            | JobOp::Recover { job_id, .. }
            | JobOp::Archive { job_id, .. } => job_id,
        }
    }

    /// The runner a runner's operation comes from.
    pub(crate) fn holder(&self) -> Option<&Holder> {
        match self {
            JobOp::Heartbeat { holder, .. }
            | JobOp::Stream { holder, .. }
            | JobOp::Complete { holder, .. }
            | JobOp::HandBack { holder, .. } => Some(holder),
            JobOp::Watch { .. }
            | JobOp::Cancel { .. }
            | JobOp::Recover { .. }
            | JobOp::Archive { .. } => None,
        }
    }

    /// The operation's name, for the request path and logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            JobOp::Watch { .. } => "watch",
            JobOp::Heartbeat { .. } => "heartbeat",
            JobOp::Stream { .. } => "stream",
            JobOp::Complete { .. } => "complete",
            JobOp::HandBack { .. } => "release",
            JobOp::Cancel { .. } => "cancel",
            JobOp::Recover { .. } => "recover",
            JobOp::Archive { .. } => "archive",
        }
    }
}

/// The runner a credential names, as the edge verified it (signature and expiry) without
/// reading D1; its generation is checked against the runner's row by the job's object.
#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Holder {
    pub(crate) runner_id: String,
    pub(crate) organization_id: String,
    pub(crate) generation: i64,
}

/// Calls a job's object: `op` on the object of the job it names. Its answer, with a refusal
/// as the client's answer to it (`From<JobRefusal> for ApiError`).
pub(crate) async fn call(env: &Env, trips: &RoundTrips, op: &JobOp) -> ApiResult<JobReply> {
    ask(env, trips, op).await?.map_err(ApiError::from)
}

/// [`call`] for a caller that acts on a refusal itself (a runner's object asks whether the
/// job's object watches a lease): the object's answer as it decided it.
pub(crate) async fn ask(
    env: &Env,
    trips: &RoundTrips,
    op: &JobOp,
) -> ApiResult<Result<JobReply, JobRefusal>> {
    let (answer, _) = super::ask(env, trips, JOBS, op.job_id(), op.name(), op).await?;
    Ok(answer)
}

/// A job object's answer to a [`JobOp`] that it carried out.
///
/// The payloads of the variants a runner receives (grant, heartbeat, chunk, completion,
/// hand-back) serialize as exactly the JSON document the runner's SDK reads, so the edge's
/// answer is the payload itself ([`JobReply::into_response`]).
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) enum JobReply {
    Heartbeat(HeartbeatAnswer),
    /// A chunk appended to the stream.
    Appended(ChunkAccepted),
    /// A completion accepted, or a repeat of the accepted one (both `200`); a conflicting or
    /// stale one is a refusal that carries its decision.
    Completed(CompletionDecision),
    /// The holder handed its claim back.
    HandedBack(HandedBack),
    /// A cancellation applied or requested (the edge answers with the job as D1 holds it).
    Cancelled(Cancelled),
    /// Recovery looked at the job's lease.
    Recovered(Recovered),
    /// The object watches the lease a runner's object asked about (`JobOp::Watch`).
    Watching,
    /// Where the job's archive stands after the step (`JobOp::Archive`).
    Archived(crate::archive::Progress),
}

impl JobReply {
    /// The `200` a runner gets: the payload as its document.
    pub(crate) fn into_response(self) -> ApiResult<Response> {
        let document = match self {
            JobReply::Heartbeat(beat) => serde_json::to_value(beat),
            JobReply::Appended(chunk) => serde_json::to_value(chunk),
            JobReply::Completed(decision) => serde_json::to_value(decision),
            JobReply::HandedBack(handed_back) => serde_json::to_value(handed_back),
            JobReply::Cancelled(cancelled) => serde_json::to_value(cancelled),
            JobReply::Recovered(recovered) => serde_json::to_value(recovered),
            JobReply::Watching | JobReply::Archived(_) => {
                return Err(ApiError::internal(format!(
                    "{self:?} is an object's answer to an object, not a runner's"
                )))
            }
        }
        .map_err(ApiError::internal)?;
        // Through a `Value`, so the members are in the order every other body has (sorted).
        json_response(200, &document).map_err(ApiError::from)
    }
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeartbeatAnswer {
    pub(crate) cancel_requested: bool,
    pub(crate) cancel_reason: Option<String>,
    pub(crate) state: JobState,
    pub(crate) lease_expires_at: Option<String>,
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChunkAccepted {
    /// Always `true`: the SDK's answer has the member, a refusal never reaches here.
    pub(crate) accepted: bool,
    pub(crate) sequence: u64,
    pub(crate) checksum: Sha256Hex,
}

/// What reconciliation decided about a completion, as the runner reads it: the whole answer
/// of an accepted or duplicate completion, the `decision` beside the error of a refused one.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CompletionDecision {
    /// `accepted`, `duplicate`, `conflict` or `stale` (the protocol crate's `Outcome`).
    pub(crate) decision: Decision,
    pub(crate) rationale: String,
    /// The stored completion row; `null` for a refused decision past the job's storage cap.
    pub(crate) completion_id: Option<String>,
    pub(crate) job_state: JobState,
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HandedBack {
    pub(crate) job_id: String,
    pub(crate) claim_id: String,
    pub(crate) state: JobState,
    /// The protocol crate's `ReleaseDecision::code`.
    pub(crate) decision: ReleaseCode,
    pub(crate) next_attempt: Option<i64>,
    pub(crate) counted: bool,
    pub(crate) counted_attempts: Option<u32>,
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Cancelled {
    pub(crate) job_id: String,
    pub(crate) state: JobState,
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Recovered {
    pub(crate) job_id: String,
    /// The job's state now.
    pub(crate) state: JobState,
    /// The claim whose lease recovery ended; `None` when the lease was alive or there was none.
    pub(crate) lost: Option<LostClaim>,
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LostClaim {
    pub(crate) claim_id: String,
    pub(crate) runner_id: String,
    /// The protocol crate's `RecoveryDecision::code`.
    pub(crate) decision: RecoveryCode,
}

/// Why a job's object did not carry out an operation. Nothing was applied, except where a
/// variant says so. The texts a client reads are written once, in `From<JobRefusal> for
/// ApiError`; a variant carries only the facts they name.
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum JobRefusal {
    /// The job does not exist, or not in the caller's organization.
    NoSuchJob,
    /// A runner named a job it holds no claim of: it learns nothing about the job.
    NoJobForRunner,
    /// A runner named a claim that is not one of its own on this job.
    NoSuchClaim,
    /// The runner's claim exists but is over: it lost the job.
    ClaimNotActive {
        claim_id: String,
        claim_state: ClaimState,
        job_state: JobState,
        attempt: i64,
    },
    /// A heartbeat's `extendSeconds` is out of bounds.
    InvalidLease,
    /// The lease lapsed before this runner's call: recovery owns the job now.
    LeaseExpired(LeaseUse),
    /// A chunk came from a runner whose claim is over.
    StreamClaimOver,
    /// A chunk came from a runner after another attempt took the job over.
    StreamTakenOver,
    /// A completion names another runner than the one sending it.
    RunnerMismatch,
    /// A completion names no claim of its runner for this job and attempt.
    ClaimMismatch,
    /// A completion contradicting the accepted one: recorded (up to the job's cap) and refused.
    CompletionConflict(CompletionDecision),
    /// A completion from an attempt that no longer holds the job: recorded and refused.
    CompletionStale(CompletionDecision),
    /// Evidence the completion names belongs to another accepted completion: whose, when the
    /// object could find it.
    EvidenceAttached(Option<EvidenceHolder>),
    /// Evidence the completion names is not in its evaluation run (the schema's guard).
    EvidenceNotInRun,
    /// The completion's final stream checksum is not the stored stream's (the schema's guard).
    StreamNotClosed,
    /// A cancellation of a job that already finished as `state`.
    JobFinished(JobState),
    /// The runner's credential generation moved on, or the runner may no longer call.
    CredentialRevoked,
    /// A schema guard the operation has no answer of its own for refused its write; answered
    /// as the guard table says.
    Guard(#[serde(with = "guards::by_name")] &'static Guard),
    /// The protocol crate refused a chunk.
    Chunk(ChunkError),
    /// The protocol crate refused a completion.
    Completion(CompletionError),
    /// A state the job cannot leave that way, or one that does not read.
    State(StateError),
    /// A stored job that does not make an envelope.
    Envelope(EnvelopeError),
    /// The signing root may not be used.
    Secret(SecretRefusal),
    /// The archive (R2) could not be reached: `503`, try again.
    ArchiveUnavailable,
    /// The object failed; its log has the detail, the client gets a bare `500`.
    Internal,
}

/// What a runner was doing when its lease turned out to have lapsed.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) enum LeaseUse {
    Heartbeat,
    HandBack,
}

impl JobRefusal {
    /// An internal failure: the detail is logged here, the answer is a bare `500`.
    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        ApiError::internal(detail).into()
    }
}

/// Every refusal's HTTP answer. Changing a status, code or text here changes what clients
/// read (docs/openapi.json and the SDK's wire contract hold them too).
impl From<JobRefusal> for ApiError {
    fn from(refusal: JobRefusal) -> Self {
        use JobRefusal as R;
        match refusal {
            R::NoSuchJob => ApiError::not_found("no such job"),
            R::NoJobForRunner => ApiError::not_found("no such job for this runner"),
            R::NoSuchClaim => ApiError::not_found("no such claim for this runner"),
            R::ClaimNotActive {
                claim_id,
                claim_state,
                job_state,
                attempt,
            } => {
                let facts = format!(
                    "claim {claim_id} is {claim_state}; the job is {job_state} at attempt {attempt}"
                );
                ApiError::stating(answers::CLAIM_NOT_ACTIVE, facts)
            }
            R::InvalidLease => invalid_lease(),
            R::LeaseExpired(during) => ApiError::conflict(
                ErrorCode::LeaseExpired,
                match during {
                    LeaseUse::Heartbeat => {
                        "the lease lapsed before this heartbeat; the job will be recovered"
                    }
                    LeaseUse::HandBack => {
                        "the lease lapsed before this hand-back; the job will be recovered"
                    }
                },
            ),
            R::StreamClaimOver => ApiError::conflict(
                ErrorCode::StreamIdentityChanged,
                "the claim this chunk names is no longer active",
            ),
            R::StreamTakenOver => ApiError::conflict(
                ErrorCode::StreamIdentityChanged,
                "another attempt now holds this job",
            ),
            R::RunnerMismatch => ApiError::new(
                403,
                ErrorCode::RunnerMismatch,
                "a runner may complete only as itself",
            ),
            R::ClaimMismatch => ApiError::unprocessable(
                ErrorCode::ClaimMismatch,
                "the completion names no claim of this runner for this job and attempt",
            ),
            R::CompletionConflict(decision) => {
                refused_completion(ErrorCode::CompletionConflict, decision)
            }
            R::CompletionStale(decision) => {
                refused_completion(ErrorCode::CompletionStale, decision)
            }
            R::EvidenceAttached(None) => ApiError::from(answers::EVIDENCE_ALREADY_ATTACHED),
            R::EvidenceAttached(Some(h)) => {
                let facts = if h.evidence_kind == EvidenceKind::EvaluationRun {
                    format!(
                        "evaluation run {} is in the custody of job {}'s accepted completion; a completion names a run of its own",
                        h.evidence_id, h.job_id
                    )
                } else {
                    format!(
                        "{} {} is attached to job {}'s accepted completion; each evidence row belongs to one completion",
                        h.evidence_kind.as_str().replace('_', " "),
                        h.evidence_id,
                        h.job_id
                    )
                };
                ApiError::stating(answers::EVIDENCE_ALREADY_ATTACHED, facts)
            }
            R::EvidenceNotInRun => ApiError::from(answers::EVIDENCE_NOT_IN_RUN),
            R::StreamNotClosed => ApiError::from(answers::STREAM_NOT_CLOSED),
            R::JobFinished(state) => {
                ApiError::stating(answers::JOB_FINISHED, format_args!("as {state}"))
            }
            R::CredentialRevoked => ApiError::from(answers::CREDENTIAL_REVOKED),
            R::Guard(guard) => ApiError::guarded(guard),
            R::Chunk(err) => err.into(),
            R::Completion(err) => err.into(),
            R::State(err) => err.into(),
            R::Envelope(err) => err.into(),
            R::Secret(refusal) => refusal.into(),
            R::ArchiveUnavailable => crate::archive::objects::unavailable(),
            R::Internal => ApiError::failed_elsewhere(),
        }
    }
}

/// A refused completion: its rationale as the message, its decision beside the error.
fn refused_completion(code: ErrorCode, decision: CompletionDecision) -> ApiError {
    let member = serde_json::to_value(&decision);
    let refused = ApiError::conflict(code, decision.rationale);
    match member {
        Ok(member) => refused.with_member("decision", member),
        Err(err) => ApiError::internal(format!("a completion decision did not serialize: {err}")),
    }
}

/// What the job's object meets through the helpers it shares with the edge (D1, the guard
/// table): a guard that fired, or a failure. Everything else it refuses, it names itself.
impl From<ApiError> for JobRefusal {
    fn from(err: ApiError) -> Self {
        match err.guard().and_then(Guard::named) {
            Some(guard) => JobRefusal::Guard(guard),
            None if err.code() == ErrorCode::ArchiveUnavailable => JobRefusal::ArchiveUnavailable,
            None if err.code() == ErrorCode::NotFound => JobRefusal::NoSuchJob,
            None => {
                if err.status() != 500 {
                    // A refusal of the edge's kind with no variant here: our bug, made visible.
                    worker::console_error!(
                        "job object: {} {} has no refusal of its own; answered as internal",
                        err.status(),
                        err.code()
                    );
                }
                JobRefusal::Internal
            }
        }
    }
}

impl From<worker::Error> for JobRefusal {
    fn from(err: worker::Error) -> Self {
        ApiError::from(err).into()
    }
}

macro_rules! refusal_from_protocol {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for JobRefusal {
            fn from(err: $ty) -> Self {
                JobRefusal::$variant(err)
            }
        }
    )*};
}

refusal_from_protocol!(
    Chunk(ChunkError),
    Completion(CompletionError),
    State(StateError),
    Envelope(EnvelopeError),
    Secret(SecretRefusal),
);

/// A heartbeat's `extendSeconds` outside the protocol's bounds (the edge's own check of the
/// field's type answers the same).
pub(crate) fn invalid_lease() -> ApiError {
    let bounds = edgerunner_protocol::recovery::LEASE_EXTENSION_SECONDS;
    ApiError::unprocessable(
        ErrorCode::InvalidLease,
        format!(
            "extendSeconds must be an integer from {} to {}",
            bounds.start(),
            bounds.end()
        ),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What the edge makes of a refusal after it crossed the object's wire.
    fn answered(refusal: JobRefusal) -> (u16, Value) {
        let wire = serde_json::to_string(&Err::<JobReply, _>(refusal)).unwrap();
        let back: Result<JobReply, JobRefusal> = serde_json::from_str(&wire).unwrap();
        let err = ApiError::from(back.unwrap_err());
        (err.status(), err.body())
    }

    fn error(code: &str, message: &str) -> Value {
        json!({ "error": { "code": code, "message": message } })
    }

    fn decision(decided: Decision, completion_id: Option<&str>) -> CompletionDecision {
        CompletionDecision {
            decision: decided,
            rationale: "the job already accepted another result".to_owned(),
            completion_id: completion_id.map(str::to_owned),
            job_state: JobState::Succeeded,
        }
    }

    #[test]
    fn a_refused_completion_answers_with_its_decision_beside_the_error() {
        let (status, body) = answered(JobRefusal::CompletionConflict(decision(
            Decision::Conflict,
            None,
        )));
        assert_eq!(status, 409);
        assert_eq!(
            body,
            json!({
                "error": {
                    "code": "COMPLETION_CONFLICT",
                    "message": "the job already accepted another result",
                },
                "decision": {
                    "decision": "conflict",
                    "rationale": "the job already accepted another result",
                    "completionId": null,
                    "jobState": "succeeded",
                },
            })
        );
        let (status, body) = answered(JobRefusal::CompletionStale(decision(
            Decision::Stale,
            Some("cmp_1"),
        )));
        assert_eq!(status, 409);
        assert_eq!(body["error"]["code"], "COMPLETION_STALE");
        assert_eq!(body["decision"]["completionId"], "cmp_1");
        // Stable JSON, as every body: members sorted, `decision` before `error`.
        assert!(body
            .to_string()
            .starts_with(r#"{"decision":{"completionId":"cmp_1","decision":"stale""#));
    }

    #[test]
    fn refusals_answer_with_the_status_code_and_text_clients_always_read() {
        let cases = [
            (JobRefusal::NoSuchJob, 404, error("NOT_FOUND", "no such job")),
            (
                JobRefusal::NoJobForRunner,
                404,
                error("NOT_FOUND", "no such job for this runner"),
            ),
            (
                JobRefusal::NoSuchClaim,
                404,
                error("NOT_FOUND", "no such claim for this runner"),
            ),
            (
                JobRefusal::ClaimNotActive {
                    claim_id: "job_1-a1".into(),
                    claim_state: ClaimState::Lost,
                    job_state: JobState::Queued,
                    attempt: 1,
                },
                409,
                error(
                    "CLAIM_NOT_ACTIVE",
                    "the claim is not the job's active claim (claim job_1-a1 is lost; the job is queued at attempt 1)",
                ),
            ),
            (
                JobRefusal::LeaseExpired(LeaseUse::HandBack),
                409,
                error(
                    "LEASE_EXPIRED",
                    "the lease lapsed before this hand-back; the job will be recovered",
                ),
            ),
            (
                JobRefusal::StreamTakenOver,
                409,
                error("STREAM_IDENTITY_CHANGED", "another attempt now holds this job"),
            ),
            (
                JobRefusal::EvidenceAttached(Some(EvidenceHolder {
                    evidence_kind: EvidenceKind::TestResult,
                    evidence_id: "tr_1".into(),
                    job_id: "job_2".into(),
                })),
                409,
                error(
                    "EVIDENCE_ALREADY_ATTACHED",
                    "an evidence row named here is already attached to another accepted completion (test result tr_1 is attached to job job_2's accepted completion; each evidence row belongs to one completion)",
                ),
            ),
            (
                JobRefusal::EvidenceNotInRun,
                422,
                error(
                    "EVIDENCE_NOT_IN_RUN",
                    "every evidence row must exist in this organization and belong to the completion's evaluation run",
                ),
            ),
            (
                JobRefusal::JobFinished(JobState::Failed),
                409,
                error("JOB_FINISHED", "the job has finished (as failed)"),
            ),
            (
                JobRefusal::CredentialRevoked,
                401,
                error(
                    "AUTHENTICATION_FAILED",
                    "credential was revoked; exchange a new one",
                ),
            ),
            (
                JobRefusal::Chunk(ChunkError::DuplicateSequence {
                    expected: 3,
                    received: 2,
                }),
                409,
                error(
                    "STREAM_DUPLICATE_SEQUENCE",
                    &ChunkError::DuplicateSequence {
                        expected: 3,
                        received: 2,
                    }
                    .to_string(),
                ),
            ),
            (
                JobRefusal::Secret(SecretRefusal::SigningSecretTooShort),
                503,
                error(
                    "SIGNING_SECRET_TOO_SHORT",
                    "REMOTE_RUNNER_SIGNING_SECRET must be configured with at least 32 characters",
                ),
            ),
            (
                JobRefusal::Internal,
                500,
                error("INTERNAL", "internal error"),
            ),
        ];
        for (refusal, status, body) in cases {
            let what = format!("{refusal:?}");
            assert_eq!(answered(refusal), (status, body), "{what}");
        }
    }

    #[test]
    fn a_claim_that_is_over_is_answered_with_one_message_whoever_decided_it() {
        let decided = answered(JobRefusal::ClaimNotActive {
            claim_id: "job_1-a1".into(),
            claim_state: ClaimState::Released,
            job_state: JobState::Queued,
            attempt: 2,
        });
        let message = |body: &Value| body["error"]["message"].as_str().unwrap().to_owned();
        for name in [
            "claim_is_over",
            "job_claim_mismatch",
            "stream_claim_not_active",
            "completion_not_from_active_claim",
        ] {
            let guarded = answered(JobRefusal::Guard(Guard::named(name).unwrap()));
            assert_eq!(guarded.0, decided.0, "{name}");
            assert_eq!(
                guarded.1["error"]["code"], decided.1["error"]["code"],
                "{name}"
            );
            // The object adds its facts after the one message the schema's guards give.
            assert_eq!(
                message(&decided.1),
                format!(
                    "{} (claim job_1-a1 is released; the job is queued at attempt 2)",
                    message(&guarded.1)
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn a_guard_crosses_by_name_and_answers_as_the_table_says() {
        let capacity = Guard::named(guards::RUNNER_AT_CAPACITY).unwrap();
        assert_eq!(
            answered(JobRefusal::Guard(capacity)),
            (
                503,
                error(
                    "RUNNER_AT_CAPACITY",
                    "the runner holds as many claims as it may"
                )
            )
        );
        let unknown = r#"{"Err":{"guard":"no_such_guard"}}"#;
        assert!(serde_json::from_str::<Result<JobReply, JobRefusal>>(unknown).is_err());
    }

    #[test]
    fn a_runners_answers_are_the_documents_the_sdk_reads() {
        let beat = HeartbeatAnswer {
            cancel_requested: false,
            cancel_reason: None,
            state: JobState::Running,
            lease_expires_at: Some("2025-01-01T00:01:00.000Z".into()),
        };
        assert_eq!(
            serde_json::to_value(beat).unwrap(),
            json!({
                "cancelRequested": false,
                "cancelReason": null,
                "state": "running",
                "leaseExpiresAt": "2025-01-01T00:01:00.000Z",
            })
        );
        let checksum = Sha256Hex::parse(&"ab".repeat(32)).unwrap();
        let chunk = ChunkAccepted {
            accepted: true,
            sequence: 4,
            checksum: checksum.clone(),
        };
        assert_eq!(
            serde_json::to_value(chunk).unwrap(),
            json!({ "accepted": true, "sequence": 4, "checksum": checksum.as_str() })
        );
        let released = HandedBack {
            job_id: "job_1".into(),
            claim_id: "job_1-a1".into(),
            state: JobState::Queued,
            decision: ReleaseCode::ReleasedRequeued,
            next_attempt: Some(2),
            counted: false,
            counted_attempts: Some(0),
        };
        assert_eq!(
            serde_json::to_value(released).unwrap(),
            json!({
                "jobId": "job_1",
                "claimId": "job_1-a1",
                "state": "queued",
                "decision": "RELEASED_REQUEUED",
                "nextAttempt": 2,
                "counted": false,
                "countedAttempts": 0,
            })
        );
        assert_eq!(
            serde_json::to_value(decision(Decision::Accepted, Some("cmp_1"))).unwrap(),
            json!({
                "decision": "accepted",
                "rationale": "the job already accepted another result",
                "completionId": "cmp_1",
                "jobState": "succeeded",
            })
        );
    }

    #[test]
    fn a_chunk_keeps_its_number_lexemes_through_the_operation() {
        let chunk: Value = serde_json::from_str(r#"{"payload":{"t":1.000,"x":0.10}}"#).unwrap();
        let sent = chunk.to_string();
        assert!(sent.contains("1.000") && sent.contains("0.10"), "{sent}");
        let op = JobOp::Stream {
            job_id: "job_1".into(),
            holder: Holder {
                runner_id: "run_1".into(),
                organization_id: "org_1".into(),
                generation: 1,
            },
            chunk,
        };
        let text = serde_json::to_string(&op).unwrap();
        let back: JobOp = serde_json::from_str(&text).unwrap();
        let JobOp::Stream { chunk, .. } = back else {
            panic!("not a stream operation: {text}");
        };
        assert_eq!(chunk.to_string(), sent);
    }

    #[test]
    fn a_missing_field_is_an_error_not_a_default() {
        let refused = serde_json::from_value::<JobOp>(
            json!({ "heartbeat": { "jobId": "job_1", "claimId": "job_1-a1", "extendSeconds": 60 } }),
        );
        assert!(refused.is_err());
    }
}
