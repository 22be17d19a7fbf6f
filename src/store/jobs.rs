//! `jobs`, `job_claims`, `stream_chunks`, `job_completions`, `completion_evidence`: the queue,
//! its claims and the custody record of each job. Writes here are issued by the job's own
//! Durable Object (the single writer), except the grant's (`crate::objects::runner::grant`, by
//! the claiming runner's object); reads serve inspection and job-bound runner reads.

use edgerunner_protocol::completion::Decision;
use edgerunner_protocol::kind::EvidenceKind;
use edgerunner_protocol::stable_json::MAX_PORTABLE_INTEGER;
use edgerunner_protocol::state::{ClaimState, JobState};
use serde::{Deserialize, Serialize};
use worker::D1PreparedStatement;

use super::{all, first, states, stmt, Arg, Db};
use crate::error::ApiResult;

#[derive(Deserialize, Serialize, Clone)]
pub(crate) struct JobRow {
    pub(crate) id: String,
    pub(crate) organization_id: String,
    pub(crate) idempotency_key: String,
    pub(crate) intent_hash: String,
    pub(crate) subject_kind: String,
    pub(crate) subject_artifact_id: String,
    pub(crate) subject_version_id: i64,
    pub(crate) subject_content_hash: String,
    pub(crate) subject_environment: String,
    pub(crate) input_hash: String,
    pub(crate) requirements: String,
    pub(crate) state: JobState,
    pub(crate) dispatch_attempt: i64,
    /// Free hand-backs among the dispatched attempts (migration 0006).
    pub(crate) released_attempts: i64,
    pub(crate) active_claim_id: Option<String>,
    pub(crate) lease_expires_at: Option<i64>,
    pub(crate) cancel_reason: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) finished_at: Option<i64>,
    /// Non-accepted completion decisions past the stored ones (migration 0004), with the
    /// latest one's checksum, decision and time. Lists do not read them (default 0 / none).
    #[serde(default)]
    pub(crate) unstored_decisions: i64,
    #[serde(default)]
    pub(crate) last_unstored_checksum: Option<String>,
    #[serde(default)]
    pub(crate) last_unstored_decision: Option<Decision>,
    #[serde(default)]
    pub(crate) last_unstored_at: Option<i64>,
    /// An admin's hold (migrations 0011, 0014): when, by whom and why; none when not held.
    /// Only the admin reads and lists read them.
    #[serde(default)]
    pub(crate) held_at: Option<i64>,
    #[serde(default)]
    pub(crate) held_by: Option<String>,
    #[serde(default)]
    pub(crate) held_reason: Option<String>,
    /// The name of the artifact it runs: read by the admin's reads (`get`, the pages), set by
    /// the enqueue from the version it binds; none elsewhere.
    #[serde(default)]
    pub(crate) subject_artifact_name: Option<String>,
}

/// Duplicate, conflict and stale decisions stored in full per job; later ones are counted on
/// the job row (the schema's `job_completions_refusals_are_bounded` holds the same number).
pub(crate) const MAX_STORED_REFUSALS: i64 = 20;

pub(super) fn select_job(db: &Db, id: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_job.sql"),
        &[id.into()],
    )
}

pub(crate) async fn get(db: &Db, org: &str, id: &str) -> ApiResult<Option<JobRow>> {
    first(
        db,
        include_str!("queries/jobs/get.sql"),
        &[org.into(), id.into()],
    )
    .await
}

pub(crate) async fn by_idempotency_key(db: &Db, org: &str, key: &str) -> ApiResult<Option<JobRow>> {
    first(
        db,
        include_str!("queries/jobs/by_idempotency_key.sql"),
        &[org.into(), key.into()],
    )
    .await
}

/// [`by_idempotency_key`] as a statement, in the organization of the API key whose hash is
/// `key_hash` (the statement scopes by the key's own lookup), to ride in the enqueue's one read.
pub(crate) fn select_by_idempotency_key_of_key(
    db: &Db,
    key_hash: &str,
    key: &str,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_by_idempotency_key_of_key.sql"),
        &[key_hash.into(), key.into()],
    )
}

