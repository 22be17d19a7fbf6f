//! Reads of a job that answer in one round trip, decoded here: what its object decides from
//! ([`JobRows`]), a claim's candidate pages with its runner's rows ([`candidate_pages`]), and
//! the rows of its detail ([`detail`]).

use edgerunner_protocol::chunk::RECENT_CHECKSUMS;
use serde::de::DeserializeOwned;
use worker::{D1PreparedStatement, D1Result};

use super::jobs::{self, AcceptedRow, ChunkHeadRow, ClaimAnswer, ClaimRow, JobRow, StoredRefusals};
use super::{read_batch, runners, Db};
use crate::error::{ApiError, ApiResult};

/// The job as its object decides from it: its row, its claims, the current attempt's newest
/// chunks (newest first), the accepted completion and the count of refusals stored in full.
/// Read in one round trip ([`read_job`]) or at the end of a write's batch, which then reads what
/// it wrote ([`job_reads`], [`JobRows::of`]).
#[derive(Clone)]
pub(crate) struct JobRows {
    pub(crate) job: JobRow,
    pub(crate) claims: Vec<ClaimRow>,
    /// The current attempt's newest chunks, newest first: the chain head and the checksums the
    /// duplicate rule remembers.
    pub(crate) head: Vec<ChunkHeadRow>,
    pub(crate) accepted: Option<AcceptedRow>,
    /// Duplicate, conflict and stale decisions stored in full so far.
    pub(crate) stored_refusals: i64,
}

/// How many statements [`job_reads`] answers.
const JOB_READS: usize = 5;

/// The statements [`JobRows`] are read with, [`JOB_READS`] of them.
pub(crate) fn job_reads(db: &Db, job: &str) -> ApiResult<Vec<D1PreparedStatement>> {
    Ok(vec![
        jobs::select_job(db, job)?,
        jobs::select_claims(db, job)?,
        jobs::select_stream_head(db, job, RECENT_CHECKSUMS as i64)?,
        jobs::select_accepted(db, job)?,
        jobs::select_stored_refusals(db, job)?,
    ])
}

impl JobRows {
    /// The rows [`job_reads`] answered (`results` starts with them); `None` when the job has
    /// no row.
    pub(crate) fn of(results: &[D1Result]) -> ApiResult<Option<Self>> {
        let [job, claims, head, accepted, refusals, ..] = results else {
            return Err(ApiError::internal("a job's read answered too few results"));
        };
        let Some(job) = job.results::<JobRow>()?.into_iter().next() else {
            return Ok(None);
        };
        Ok(Some(Self {
            job,
            claims: claims.results()?,
            head: head.results()?,
            accepted: accepted.results::<AcceptedRow>()?.into_iter().next(),
            stored_refusals: refusals
                .results::<StoredRefusals>()?
                .first()
                .map_or(0, |r| r.stored),
        }))
    }
}

/// What [`read_job`] found.
pub(crate) enum JobRead {
    Found(Box<JobRows>),
    NoJob,
    /// The runner whose credential was checked beside the read no longer holds it.
    CredentialRevoked,
}

/// Job `job` read fresh, in one round trip; with `credential`, that runner's credential
/// generation is checked in the same read (revoked when it moved on, or the runner may no
/// longer authenticate).
pub(crate) async fn read_job(
    db: &Db,
    job: &str,
    credential: Option<&runners::Credential<'_>>,
) -> ApiResult<JobRead> {
    let mut statements = job_reads(db, job)?;
    if let Some(credential) = credential {
        statements.push(runners::credential_check(
            db,
            runners::CredentialCheck::Read,
            credential.runner_id,
            credential.organization_id,
            credential.generation,
        )?);
    }
    let results = read_batch(db, statements).await?;
    if let Some(check) = results.get(JOB_READS) {
        if check.results::<serde_json::Value>()?.is_empty() {
            return Ok(JobRead::CredentialRevoked);
        }
    }
    Ok(match JobRows::of(&results)? {
        Some(rows) => JobRead::Found(Box::new(rows)),
        None => JobRead::NoJob,
    })
}

