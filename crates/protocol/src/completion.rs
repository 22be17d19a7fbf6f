//! Completions: their checksum, their typed form, and the reconciliation decision.
//!
//! The SDK's `create_remote_runner_completion(**fields)` sends `fields` plus
//! `completionChecksum = H(fields)`, whatever the fields are. So the checksum is verified over
//! the object exactly as received minus `completionChecksum` ([`verify_completion_checksum`]),
//! unknown fields included; the typed [`Completion`] keeps those unknown fields too, so that
//! printing it gives back what the client hashed.
//!
//! # Reconciliation
//!
//! [`reconcile`] decides what a verified completion means for its job. A completion that is not
//! an error is one of four outcomes, and every one is stored with its checksum and rationale:
//!
//! 1. **Duplicate** — its checksum equals the accepted completion's: an exact replay. This is
//!    decided first, because after acceptance the claim is released and every other rule would
//!    misjudge a runner that merely retried a POST whose response it lost.
//! 2. **Stale** — it comes from an attempt older than the job's latest dispatch, or its claim is
//!    no longer active (the lease lapsed: the job is `lost`, requeued, or was cancelled by the
//!    lapse). An older attempt is stale even when the job has an accepted completion: what
//!    matters about it is that it was superseded, not that it disagrees.
//! 3. **Conflict** — the job already has a different accepted completion (or finished without
//!    one through a path that was not a lost lease).
//! 4. **Accepted** — it is from the active claim, and binds the job's organization, the claim's
//!    runner, the job's input hash and the stream's last checksum, with a status the job may
//!    take now (only a job whose cancellation was requested may end `cancelled`).
//!
//! Errors (nothing is applied, and nothing but the refusal is recorded): an attempt that was
//! never dispatched, a claim id that is not the attempt's, evidence lists longer than
//! [`MAX_EVIDENCE_IDS`], and, on the accepting path only, a lease that lapsed at or before `now`
//! (whether or not recovery has run yet) and bindings that do not match. A stale completion is
//! recorded even if its stream checksum is outdated: its stream belonged to a superseded claim.
//!
//! The edge authenticates the runner and scopes the job to its organization before calling
//! this; [`reconcile`] is the decision, not the authorization.

use core::fmt;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::envelope::{ClaimId, DispatchAttempt, JobEnvelope, JobId, OrganizationId, RunnerId};
use crate::error_code::ErrorCode;
use crate::recovery::lease_expired;
use crate::stable_json::{self, canonical_u64, FieldError, Fields, Sha256Hex};
use crate::state::{CompletionStatus, JobInput, JobState};
use crate::time::{Timestamp, UnixMillis};

/// Evidence ids one completion may name in its three lists (`testResultIds`, `costRecordIds`,
/// `modelCallIds`) together; the run and the trace are one id each on top. Each id becomes a
/// custody row written in the accepting transaction, so the count is what that write costs.
pub const MAX_EVIDENCE_IDS: usize = 1_000;

/// The field that carries the checksum, and the one field the checksum does not cover.
pub const CHECKSUM_FIELD: &str = "completionChecksum";

/// `H(fields)` over every field except `completionChecksum`.
pub fn completion_checksum(fields: &Map<String, Value>) -> Sha256Hex {
    if fields.contains_key(CHECKSUM_FIELD) {
        let mut covered = fields.clone();
        covered.remove(CHECKSUM_FIELD);
        stable_json::hash(&Value::Object(covered))
    } else {
        stable_json::hash(&Value::Object(fields.clone()))
    }
}

/// Checks a received completion's `completionChecksum` against its other fields, as received.
pub fn verify_completion_checksum(raw: &Map<String, Value>) -> Result<Sha256Hex, CompletionError> {
    let declared = match raw.get(CHECKSUM_FIELD) {
        Some(Value::String(text)) => {
            Sha256Hex::parse(text).map_err(|error| CompletionError::Malformed {
                reason: format!("`{CHECKSUM_FIELD}` is invalid: {error}"),
            })?
        }
        Some(_) => {
            return Err(CompletionError::Malformed {
                reason: format!("`{CHECKSUM_FIELD}` must be a string"),
            })
        }
        None => {
            return Err(CompletionError::Malformed {
                reason: format!("`{CHECKSUM_FIELD}` is missing"),
            })
        }
    };
    let computed = completion_checksum(raw);
    if computed != declared {
        return Err(CompletionError::ChecksumMismatch { computed });
    }
    Ok(declared)
}

/// An evidence row id, as the client wrote it: EvalGate's ids are integers for some rows
/// (evaluation runs, test results) and strings for others (traces), so both are accepted and
/// written back in the same form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvidenceId {
    Integer(u64),
    Text(String),
}

impl EvidenceId {
    /// The id as text, the key the custody table stores (an integer and its decimal string
    /// name the same row).
    pub fn key(&self) -> String {
        match self {
            Self::Integer(number) => number.to_string(),
            Self::Text(text) => text.clone(),
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            Self::Integer(number) => Value::from(*number),
            Self::Text(text) => Value::from(text.as_str()),
        }
    }

    fn read(value: &Value) -> Option<Self> {
        match value {
            Value::Number(number) => canonical_u64(number).map(Self::Integer),
            Value::String(text)
                if !text.is_empty()
                    && text.len() <= crate::envelope::MAX_IDENTIFIER_BYTES
                    && !text.chars().any(char::is_control) =>
            {
                Some(Self::Text(text.clone()))
            }
            _ => None,
        }
    }
}