/// One page of the organization's jobs ([`JobRow`]s), newest first, after `cursor`
/// (`(created_at, id)` of the last job of the previous page), of one state when `state` is given.
pub(crate) fn select_page(
    db: &Db,
    org: &str,
    state: Option<&str>,
    cursor: Option<(i64, &str)>,
    limit: i64,
) -> ApiResult<D1PreparedStatement> {
    // Past every row: ids are ASCII, and times stay below 2^53 (bind values are f64).
    let (at, id) = cursor.unwrap_or((MAX_PORTABLE_INTEGER as i64, "~"));
    match state {
        None => stmt(
            db,
            include_str!("queries/jobs_page.sql"),
            &[org.into(), at.into(), id.into(), limit.into()],
        ),
        Some(state) => stmt(
            db,
            include_str!("queries/jobs_page_in_state.sql"),
            &[org.into(), at.into(), id.into(), state.into(), limit.into()],
        ),
    }
}

#[derive(Deserialize)]
pub(crate) struct StateCount {
    pub(crate) state: JobState,
    pub(crate) count: i64,
}

/// The organization's [`StateCount`]s.
pub(crate) fn select_state_counts(db: &Db, org: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/job_state_counts.sql"),
        &[org.into()],
    )
}

/// A stored chunk with its payload (the stored JSON text, as received).
#[derive(Deserialize)]
pub(crate) struct ChunkWithPayload {
    pub(crate) dispatch_attempt: i64,
    pub(crate) sequence: i64,
    pub(crate) kind: String,
    pub(crate) claim_id: String,
    pub(crate) previous_checksum: Option<String>,
    pub(crate) payload: String,
    pub(crate) payload_hash: String,
    pub(crate) checksum: String,
    pub(crate) emitted_at: String,
    pub(crate) received_at: i64,
    /// For a page of the stream: how many chunks its range held before the byte budget cut it.
    #[serde(default)]
    pub(crate) page_rows: i64,
}

pub(crate) struct StreamPage<'a> {
    pub(crate) after: (i64, i64),
    pub(crate) attempts: (i64, i64),
    pub(crate) limit: i64,
    pub(crate) byte_budget: i64,
    pub(crate) job: &'a str,
}

/// Whether the organization has the job, and its state and attempt: one row ([`Found`]) or
/// none. Read in the same batch as a stream page, it is the state as of that page.
pub(crate) fn select_found(db: &Db, org: &str, id: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_found.sql"),
        &[org.into(), id.into()],
    )
}

#[derive(Deserialize)]
pub(crate) struct Found {
    pub(crate) state: JobState,
    pub(crate) dispatch_attempt: i64,
}

/// A page of job `org`'s `page.job`'s stream alone.
pub(crate) async fn stream_page(
    db: &Db,
    org: &str,
    page: &StreamPage<'_>,
) -> ApiResult<Vec<ChunkWithPayload>> {
    let results = super::read_batch(db, vec![select_stream_page(db, org, page)?]).await?;
    match results.first() {
        Some(result) => Ok(result.results()?),
        None => Ok(Vec::new()),
    }
}

/// A page of the job's stream ([`ChunkWithPayload`]s).
pub(crate) fn select_stream_page(
    db: &Db,
    org: &str,
    page: &StreamPage<'_>,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/stream_page.sql"),
        &[
            org.into(),
            page.job.into(),
            page.after.0.into(),
            page.after.1.into(),
            page.attempts.0.into(),
            page.attempts.1.into(),
            page.limit.into(),
            page.byte_budget.into(),
        ],
    )
}

pub(crate) struct NewJob<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) idempotency_key: &'a str,
    pub(crate) intent_hash: &'a str,
    pub(crate) subject_kind: &'a str,
    pub(crate) subject_artifact_id: &'a str,
    pub(crate) subject_version_id: i64,
    pub(crate) subject_content_hash: &'a str,
    pub(crate) subject_environment: &'a str,
    pub(crate) input_json: &'a str,
    pub(crate) input_hash: &'a str,
    pub(crate) requirements_json: &'a str,
    pub(crate) execution_kind: &'a str,
    pub(crate) runtime: &'a str,
    pub(crate) external: bool,
    pub(crate) problem_type: Option<&'a str>,
    pub(crate) tags_json: &'a str,
    /// Its queue's id (see `store::queues::register`, earlier in the batch).
    pub(crate) queue_id: &'a str,
    pub(crate) now: i64,
}