/// One candidate range's next page: queued jobs of execution kind `kind` on runtime `runtime`,
/// after `after` (`created_at`, id) in queue order.
pub(crate) struct RangePage<'a> {
    pub(crate) kind: &'a str,
    pub(crate) runtime: &'a str,
    pub(crate) after: Option<(i64, &'a str)>,
}

/// The runner a claim reads beside its first page: its row, and the claim a retried request
/// (`request_id`) already got.
pub(crate) struct Claimant<'a> {
    pub(crate) runner_id: &'a str,
    pub(crate) request_id: Option<&'a str>,
}

/// What [`candidate_pages`] read.
pub(crate) struct CandidatePages {
    /// The claimant's row (none when it was not asked for or has none).
    pub(crate) runner: Option<runners::RunnerRow>,
    /// The claim the claimant's retried request already got.
    pub(crate) granted: Option<ClaimAnswer>,
    /// Each range's page, in the order the ranges were given.
    pub(crate) pages: Vec<Vec<JobRow>>,
}

/// The next page (at most `limit` jobs) of each of `ranges`, with the `claimant`'s rows riding
/// in the same round trip.
pub(crate) async fn candidate_pages(
    db: &Db,
    org: &str,
    claimant: Option<&Claimant<'_>>,
    external: bool,
    ranges: &[RangePage<'_>],
    limit: i64,
) -> ApiResult<CandidatePages> {
    let mut statements = Vec::with_capacity(ranges.len() + 2);
    if let Some(claimant) = claimant {
        statements.push(runners::select(db, org, claimant.runner_id)?);
        if let Some(request_id) = claimant.request_id {
            statements.push(jobs::select_claim_by_request(
                db,
                claimant.runner_id,
                request_id,
            )?);
        }
    }
    for range in ranges {
        statements.push(jobs::candidates(
            db,
            org,
            range.kind,
            range.runtime,
            external,
            range.after,
            limit,
        )?);
    }
    let mut read = CandidatePages {
        runner: None,
        granted: None,
        pages: Vec::with_capacity(ranges.len()),
    };
    if statements.is_empty() {
        return Ok(read);
    }
    let results = read_batch(db, statements).await?;
    let mut results = results.iter();
    // The claimant's rows first, in the order they were asked for, then one page per range.
    if let Some(claimant) = claimant {
        read.runner = first_row(results.next(), "runner")?;
        if claimant.request_id.is_some() {
            read.granted = first_row(results.next(), "claim")?;
        }
    }
    for result in results {
        read.pages.push(result.results()?);
    }
    Ok(read)
}

/// The first row of a batch's `result` for `what`, if it has one.
fn first_row<T: DeserializeOwned>(result: Option<&D1Result>, what: &str) -> ApiResult<Option<T>> {
    let result = result.ok_or_else(|| ApiError::internal(format!("a batch answered no {what}")))?;
    Ok(result.results()?.into_iter().next())
}

/// A job's rows as its detail shows them: its claims, its first chunks (without payloads),
/// its stream totals, its timeline and its completions.
pub(crate) struct DetailRows {
    pub(crate) claims: Vec<ClaimRow>,
    /// The first chunks, at most the detail's limit.
    pub(crate) chunks: Vec<jobs::ChunkRow>,
    /// Whether the stream holds more chunks than `chunks`.
    pub(crate) more_chunks: bool,
    pub(crate) totals: Vec<jobs::StreamTotal>,
    pub(crate) timeline: Vec<super::events::EventRow>,
    pub(crate) completions: Vec<jobs::CompletionRow>,
}

/// What [`detail`] read: the job's archive row (none: no such job in the organization), its
/// rows (meaningful while its archive is not stored: the schema deletes none before) and its
/// evidence custody (which stays in D1 when the job is archived).
pub(crate) struct DetailRead {
    pub(crate) archive: Option<super::archive::ArchiveRow>,
    pub(crate) rows: DetailRows,
    pub(crate) evidence: Vec<jobs::EvidenceRow>,
}

/// How much of a job a detail shows: at most `chunks` chunks and `events` events.
#[derive(Clone, Copy)]
pub(crate) struct DetailLimits {
    pub(crate) chunks: i64,
    pub(crate) events: i64,
}

/// The statements of [`DetailRows`], in the order [`DetailRows::of`] reads them.
fn detail_statements(
    db: &Db,
    org: &str,
    id: &str,
    limits: DetailLimits,
) -> ApiResult<Vec<D1PreparedStatement>> {
    Ok(vec![
        jobs::select_claims(db, id)?,
        // One more than shown: whether there are more.
        jobs::select_chunk_heads(db, org, id, limits.chunks.saturating_add(1))?,
        jobs::select_stream_totals(db, org, id)?,
        super::events::select_for_job(db, org, id, limits.events)?,
        jobs::select_completions(db, org, id)?,
    ])
}

impl DetailRows {
    /// The rows `results` holds (starting with the detail's statements).
    fn of(results: &[D1Result], limits: DetailLimits) -> ApiResult<Self> {
        let [claims, chunks, totals, timeline, completions, ..] = results else {
            return Err(ApiError::internal(
                "a job's detail answered too few results",
            ));
        };
        let mut chunks: Vec<jobs::ChunkRow> = chunks.results()?;
        let shown = usize::try_from(limits.chunks).unwrap_or(0);
        let more_chunks = chunks.len() > shown;
        chunks.truncate(shown);
        Ok(Self {
            claims: claims.results()?,
            chunks,
            more_chunks,
            totals: totals.results()?,
            timeline: timeline.results()?,
            completions: completions.results()?,
        })
    }
}

/// Job `org`'s `id` as its detail reads it from D1, with its archive row and evidence, in one
/// round trip (one transaction: a job whose archive is not stored has all its rows in it).
pub(crate) async fn detail(
    db: &Db,
    org: &str,
    id: &str,
    limits: DetailLimits,
) -> ApiResult<DetailRead> {
    let mut statements = vec![super::archive::select_row(db, org, id)?];
    statements.extend(detail_statements(db, org, id, limits)?);
    statements.push(jobs::select_evidence(db, org, id)?);
    let results = read_batch(db, statements).await?;
    let (archive, rest) = results
        .split_first()
        .ok_or_else(|| ApiError::internal("a job's detail answered no archive row"))?;
    let rows = DetailRows::of(rest, limits)?;
    Ok(DetailRead {
        archive: first_row(Some(archive), "archive row")?,
        rows,
        evidence: rest
            .last()
            .map(D1Result::results)
            .transpose()?
            .unwrap_or_default(),
    })
}

/// Job `org`'s `id`'s detail rows alone, from D1.
pub(crate) async fn detail_rows(
    db: &Db,
    org: &str,
    id: &str,
    limits: DetailLimits,
) -> ApiResult<DetailRows> {
    let results = read_batch(db, detail_statements(db, org, id, limits)?).await?;
    DetailRows::of(&results, limits)
}

/// What [`stream_page`] read, as of one transaction: whether the organization has the job
/// (and its state and attempt then), the page's chunks, and the job's archive row (a job whose
/// archive is not stored has all its chunks in the page's read).
pub(crate) struct StreamPageRead {
    pub(crate) job: Option<jobs::Found>,
    pub(crate) chunks: Vec<jobs::ChunkWithPayload>,
    pub(crate) archive: Option<super::archive::ArchiveRow>,
}

/// A page of job `org`'s `page.job`'s stream with the job's state and archive row, in one
/// round trip.
pub(crate) async fn stream_page(
    db: &Db,
    org: &str,
    page: &jobs::StreamPage<'_>,
) -> ApiResult<StreamPageRead> {
    let results = read_batch(
        db,
        vec![
            jobs::select_found(db, org, page.job)?,
            jobs::select_stream_page(db, org, page)?,
            super::archive::select_row(db, org, page.job)?,
        ],
    )
    .await?;
    let [found, chunks, archive] = results.as_slice() else {
        return Err(ApiError::internal(
            "a stream page answered other than three results",
        ));
    };
    Ok(StreamPageRead {
        job: first_row(Some(found), "job")?,
        chunks: chunks.results()?,
        archive: first_row(Some(archive), "archive row")?,
    })
}

/// Where a job's custody bundle ends, as of one transaction: each attempt's stream totals and
/// the job's completion ids, oldest first.
pub(crate) struct BundleExtent {
    pub(crate) totals: Vec<jobs::StreamTotal>,
    pub(crate) completions: Vec<jobs::CompletionId>,
}

/// Job `org`'s `id`'s [`BundleExtent`], in one round trip.
pub(crate) async fn bundle_extent(db: &Db, org: &str, id: &str) -> ApiResult<BundleExtent> {
    let results = read_batch(
        db,
        vec![
            jobs::select_stream_totals(db, org, id)?,
            jobs::select_completion_ids(db, org, id)?,
        ],
    )
    .await?;
    let [totals, completions] = results.as_slice() else {
        return Err(ApiError::internal(
            "a bundle's extent answered other than two results",
        ));
    };
    Ok(BundleExtent {
        totals: totals.results()?,
        completions: completions.results()?,
    })
}

/// The version an enqueue binds, named by the caller.
pub(crate) struct Binding<'a> {
    pub(crate) artifact: &'a str,
    pub(crate) version: i64,
    pub(crate) environment: &'a str,
}