impl fmt::Display for EvidenceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Integer(number) => number.fmt(f),
            Self::Text(text) => f.write_str(text),
        }
    }
}

/// The normal EvalGate evidence a completion binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub evaluation_run_id: EvidenceId,
    pub test_result_ids: Vec<EvidenceId>,
    pub cost_record_ids: Vec<EvidenceId>,
    pub model_call_ids: Vec<EvidenceId>,
    /// `null` when the work left no trace.
    pub trace_id: Option<EvidenceId>,
    /// Fields beyond the five, kept because the checksum covers them.
    pub extra: Map<String, Value>,
}

const EVIDENCE_FIELDS: [&str; 5] = [
    "evaluationRunId",
    "testResultIds",
    "costRecordIds",
    "modelCallIds",
    "traceId",
];

impl Evidence {
    pub fn to_json(&self) -> Value {
        let ids = |ids: &[EvidenceId]| Value::Array(ids.iter().map(EvidenceId::to_json).collect());
        let mut map = self.extra.clone();
        map.insert("evaluationRunId".into(), self.evaluation_run_id.to_json());
        map.insert("testResultIds".into(), ids(&self.test_result_ids));
        map.insert("costRecordIds".into(), ids(&self.cost_record_ids));
        map.insert("modelCallIds".into(), ids(&self.model_call_ids));
        map.insert(
            "traceId".into(),
            self.trace_id
                .as_ref()
                .map_or(Value::Null, EvidenceId::to_json),
        );
        Value::Object(map)
    }

    fn read(value: &Value) -> Result<Self, FieldError> {
        let fields = Fields::of(value, "evidence.")?;
        let id = |name: &str| {
            EvidenceId::read(fields.value(name)?)
                .ok_or_else(|| fields.error(name, "must be a whole number or a non-empty string"))
        };
        let ids = |name: &str| -> Result<Vec<EvidenceId>, FieldError> {
            let Value::Array(items) = fields.value(name)? else {
                return Err(fields.error(name, "must be a list of ids"));
            };
            let mut seen = BTreeSet::new();
            let mut ids = Vec::with_capacity(items.len());
            for item in items {
                let id = EvidenceId::read(item).ok_or_else(|| {
                    fields.error(name, "must hold only whole numbers and non-empty strings")
                })?;
                // Each evidence row is attached once: naming it twice is a mistake the custody
                // table would otherwise report as a constraint failure.
                if !seen.insert(id.key()) {
                    return Err(fields.error(name, &format!("lists {id} twice")));
                }
                ids.push(id);
            }
            Ok(ids)
        };
        let trace_id = match fields.value("traceId")? {
            Value::Null => None,
            _ => Some(id("traceId")?),
        };
        Ok(Self {
            evaluation_run_id: id("evaluationRunId")?,
            test_result_ids: ids("testResultIds")?,
            cost_record_ids: ids("costRecordIds")?,
            model_call_ids: ids("modelCallIds")?,
            trace_id,
            extra: unknown_fields(fields.map(), &EVIDENCE_FIELDS),
        })
    }
}

fn unknown_fields(map: &Map<String, Value>, known: &[&str]) -> Map<String, Value> {
    map.iter()
        .filter(|(key, _)| !known.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// The fields of a completion, before its checksum is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletionFields {
    pub job_id: JobId,
    pub claim_id: ClaimId,
    pub runner_id: RunnerId,
    pub organization_id: OrganizationId,
    pub dispatch_attempt: DispatchAttempt,
    pub status: CompletionStatus,
    pub input_hash: Sha256Hex,
    /// Required when `status` is `succeeded`; `null` allowed for `failed` and `cancelled`.
    pub result_hash: Option<Sha256Hex>,
    /// The stream's last checksum; `null` when nothing was streamed.
    pub final_stream_checksum: Option<Sha256Hex>,
    pub evidence: Evidence,
    pub completed_at: Timestamp,
    /// Fields beyond the SDK's, kept because the checksum covers them.
    pub extra: Map<String, Value>,
}

const COMPLETION_FIELDS: [&str; 12] = [
    "jobId",
    "claimId",
    "runnerId",
    "organizationId",
    "dispatchAttempt",
    "status",
    "inputHash",
    "resultHash",
    "finalStreamChecksum",
    "evidence",
    "completedAt",
    CHECKSUM_FIELD,
];

impl CompletionFields {
    /// The completion of `envelope`'s claim: its job, claim, runner, organization, attempt and
    /// input hash exactly as the envelope signed them (the server refuses any other), with the
    /// outcome given here.
    pub fn for_claim(
        envelope: &JobEnvelope,
        status: CompletionStatus,
        result_hash: Option<Sha256Hex>,
        final_stream_checksum: Option<Sha256Hex>,
        evidence: Evidence,
        completed_at: Timestamp,
    ) -> Self {
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
            completed_at,
            extra: Map::new(),
        }
    }

    /// The fields as the SDK sends them, without `completionChecksum`.
    pub fn to_map(&self) -> Map<String, Value> {
        let optional = |hash: &Option<Sha256Hex>| hash.clone().map_or(Value::Null, Value::from);
        let mut map = self.extra.clone();
        map.insert("jobId".into(), self.job_id.clone().into());
        map.insert("claimId".into(), self.claim_id.clone().into());
        map.insert("runnerId".into(), self.runner_id.clone().into());
        map.insert("organizationId".into(), self.organization_id.clone().into());
        map.insert("dispatchAttempt".into(), self.dispatch_attempt.into());
        map.insert("status".into(), self.status.as_str().into());
        map.insert("inputHash".into(), self.input_hash.clone().into());
        map.insert("resultHash".into(), optional(&self.result_hash));
        map.insert(
            "finalStreamChecksum".into(),
            optional(&self.final_stream_checksum),
        );
        map.insert("evidence".into(), self.evidence.to_json());
        map.insert("completedAt".into(), self.completed_at.as_str().into());
        map
    }

    fn read(fields: &Fields<'_>) -> Result<Self, CompletionError> {
        let malformed = |error: FieldError| CompletionError::Malformed {
            reason: error.to_string(),
        };
        let status_text = fields.str("status").map_err(malformed)?;
        let status =
            CompletionStatus::parse(status_text).ok_or_else(|| CompletionError::UnknownStatus {
                status: status_text.to_owned(),
            })?;
        let result_hash = fields
            .nullable_parsed("resultHash", Sha256Hex::parse)
            .map_err(malformed)?;
        if status == CompletionStatus::Succeeded && result_hash.is_none() {
            return Err(CompletionError::Malformed {
                reason: "`resultHash` is required when status is succeeded".into(),
            });
        }
        // Counted before any id is parsed, so an oversized list costs no more than its length.
        if let Ok(Value::Object(evidence)) = fields.value("evidence") {
            let count: usize = ["testResultIds", "costRecordIds", "modelCallIds"]
                .iter()
                .filter_map(|name| evidence.get(*name).and_then(Value::as_array))
                .map(Vec::len)
                .sum();
            if count > MAX_EVIDENCE_IDS {
                return Err(CompletionError::EvidenceLimit {
                    count,
                    max: MAX_EVIDENCE_IDS,
                });
            }
        }
        let read = || -> Result<Self, FieldError> {
            Ok(Self {
                job_id: fields.parsed("jobId", JobId::parse)?,
                claim_id: fields.parsed("claimId", ClaimId::parse)?,
                runner_id: fields.parsed("runnerId", RunnerId::parse)?,
                organization_id: fields.parsed("organizationId", OrganizationId::parse)?,
                dispatch_attempt: DispatchAttempt::read(fields, "dispatchAttempt")?,
                status,
                input_hash: fields.parsed("inputHash", Sha256Hex::parse)?,
                result_hash,
                final_stream_checksum: fields
                    .nullable_parsed("finalStreamChecksum", Sha256Hex::parse)?,
                evidence: Evidence::read(fields.value("evidence")?)?,
                completed_at: fields.parsed("completedAt", Timestamp::parse)?,
                extra: unknown_fields(fields.map(), &COMPLETION_FIELDS),
            })
        };
        read().map_err(malformed)
    }
}