/// The new job's row, answered by the insert itself ([`JobRow`], `RETURNING`): the enqueue's
/// answer costs no read of its own.
pub(crate) fn insert(db: &Db, j: &NewJob<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/insert.sql"),
        &[
            j.id.into(),
            j.organization_id.into(),
            j.idempotency_key.into(),
            j.intent_hash.into(),
            j.subject_kind.into(),
            j.subject_artifact_id.into(),
            Arg::Int(j.subject_version_id),
            j.subject_content_hash.into(),
            j.subject_environment.into(),
            j.input_json.into(),
            j.input_hash.into(),
            j.requirements_json.into(),
            j.execution_kind.into(),
            j.runtime.into(),
            Arg::Int(i64::from(j.external)),
            j.problem_type.into(),
            j.tags_json.into(),
            Arg::Int(j.now),
            j.queue_id.into(),
        ],
    )
}

/// A version the job may bind: in the organization, of the artifact and kind named, and
/// promoted to the environment (`promoted` is 0 when it exists but was not promoted there).
#[derive(Deserialize)]
pub(crate) struct BindableVersion {
    pub(crate) content_hash: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) promoted: i64,
}

/// The [`BindableVersion`] named, in the organization of the API key whose hash is `key_hash`
/// (the statement scopes by the key's own lookup).
pub(crate) fn select_bindable_version_of_key(
    db: &Db,
    key_hash: &str,
    artifact: &str,
    version: i64,
    environment: &str,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_bindable_version_of_key.sql"),
        &[
            key_hash.into(),
            artifact.into(),
            version.into(),
            environment.into(),
        ],
    )
}

// ------------------------------------------------------------------------------------------
// Matching: the claim's candidate query (see the jobs_queue index in the migration).
// ------------------------------------------------------------------------------------------

/// Queued jobs of one (kind, runtime, external) in queue order, after a keyset cursor, as
/// [`JobRow`]s. `state = 'queued'` is a literal so that SQLite can use the partial index; the
/// range is searched on the index, and only the rows it yields are read.
pub(super) fn candidates(
    db: &Db,
    org: &str,
    kind: &str,
    runtime: &str,
    external: bool,
    after: Option<(i64, &str)>,
    limit: i64,
) -> ApiResult<D1PreparedStatement> {
    let (after_at, after_id) = after.unwrap_or((i64::MIN, ""));
    stmt(
        db,
        include_str!("queries/claim_candidates.sql"),
        &[
            org.into(),
            kind.into(),
            runtime.into(),
            Arg::Int(i64::from(external)),
            Arg::Int(after_at),
            after_id.into(),
            limit.into(),
        ],
    )
}

// ------------------------------------------------------------------------------------------
// Claims, chunks, completions
// ------------------------------------------------------------------------------------------

/// A claim as a retried request finds it (`objects::runner::ClaimGrant::replayed`).
#[derive(Deserialize)]
pub(crate) struct ClaimAnswer {
    pub(crate) id: String,
    pub(crate) job_id: String,
    pub(crate) runner_id: String,
    pub(crate) dispatch_attempt: i64,
    pub(crate) issued_at: i64,
    pub(crate) expires_at: i64,
    pub(crate) lease_expires_at: i64,
    pub(crate) signed_job: Option<String>,
}

#[derive(Deserialize, Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClaimRow {
    pub(crate) id: String,
    pub(crate) runner_id: String,
    pub(crate) dispatch_attempt: i64,
    pub(crate) state: ClaimState,
    pub(crate) key_id: String,
    pub(crate) issued_at: i64,
    pub(crate) expires_at: i64,
    pub(crate) lease_expires_at: i64,
    pub(crate) started_at: Option<i64>,
    pub(crate) ended_at: Option<i64>,
    pub(crate) end_reason: Option<String>,
    #[serde(default)]
    pub(crate) last_heartbeat_at: Option<i64>,
}

pub(crate) fn select_claims(db: &Db, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_claims.sql"),
        &[job.into()],
    )
}

#[derive(Deserialize, Clone)]
pub(crate) struct ChunkHeadRow {
    pub(crate) sequence: i64,
    pub(crate) checksum: String,
    /// The attempt's payload bytes through this chunk (NULL for chunks older than 0004).
    pub(crate) stream_bytes: Option<i64>,
}

/// The newest chunks of the job's current attempt, newest first (the chain head and the
/// recent checksums the duplicate check remembers).
pub(super) fn select_stream_head(db: &Db, job: &str, limit: i64) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_stream_head.sql"),
        &[job.into(), limit.into()],
    )
}

#[derive(Deserialize, Clone)]
pub(crate) struct AcceptedRow {
    pub(crate) dispatch_attempt: i64,
    pub(crate) completion_checksum: String,
}