/// What an enqueue reads before it decides, scoped to the organization of the key whose hash
/// it presents: the key, the version it binds, and an earlier job under its idempotency key.
pub(crate) struct EnqueueRead {
    pub(crate) api_key: Option<super::api_keys::ApiKeyRow>,
    pub(crate) bound: Option<jobs::BindableVersion>,
    pub(crate) earlier: Option<JobRow>,
}

/// [`EnqueueRead`] for the key hashing to `key_hash`, in one round trip.
pub(crate) async fn enqueue_read(
    db: &Db,
    key_hash: &str,
    binding: &Binding<'_>,
    idempotency_key: &str,
) -> ApiResult<EnqueueRead> {
    let results = read_batch(
        db,
        vec![
            super::api_keys::select_by_hash(db, key_hash)?,
            jobs::select_bindable_version_of_key(
                db,
                key_hash,
                binding.artifact,
                binding.version,
                binding.environment,
            )?,
            jobs::select_by_idempotency_key_of_key(db, key_hash, idempotency_key)?,
        ],
    )
    .await?;
    let [api_key, bound, earlier] = results.as_slice() else {
        return Err(ApiError::internal(
            "an enqueue's read answered other than three results",
        ));
    };
    Ok(EnqueueRead {
        api_key: first_row(Some(api_key), "API key")?,
        bound: first_row(Some(bound), "version")?,
        earlier: first_row(Some(earlier), "earlier job")?,
    })
}