/// A completion whose checksum is known to cover its fields: made by [`Completion::seal`] or
/// read by [`Completion::from_json`], and immutable after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    fields: CompletionFields,
    checksum: Sha256Hex,
}

impl Completion {
    /// Attaches the checksum (what `create_remote_runner_completion` does), for Rust runners.
    pub fn seal(fields: CompletionFields) -> Self {
        let checksum = completion_checksum(&fields.to_map());
        Self { fields, checksum }
    }

    /// Reads a received completion: verifies its checksum over the fields as received, then
    /// parses them. Integers must be plain digits, so that the parsed form prints back to what
    /// was hashed.
    pub fn from_json(value: &Value) -> Result<Self, CompletionError> {
        let fields = Fields::of(value, "").map_err(|error| CompletionError::Malformed {
            reason: error.to_string(),
        })?;
        let checksum = verify_completion_checksum(fields.map())?;
        Ok(Self {
            fields: CompletionFields::read(&fields)?,
            checksum,
        })
    }

    /// The wire form, `completionChecksum` included.
    pub fn to_json(&self) -> Value {
        let mut map = self.fields.to_map();
        map.insert(CHECKSUM_FIELD.into(), self.checksum.clone().into());
        Value::Object(map)
    }

    pub fn fields(&self) -> &CompletionFields {
        &self.fields
    }

    pub fn checksum(&self) -> &Sha256Hex {
        &self.checksum
    }
}

/// What reconciliation needs to know about the job a completion names, at `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobCompletionView {
    /// The instant the completion is decided at (the active claim's lease is read against it).
    pub now: UnixMillis,
    pub organization_id: OrganizationId,
    pub state: JobState,
    /// Attempts dispatched so far (0 while the job has never been claimed).
    pub dispatch_attempt: u32,
    pub input_hash: Sha256Hex,
    /// The claim that may complete, while the job is claimed, running or cancel-requested.
    pub active_claim: Option<ActiveClaim>,
    /// The completion already accepted for the job, if any.
    pub accepted: Option<AcceptedCompletion>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveClaim {
    pub claim_id: ClaimId,
    pub runner_id: RunnerId,
    pub attempt: DispatchAttempt,
    /// The stream's last stored checksum (`None` before the first chunk).
    pub stream_checksum: Option<Sha256Hex>,
    /// When the claim's lease lapses: from that instant on it may not complete, exactly as it
    /// may no longer heartbeat or append, whether or not recovery has run yet.
    pub lease_expires_at: UnixMillis,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptedCompletion {
    pub attempt: DispatchAttempt,
    pub checksum: Sha256Hex,
}

/// What a completion means for its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Apply it: the job moves to `job_state`.
    Accepted { job_state: JobState },
    /// An exact replay of the accepted completion.
    Duplicate,
    /// The job already has a different terminal outcome.
    Conflict,
    /// From a superseded attempt or a claim that is no longer active.
    Stale,
}