pub(super) fn select_accepted(db: &Db, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_accepted.sql"),
        &[job.into()],
    )
}

/// How many non-accepted decisions the job has stored ([`StoredRefusals`]).
pub(super) fn select_stored_refusals(db: &Db, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_stored_refusals.sql"),
        &[job.into(), Decision::Accepted.as_str().into()],
    )
}

#[derive(Deserialize)]
pub(crate) struct StoredRefusals {
    pub(crate) stored: i64,
}

/// A stream chunk, under the job's object (the chain and limit triggers check it again).
pub(crate) struct NewChunk<'a> {
    pub(crate) job_id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) claim_id: &'a str,
    pub(crate) dispatch_attempt: i64,
    pub(crate) sequence: i64,
    pub(crate) kind: &'a str,
    pub(crate) previous_checksum: Option<&'a str>,
    pub(crate) payload: &'a str,
    pub(crate) payload_hash: &'a str,
    pub(crate) checksum: &'a str,
    pub(crate) emitted_at: &'a str,
    pub(crate) received_at: i64,
    /// The attempt's payload bytes through this chunk.
    pub(crate) stream_bytes: i64,
}

pub(crate) fn insert_chunk(db: &Db, c: &NewChunk<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/insert_chunk.sql"),
        &[
            c.job_id.into(),
            c.organization_id.into(),
            c.claim_id.into(),
            c.dispatch_attempt.into(),
            c.sequence.into(),
            c.kind.into(),
            c.previous_checksum.into(),
            c.payload.into(),
            c.payload_hash.into(),
            c.checksum.into(),
            c.emitted_at.into(),
            c.received_at.into(),
            c.stream_bytes.into(),
        ],
    )
}

/// Counts a non-accepted decision past [`MAX_STORED_REFUSALS`] on the job row.
pub(crate) fn count_unstored_decision(
    db: &Db,
    job: &str,
    decision: &str,
    checksum: &str,
    now: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/count_unstored_decision.sql"),
        &[job.into(), decision.into(), checksum.into(), now.into()],
    )
}

/// [`count_unstored_decision`] for a job whose row moved to `archived_jobs` (its archive is
/// pruned).
pub(crate) fn count_unstored_decision_archived(
    db: &Db,
    job: &str,
    decision: &str,
    checksum: &str,
    now: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/count_unstored_decision_archived.sql"),
        &[job.into(), decision.into(), checksum.into(), now.into()],
    )
}

#[derive(Deserialize)]
pub(crate) struct ChunkRow {
    pub(crate) dispatch_attempt: i64,
    pub(crate) sequence: i64,
    pub(crate) kind: String,
    pub(crate) previous_checksum: Option<String>,
    pub(crate) payload_hash: String,
    pub(crate) checksum: String,
    pub(crate) emitted_at: String,
    pub(crate) received_at: i64,
    pub(crate) claim_id: String,
}

/// The first `limit` chunks of the job's stream without payloads ([`ChunkRow`]s), in order: a
/// range of the primary key. The rest is read with `GET …/stream?after=`.
pub(crate) fn select_chunk_heads(
    db: &Db,
    org: &str,
    job: &str,
    limit: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_chunk_heads.sql"),
        &[org.into(), job.into(), limit.into()],
    )
}

/// Each attempt's stream in sum ([`StreamTotal`]): its chunk count and payload bytes, read from
/// its last chunk (one primary-key seek per attempt).
pub(crate) fn select_stream_totals(
    db: &Db,
    org: &str,
    job: &str,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        // Attempts are 1–8 (a CHECK on job_claims; every dispatch, hand-backs included): one
        // seek of the primary key per attempt, never a scan.
        include_str!("queries/jobs/select_stream_totals.sql"),
        &[
            org.into(),
            job.into(),
            i64::from(edgerunner_protocol::recovery::MAX_DISPATCHES).into(),
        ],
    )
}

#[derive(Deserialize)]
pub(crate) struct StreamTotal {
    pub(crate) dispatch_attempt: i64,
    pub(crate) chunks: i64,
    pub(crate) stream_bytes: Option<i64>,
    pub(crate) last_checksum: String,
}