/// A page of a list, with the counts of the whole list by state, read in one round trip.
pub(crate) struct Page<Row, Count> {
    pub(crate) rows: Vec<Row>,
    pub(crate) counts: Vec<Count>,
}

/// The organization's jobs after `cursor` (at most `limit`, in `state` if given), and its job
/// counts by state.
pub(crate) async fn jobs_page(
    db: &Db,
    org: &str,
    state: Option<&str>,
    cursor: Option<(i64, &str)>,
    limit: i64,
) -> ApiResult<Page<JobRow, jobs::StateCount>> {
    let results = read_batch(
        db,
        vec![
            jobs::select_page(db, org, state, cursor, limit)?,
            jobs::select_state_counts(db, org)?,
        ],
    )
    .await?;
    page_of(&results)
}

/// The organization's runners after `cursor` (at most `limit`), and its runner counts by state.
pub(crate) async fn runners_page(
    db: &Db,
    org: &str,
    cursor: Option<(i64, &str)>,
    limit: i64,
) -> ApiResult<Page<runners::RunnerRow, runners::StateCount>> {
    let results = read_batch(
        db,
        vec![
            runners::select_page(db, org, cursor, limit)?,
            runners::select_state_counts(db, org)?,
        ],
    )
    .await?;
    page_of(&results)
}

fn page_of<Row: DeserializeOwned, Count: DeserializeOwned>(
    results: &[D1Result],
) -> ApiResult<Page<Row, Count>> {
    let [rows, counts] = results else {
        return Err(ApiError::internal("a page answered other than two results"));
    };
    Ok(Page {
        rows: rows.results()?,
        counts: counts.results()?,
    })
}