crate::wire_name::wire_names! {
    /// A completion's decision by its stored and returned name (`job_completions.decision`,
    /// `decision` of a completion in the API): an [`Outcome`] without what it carries. The
    /// schema's CHECK constraint lists the same names.
    pub enum Decision: "a completion decision" {
        /// Applied: the job moved to its terminal state.
        Accepted = "accepted",
        /// An exact replay of the accepted completion.
        Duplicate = "duplicate",
        /// A different terminal outcome than the accepted one; refused.
        Conflict = "conflict",
        /// From a superseded attempt or a claim no longer active; refused.
        Stale = "stale",
    }
}

impl Outcome {
    /// The decision, by its name.
    pub fn decision(self) -> Decision {
        match self {
            Self::Accepted { .. } => Decision::Accepted,
            Self::Duplicate => Decision::Duplicate,
            Self::Conflict => Decision::Conflict,
            Self::Stale => Decision::Stale,
        }
    }

    /// The stored and returned decision name.
    pub fn as_str(self) -> &'static str {
        self.decision().as_str()
    }
}

/// A decision and the sentence that explains it to an operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciliation {
    pub outcome: Outcome,
    pub rationale: String,
}

/// Decides what `completion` means for `job`; see the module docs for the rules and their order.
pub fn reconcile(
    job: &JobCompletionView,
    completion: &Completion,
) -> Result<Reconciliation, CompletionError> {
    let fields = completion.fields();
    let attempt = fields.dispatch_attempt;
    let decided = |outcome, rationale: String| Ok(Reconciliation { outcome, rationale });

    if let Some(accepted) = &job.accepted {
        if completion.checksum() == &accepted.checksum {
            return decided(
                Outcome::Duplicate,
                format!(
                    "exact replay of the completion accepted for attempt {}; nothing changes",
                    accepted.attempt
                ),
            );
        }
        if attempt < accepted.attempt {
            return decided(
                Outcome::Stale,
                format!(
                    "attempt {attempt} was superseded; attempt {} completed the job",
                    accepted.attempt
                ),
            );
        }
        return decided(
            Outcome::Conflict,
            format!(
                "a different completion ({}) was already accepted for attempt {}",
                accepted.checksum, accepted.attempt
            ),
        );
    }
    if attempt.get() > job.dispatch_attempt {
        return Err(CompletionError::UnknownAttempt {
            received: attempt,
            dispatched: job.dispatch_attempt,
        });
    }
    if attempt.get() < job.dispatch_attempt {
        return decided(
            Outcome::Stale,
            format!(
                "attempt {attempt} was superseded by attempt {} after its lease lapsed",
                job.dispatch_attempt
            ),
        );
    }
    let claim = match (&job.active_claim, job.state) {
        (Some(claim), state) if state.is_active() => claim,
        (_, JobState::Succeeded | JobState::Failed) => {
            return decided(
                Outcome::Conflict,
                format!(
                    "the job already finished as {} without this completion",
                    job.state
                ),
            );
        }
        (_, state) => {
            return decided(
                Outcome::Stale,
                format!(
                    "the claim of attempt {attempt} is no longer active (its lease lapsed; the \
                     job is {state})"
                ),
            );
        }
    };
    if claim.attempt != attempt {
        // The active claim disagrees with the job's attempt count; trust the claim.
        if attempt < claim.attempt {
            return decided(
                Outcome::Stale,
                format!(
                    "attempt {attempt} was superseded by attempt {}",
                    claim.attempt
                ),
            );
        }
        return Err(CompletionError::UnknownAttempt {
            received: attempt,
            dispatched: claim.attempt.get(),
        });
    }
    if fields.claim_id != claim.claim_id {
        return Err(CompletionError::ClaimMismatch);
    }
    if fields.organization_id != job.organization_id {
        return Err(CompletionError::OrganizationMismatch);
    }
    if fields.runner_id != claim.runner_id {
        return Err(CompletionError::RunnerMismatch);
    }
    if lease_expired(claim.lease_expires_at.get(), job.now.get()) {
        return Err(CompletionError::LeaseExpired);
    }
    if fields.input_hash != job.input_hash {
        return Err(CompletionError::InputHashMismatch);
    }
    if fields.final_stream_checksum != claim.stream_checksum {
        return Err(CompletionError::FinalStreamChecksumMismatch {
            expected: claim.stream_checksum.clone(),
        });
    }
    let job_state = job
        .state
        .transition(JobInput::Complete(fields.status))
        .map_err(|_| CompletionError::StatusNotAllowed {
            state: job.state,
            status: fields.status,
        })?;
    decided(
        Outcome::Accepted { job_state },
        format!(
            "completion of the active claim (attempt {attempt}) accepted; the job is {job_state}"
        ),
    )
}

/// Why a completion was refused outright (nothing applied). Serializable, as
/// [`crate::chunk::ChunkError`] is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompletionError {
    Malformed {
        reason: String,
    },
    UnknownStatus {
        status: String,
    },
    ChecksumMismatch {
        computed: Sha256Hex,
    },
    /// An attempt later than any the job dispatched.
    UnknownAttempt {
        received: DispatchAttempt,
        dispatched: u32,
    },
    /// The attempt's claim has another id.
    ClaimMismatch,
    OrganizationMismatch,
    RunnerMismatch,
    InputHashMismatch,
    FinalStreamChecksumMismatch {
        expected: Option<Sha256Hex>,
    },
    /// The job cannot take this status now (e.g. `cancelled` when nobody asked to cancel).
    StatusNotAllowed {
        state: JobState,
        status: CompletionStatus,
    },
    /// The active claim's lease lapsed before the completion arrived.
    LeaseExpired,
    /// The evidence lists name more than [`MAX_EVIDENCE_IDS`] ids together.
    EvidenceLimit {
        count: usize,
        max: usize,
    },
}