#[derive(Deserialize)]
pub(crate) struct CompletionRow {
    pub(crate) id: String,
    pub(crate) claim_id: String,
    pub(crate) runner_id: String,
    pub(crate) dispatch_attempt: i64,
    pub(crate) decision: Decision,
    pub(crate) rationale: String,
    pub(crate) completion_checksum: String,
    pub(crate) status: String,
    pub(crate) input_hash: String,
    pub(crate) result_hash: Option<String>,
    pub(crate) final_stream_checksum: Option<String>,
    pub(crate) evidence: String,
    pub(crate) reported_costs: Option<String>,
    pub(crate) completed_at: String,
    pub(crate) received_at: i64,
}

pub(crate) fn select_completions(db: &Db, org: &str, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/completions.sql"),
        &[org.into(), job.into()],
    )
}

#[derive(Deserialize)]
pub(crate) struct EvidenceRow {
    pub(crate) evidence_kind: EvidenceKind,
    pub(crate) evidence_id: String,
    pub(crate) completion_id: String,
}

pub(crate) fn select_evidence(db: &Db, org: &str, job: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/evidence.sql"),
        &[org.into(), job.into()],
    )
}

/// The input snapshot, for the runner holding the job's active claim only.
#[derive(Deserialize)]
pub(crate) struct HeldJobData {
    pub(crate) input: String,
    pub(crate) subject_version_id: i64,
    pub(crate) subject_content_hash: String,
    pub(crate) content: String,
}

pub(crate) async fn held_job_data(
    db: &Db,
    org: &str,
    job: &str,
    runner: &str,
) -> ApiResult<Option<HeldJobData>> {
    let held = states::held_job_states();
    first(
        db,
        include_str!("queries/jobs/held_job_data.sql"),
        &[
            org.into(),
            job.into(),
            runner.into(),
            ClaimState::Active.as_str().into(),
            held.as_str().into(),
        ],
    )
    .await
}

// ------------------------------------------------------------------------------------------
// The custody bundle: every link of a job's evidence chain, as the runner saw or sent it.
// ------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct BundleClaim {
    pub(crate) id: String,
    pub(crate) runner_id: String,
    pub(crate) dispatch_attempt: i64,
    pub(crate) state: ClaimState,
    pub(crate) signed_job: Option<String>,
}

pub(crate) async fn bundle_claims(db: &Db, org: &str, job: &str) -> ApiResult<Vec<BundleClaim>> {
    all(
        db,
        include_str!("queries/jobs/bundle_claims.sql"),
        &[org.into(), job.into()],
    )
    .await
}

#[derive(Deserialize)]
pub(crate) struct BundleCompletion {
    pub(crate) id: String,
    pub(crate) decision: Decision,
    pub(crate) rationale: String,
    pub(crate) received: Option<String>,
}

/// The job's completion ids, oldest first ([`CompletionId`]s): the bundle reads each whole later.
pub(crate) fn select_completion_ids(
    db: &Db,
    org: &str,
    job: &str,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/jobs/select_completion_ids.sql"),
        &[org.into(), job.into()],
    )
}

#[derive(Deserialize)]
pub(crate) struct CompletionId {
    pub(crate) id: String,
}

/// One completion of the job as received ([`BundleCompletion`]).
pub(crate) async fn bundle_completion(
    db: &Db,
    org: &str,
    job: &str,
    id: &str,
) -> ApiResult<Option<BundleCompletion>> {
    first(
        db,
        include_str!("queries/jobs/bundle_completion.sql"),
        &[org.into(), job.into(), id.into()],
    )
    .await
}

#[derive(Deserialize)]
struct Expired {
    id: String,
}

/// The ids of at most `limit` jobs whose lease expired before `now`, across every organization
/// (`org = None`: the cron trigger and `CRON_SECRET`) or within one, through the lease index.
pub(crate) async fn expired_leases(
    db: &Db,
    org: Option<&str>,
    now: i64,
    limit: i64,
) -> ApiResult<Vec<String>> {
    let expired: Vec<Expired> = match org {
        None => {
            all(
                db,
                include_str!("queries/expired_leases.sql"),
                &[now.into(), limit.into()],
            )
            .await?
        }
        Some(org) => {
            all(
                db,
                include_str!("queries/expired_leases_in_org.sql"),
                &[org.into(), now.into(), limit.into()],
            )
            .await?
        }
    };
    Ok(expired.into_iter().map(|e| e.id).collect())
}

/// [`ClaimAnswer`] of runner `runner`'s active claim granted for request `request_id`, if any:
/// what a retried claim answers.
pub(crate) fn select_claim_by_request(
    db: &Db,
    runner: &str,
    request_id: &str,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/claim_by_request.sql"),
        &[runner.into(), request_id.into()],
    )
}