impl CompletionError {
    /// The machine code of `{"error": {"code", …}}` when the edge answers this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::Malformed { .. } => ErrorCode::CompletionMalformed,
            Self::UnknownStatus { .. } => ErrorCode::CompletionStatusInvalid,
            Self::ChecksumMismatch { .. } => ErrorCode::CompletionChecksumMismatch,
            Self::UnknownAttempt { .. } => ErrorCode::CompletionAttemptUnknown,
            Self::ClaimMismatch => ErrorCode::CompletionClaimMismatch,
            Self::OrganizationMismatch => ErrorCode::CompletionOrganizationMismatch,
            Self::RunnerMismatch => ErrorCode::CompletionRunnerMismatch,
            Self::InputHashMismatch => ErrorCode::CompletionInputHashMismatch,
            Self::FinalStreamChecksumMismatch { .. } => ErrorCode::CompletionStreamChecksumMismatch,
            Self::StatusNotAllowed { .. } => ErrorCode::CompletionStatusNotAllowed,
            // The heartbeat's code for the same instant: one lease, one answer.
            Self::LeaseExpired => ErrorCode::LeaseExpired,
            Self::EvidenceLimit { .. } => ErrorCode::EvidenceLimit,
        }
    }

    /// The wire name of [`Self::error_code`].
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// 422 for a completion wrong in itself; 403 when it names an organization or runner that
    /// is not the claim's; 409 when it is well-formed but contradicts the stored job (its claim,
    /// input, stream or state).
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Malformed { .. }
            | Self::UnknownStatus { .. }
            | Self::ChecksumMismatch { .. }
            | Self::UnknownAttempt { .. }
            | Self::EvidenceLimit { .. } => 422,
            Self::OrganizationMismatch | Self::RunnerMismatch => 403,
            Self::ClaimMismatch
            | Self::InputHashMismatch
            | Self::FinalStreamChecksumMismatch { .. }
            | Self::StatusNotAllowed { .. }
            | Self::LeaseExpired => 409,
        }
    }
}

impl fmt::Display for CompletionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { reason } => write!(f, "completion is malformed: {reason}"),
            Self::UnknownStatus { status } => write!(
                f,
                "completion status {status:?} is not succeeded, failed or cancelled"
            ),
            Self::ChecksumMismatch { computed } => write!(
                f,
                "completionChecksum does not match the completion's fields (they hash to \
                 {computed})"
            ),
            Self::UnknownAttempt {
                received,
                dispatched,
            } => write!(
                f,
                "attempt {received} was never dispatched (the job is at attempt {dispatched})"
            ),
            Self::ClaimMismatch => f.write_str("claimId is not the claim of this attempt"),
            Self::OrganizationMismatch => {
                f.write_str("organizationId is not the job's organization")
            }
            Self::RunnerMismatch => f.write_str("runnerId is not the runner holding the claim"),
            Self::InputHashMismatch => f.write_str("inputHash is not the job's input hash"),
            Self::FinalStreamChecksumMismatch {
                expected: Some(hash),
            } => write!(
                f,
                "finalStreamChecksum must close the stream's last stored checksum, {hash}"
            ),
            Self::FinalStreamChecksumMismatch { expected: None } => {
                f.write_str("finalStreamChecksum must be null: no chunk was stored")
            }
            Self::StatusNotAllowed { state, status } => {
                write!(f, "a {state} job cannot complete as {status}")
            }
            Self::LeaseExpired => f.write_str(
                "the claim's lease lapsed before this completion; the job will be recovered",
            ),
            Self::EvidenceLimit { count, max } => write!(
                f,
                "the evidence lists name {count} ids together; at most {max} are accepted"
            ),
        }
    }
}

impl std::error::Error for CompletionError {}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::stable_json::tests::random_value;
    use crate::testkit::{assert_refusal, check};

    #[test]
    fn decisions_round_trip_by_name() {
        crate::wire_name::assert_round_trips(Decision::ALL, Decision::as_str, Decision::parse);
        let outcomes = [
            Outcome::Accepted {
                job_state: JobState::Succeeded,
            },
            Outcome::Duplicate,
            Outcome::Conflict,
            Outcome::Stale,
        ];
        let names: Vec<&str> = outcomes.iter().map(|o| o.as_str()).collect();
        assert_eq!(names, ["accepted", "duplicate", "conflict", "stale"]);
    }

    // create_remote_runner_completion(...) from evalgate-sdk 3.15.0, printed by json.dumps.
    const SDK_COMPLETION: &str = r#"{"jobId": "job_1", "claimId": "claim_1", "runnerId": "runner_1", "organizationId": "org_1", "dispatchAttempt": 1, "status": "succeeded", "inputHash": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "resultHash": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "finalStreamChecksum": "d8832e52c5c095f96c0f4e657374d0a63cd6ce2daaea1a5c925d1aea5e117e81", "evidence": {"evaluationRunId": 42, "testResultIds": [1, 2, 3], "costRecordIds": ["cost_1"], "modelCallIds": [], "traceId": "trace-\u00e9"}, "completedAt": "2026-11-29T07:00:05.654321Z", "completionChecksum": "ccfea245aaeb9d573388c6a3a4d3f4705215aedf72f658d0ed9a53827c24ace5"}"#;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("test JSON")
    }

    fn sdk() -> Completion {
        Completion::from_json(&parse(SDK_COMPLETION)).expect("SDK completion verifies")
    }

    fn hash(text: &str) -> Sha256Hex {
        Sha256Hex::parse(text).expect("hash")
    }

    fn job() -> JobCompletionView {
        JobCompletionView {
            now: UnixMillis::new(1_900_000_000_000).expect("in range"),
            organization_id: OrganizationId::parse("org_1").expect("id"),
            state: JobState::Running,
            dispatch_attempt: 1,
            input_hash: hash(&"a".repeat(64)),
            active_claim: Some(ActiveClaim {
                claim_id: ClaimId::parse("claim_1").expect("id"),
                runner_id: RunnerId::parse("runner_1").expect("id"),
                attempt: DispatchAttempt::FIRST,
                stream_checksum: Some(hash(
                    "d8832e52c5c095f96c0f4e657374d0a63cd6ce2daaea1a5c925d1aea5e117e81",
                )),
                lease_expires_at: UnixMillis::new(2_000_000_000_000).expect("in range"),
            }),
            accepted: None,
        }
    }

    #[test]
    fn a_completion_at_or_after_its_lease_expiry_is_refused() {
        let mut at_expiry = job();
        at_expiry.now = at_expiry
            .active_claim
            .as_ref()
            .expect("claim")
            .lease_expires_at;
        assert_eq!(
            reconcile(&at_expiry, &sdk()),
            Err(CompletionError::LeaseExpired)
        );
        // A replay of an accepted completion is no lease's business.
        at_expiry.accepted = Some(AcceptedCompletion {
            attempt: DispatchAttempt::FIRST,
            checksum: sdk().checksum().clone(),
        });
        assert_eq!(
            reconcile(&at_expiry, &sdk()).map(|d| d.outcome),
            Ok(Outcome::Duplicate)
        );
    }

    #[test]
    fn evidence_lists_past_their_limit_are_refused_before_parsing() {
        let mut value = sdk().to_json();
        let many: Vec<Value> = (0..=MAX_EVIDENCE_IDS as u64).map(Value::from).collect();
        value["evidence"]["testResultIds"] = Value::Array(many[..600].to_vec());
        value["evidence"]["costRecordIds"] = Value::Array(many[600..].to_vec());
        let map = value.as_object_mut().expect("object");
        map.remove(CHECKSUM_FIELD);
        let checksum = completion_checksum(map);
        map.insert(CHECKSUM_FIELD.into(), checksum.into());
        assert_eq!(
            Completion::from_json(&value),
            Err(CompletionError::EvidenceLimit {
                count: MAX_EVIDENCE_IDS + 1,
                max: MAX_EVIDENCE_IDS,
            })
        );
        value["evidence"]["costRecordIds"] = Value::Array(many[600..MAX_EVIDENCE_IDS].to_vec());
        let map = value.as_object_mut().expect("object");
        map.remove(CHECKSUM_FIELD);
        let checksum = completion_checksum(map);
        map.insert(CHECKSUM_FIELD.into(), checksum.into());
        assert!(Completion::from_json(&value).is_ok());
    }

    fn attempt(n: u32) -> DispatchAttempt {
        DispatchAttempt::new(n).expect("positive")
    }

    /// The SDK completion with some fields changed, resealed.
    fn variant(edit: impl FnOnce(&mut CompletionFields)) -> Completion {
        let mut fields = sdk().fields().clone();
        edit(&mut fields);
        Completion::seal(fields)
    }

    #[test]
    fn completions_made_by_the_python_sdk_verify_and_print_back() {
        let completion = sdk();
        assert_eq!(
            completion.checksum().as_str(),
            "ccfea245aaeb9d573388c6a3a4d3f4705215aedf72f658d0ed9a53827c24ace5"
        );
        assert_eq!(completion.to_json(), parse(SDK_COMPLETION));
        assert_eq!(Completion::seal(completion.fields().clone()), completion);
        let evidence = &completion.fields().evidence;
        assert_eq!(evidence.evaluation_run_id, EvidenceId::Integer(42));
        assert_eq!(evidence.trace_id, Some(EvidenceId::Text("trace-é".into())));
    }

    #[test]
    fn the_checksum_covers_every_field_even_unknown_ones() {
        let mut value = parse(SDK_COMPLETION);
        value["reportedCostUsd"] = parse("0.0125");
        assert!(matches!(
            Completion::from_json(&value),
            Err(CompletionError::ChecksumMismatch { .. })
        ));
        let checksum = value.as_object().map(completion_checksum).expect("object");
        value[CHECKSUM_FIELD] = checksum.into();
        let completion = Completion::from_json(&value).expect("resealed");
        assert_eq!(
            completion.fields().extra.get("reportedCostUsd"),
            Some(&parse("0.0125"))
        );
        assert_eq!(completion.to_json(), value);
    }

    #[test]
    fn any_changed_field_breaks_the_checksum() {
        check(300, |rng| {
            let mut value = parse(SDK_COMPLETION);
            let key = rng.pick(&COMPLETION_FIELDS[..11]);
            value[*key] = random_value(rng, 2);
            if value == parse(SDK_COMPLETION) {
                return;
            }
            assert!(
                matches!(
                    Completion::from_json(&value),
                    Err(CompletionError::ChecksumMismatch { .. })
                ),
                "{key}"
            );
        });
    }

    /// `value` with its `completionChecksum` recomputed, when it is an object: what a client
    /// that builds a wrong completion with the SDK sends.
    fn resealed(mut value: Value) -> Value {
        if let Value::Object(map) = &mut value {
            let checksum = completion_checksum(map);
            map.insert(CHECKSUM_FIELD.into(), checksum.into());
        }
        value
    }

    #[test]
    fn arbitrary_completions_print_back_exactly_or_are_typed_refusals() {
        let (mut accepted, mut refused) = (0, 0);
        check(300, |rng| {
            let value = match rng.below(4) {
                0 => rng.json(3),
                1 => rng.mutate(&parse(SDK_COMPLETION)),
                _ => resealed(rng.mutate(&parse(SDK_COMPLETION))),
            };
            if let Value::Object(map) = &value {
                // Never panics, whatever the map holds.
                let _ = verify_completion_checksum(map);
            }
            match Completion::from_json(&value) {
                Ok(completion) => {
                    accepted += 1;
                    // The typed form keeps every field, so it prints what the client hashed.
                    assert_eq!(completion.to_json(), value);
                    assert_eq!(
                        Completion::seal(completion.fields().clone()),
                        completion.clone()
                    );
                    let printed = stable_json::stable_json(&completion.to_json());
                    assert_eq!(
                        Completion::from_json(&parse(&printed)).as_ref(),
                        Ok(&completion)
                    );
                    // Deciding on it never panics either.
                    if let Err(error) = reconcile(&job(), &completion) {
                        assert_refusal(error.code(), error.http_status(), &error);
                    }
                }
                Err(error) => {
                    refused += 1;
                    assert_refusal(error.code(), error.http_status(), &error);
                    assert!(
                        matches!(
                            error,
                            CompletionError::Malformed { .. }
                                | CompletionError::UnknownStatus { .. }
                                | CompletionError::ChecksumMismatch { .. }
                                | CompletionError::EvidenceLimit { .. }
                        ),
                        "parsing refuses only the document itself: {error:?}"
                    );
                    assert_eq!(error.http_status(), 422);
                }
            }
        });
        assert!(
            accepted > 0 && refused > 0,
            "{accepted} parsed, {refused} refused"
        );
    }

    #[test]
    fn what_is_refused_when_parsing() {
        let reseal = |edit: &dyn Fn(&mut Value)| {
            let mut value = parse(SDK_COMPLETION);
            edit(&mut value);
            let checksum = value.as_object().map(completion_checksum).expect("object");
            value[CHECKSUM_FIELD] = checksum.into();
            Completion::from_json(&value)
        };
        assert_eq!(
            reseal(&|v| v["status"] = "done".into()),
            Err(CompletionError::UnknownStatus {
                status: "done".into()
            })
        );
        assert!(reseal(&|v| v["status"] = "failed".into()).is_ok());
        assert!(reseal(&|v| {
            v["status"] = "failed".into();
            v["resultHash"] = Value::Null;
        })
        .is_ok());
        type Edit<'a> = &'a dyn Fn(&mut Value);
        let malformed: [(&str, Edit<'_>); 7] = [
            ("`resultHash` is required when status is succeeded", &|v| {
                v["resultHash"] = Value::Null
            }),
            (
                "`dispatchAttempt` must be a non-negative integer written as plain digits",
                &|v| v["dispatchAttempt"] = parse("1.0"),
            ),
            ("`evidence.testResultIds` lists 2 twice", &|v| {
                v["evidence"]["testResultIds"] = json!([2, "2"])
            }),
            (
                "`evidence.costRecordIds` must hold only whole numbers and non-empty strings",
                &|v| v["evidence"]["costRecordIds"] = json!([""]),
            ),
            (
                "`evidence.evaluationRunId` must be a whole number or a non-empty string",
                &|v| v["evidence"]["evaluationRunId"] = json!(-1),
            ),
            ("`evidence.modelCallIds` is missing", &|v| {
                v["evidence"]
                    .as_object_mut()
                    .map(|m| m.remove("modelCallIds"));
            }),
            (
                "`completedAt` is invalid: not an RFC 3339 timestamp: expected a four-digit year",
                &|v| v["completedAt"] = "now".into(),
            ),
        ];
        for (reason, edit) in malformed {
            assert_eq!(
                reseal(edit),
                Err(CompletionError::Malformed {
                    reason: reason.into()
                })
            );
        }
        assert!(reseal(&|v| v["evidence"]["traceId"] = Value::Null).is_ok());
        let mut unsealed = parse(SDK_COMPLETION);
        unsealed.as_object_mut().map(|m| m.remove(CHECKSUM_FIELD));
        assert_eq!(
            Completion::from_json(&unsealed),
            Err(CompletionError::Malformed {
                reason: "`completionChecksum` is missing".into()
            })
        );
    }

    #[test]
    fn completion_of_the_active_claim_is_accepted() {
        let decision = reconcile(&job(), &sdk()).expect("accepted");
        assert_eq!(
            decision.outcome,
            Outcome::Accepted {
                job_state: JobState::Succeeded
            }
        );
        let mut claimed = job();
        claimed.state = JobState::Claimed;
        assert!(matches!(
            reconcile(&claimed, &sdk()).map(|d| d.outcome),
            Ok(Outcome::Accepted { .. })
        ));
    }

    #[test]
    fn a_completion_during_cancel_request_wins_with_its_own_status() {
        let mut job = job();
        job.state = JobState::CancelRequested;
        assert_eq!(
            reconcile(&job, &sdk()).map(|d| d.outcome),
            Ok(Outcome::Accepted {
                job_state: JobState::Succeeded
            })
        );
        let cancelled = variant(|f| {
            f.status = CompletionStatus::Cancelled;
            f.result_hash = None;
        });
        assert_eq!(
            reconcile(&job, &cancelled).map(|d| d.outcome),
            Ok(Outcome::Accepted {
                job_state: JobState::Cancelled
            })
        );
    }

    #[test]
    fn cancelled_is_refused_when_nobody_asked_to_cancel() {
        let cancelled = variant(|f| f.status = CompletionStatus::Cancelled);
        assert_eq!(
            reconcile(&job(), &cancelled),
            Err(CompletionError::StatusNotAllowed {
                state: JobState::Running,
                status: CompletionStatus::Cancelled
            })
        );
    }

    #[test]
    fn exact_replay_of_the_accepted_completion_is_duplicate_even_after_release() {
        let mut job = job();
        job.state = JobState::Succeeded;
        job.active_claim = None;
        job.accepted = Some(AcceptedCompletion {
            attempt: DispatchAttempt::FIRST,
            checksum: sdk().checksum().clone(),
        });
        assert_eq!(
            reconcile(&job, &sdk()).map(|d| d.outcome),
            Ok(Outcome::Duplicate)
        );
        let other = variant(|f| f.result_hash = Some(hash(&"c".repeat(64))));
        assert_eq!(
            reconcile(&job, &other).map(|d| d.outcome),
            Ok(Outcome::Conflict)
        );
    }

    #[test]
    fn stale_attempt_completion_is_recorded_not_applied() {
        // Attempt 1 lost its lease; attempt 2 now holds the job.
        let mut job = job();
        job.dispatch_attempt = 2;
        if let Some(claim) = job.active_claim.as_mut() {
            claim.attempt = attempt(2);
            claim.claim_id = ClaimId::parse("claim_2").expect("id");
            claim.stream_checksum = None;
        }
        let decision = reconcile(&job, &sdk()).expect("decided");
        assert_eq!(decision.outcome, Outcome::Stale);
        assert!(
            decision.rationale.contains("superseded by attempt 2"),
            "{}",
            decision.rationale
        );

        // ... and stays stale after attempt 2 completed the job.
        job.state = JobState::Succeeded;
        job.active_claim = None;
        job.accepted = Some(AcceptedCompletion {
            attempt: attempt(2),
            checksum: hash(&"e".repeat(64)),
        });
        assert_eq!(
            reconcile(&job, &sdk()).map(|d| d.outcome),
            Ok(Outcome::Stale)
        );
    }

    #[test]
    fn a_claim_whose_lease_lapsed_is_stale_before_redispatch() {
        for state in [JobState::Lost, JobState::Queued, JobState::Cancelled] {
            let mut job = job();
            job.state = state;
            job.active_claim = None;
            assert_eq!(
                reconcile(&job, &sdk()).map(|d| d.outcome),
                Ok(Outcome::Stale),
                "{state}"
            );
        }
        let mut job = job();
        job.state = JobState::Failed;
        job.active_claim = None;
        assert_eq!(
            reconcile(&job, &sdk()).map(|d| d.outcome),
            Ok(Outcome::Conflict)
        );
    }

    #[test]
    fn refusals_on_the_accepting_path() {
        let cases: Vec<(JobCompletionView, Completion, CompletionError)> = vec![
            (
                JobCompletionView {
                    dispatch_attempt: 0,
                    active_claim: None,
                    state: JobState::Queued,
                    ..job()
                },
                sdk(),
                CompletionError::UnknownAttempt {
                    received: attempt(1),
                    dispatched: 0,
                },
            ),
            (
                job(),
                variant(|f| f.dispatch_attempt = attempt(2)),
                CompletionError::UnknownAttempt {
                    received: attempt(2),
                    dispatched: 1,
                },
            ),
            (
                job(),
                variant(|f| f.claim_id = ClaimId::parse("claim_9").expect("id")),
                CompletionError::ClaimMismatch,
            ),
            (
                job(),
                variant(|f| f.organization_id = OrganizationId::parse("org_2").expect("id")),
                CompletionError::OrganizationMismatch,
            ),
            (
                job(),
                variant(|f| f.runner_id = RunnerId::parse("runner_2").expect("id")),
                CompletionError::RunnerMismatch,
            ),
            (
                job(),
                variant(|f| f.input_hash = hash(&"f".repeat(64))),
                CompletionError::InputHashMismatch,
            ),
            (
                job(),
                variant(|f| f.final_stream_checksum = None),
                CompletionError::FinalStreamChecksumMismatch {
                    expected: job().active_claim.and_then(|c| c.stream_checksum),
                },
            ),
        ];
        for (job, completion, expected) in cases {
            assert_eq!(
                reconcile(&job, &completion),
                Err(expected.clone()),
                "{expected}"
            );
        }
    }

    #[test]
    fn an_older_attempt_is_always_stale_whatever_the_job_state() {
        check(200, |rng| {
            let state = *rng.pick(&JobState::ALL);
            let latest = 2 + rng.below(5) as u32;
            let older = 1 + rng.below(u64::from(latest - 1)) as u32;
            let mut job = job();
            job.state = state;
            job.dispatch_attempt = latest;
            if let Some(claim) = job.active_claim.as_mut() {
                claim.attempt = attempt(latest);
            }
            if rng.chance(1, 2) {
                job.accepted = Some(AcceptedCompletion {
                    attempt: attempt(latest),
                    checksum: hash(&"e".repeat(64)),
                });
            }
            let completion = variant(|f| f.dispatch_attempt = attempt(older));
            assert_eq!(
                reconcile(&job, &completion).map(|d| d.outcome),
                Ok(Outcome::Stale)
            );
        });
    }
}
