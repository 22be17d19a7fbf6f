//! Archive on finish: a finished job's custody bundle leaves D1 for R2, byte for byte, and D1
//! keeps the job row with a summary (issue 40; the stages are the protocol crate's
//! `edgerunner_protocol::archive`).
//!
//! # Layout
//! - `mod.rs`: [`advance`], one job's next step (run by the job's object, which serializes it
//!   with the job's late completions), and [`pass`], the cron's bounded pass over due jobs.
//! - [`bundle`]: the bundle written from D1, piece by piece (the bundle route serves it while
//!   the job is whole; the store step writes it to R2).
//! - [`record`]: what the job's other reads need from R2 (the detail's parts, where each chunk
//!   sits in the bundle), and the stream page chosen from it.
//! - [`objects`]: R2 writes (checked by R2 against their SHA-256), read-backs, reads.
//! - [`reads`]: a job's detail, stream pages and bundle, from D1 or from the archive.
//!
//! # The steps
//! **Store**: the bundle is written from D1 and hashed (in memory up to 8 MiB and sent in one
//! `put`; larger, hashed in a first pass and sent in 8 MiB parts in a second, whose hash must
//! match), under `bundles/<sha256>`; the record beside it under `records/<bundle sha256>`; both
//! are read back from R2 and hashed again ([`VerifiedObject`]); only then does one guarded statement
//! record the summary and stage `stored` on the job row. **Prune**: the job's chunks,
//! completions, events and claims are deleted in batches of at most
//! [`PRUNE_BATCH_ROWS`] per table, then stage `pruned` is recorded (the schema checks nothing is
//! left). A crash anywhere leaves the last stage written: before `stored`, the rows are all in
//! D1 and the objects (if written) are orphans a later store writes again, byte for byte, under
//! the same keys; after it, every read is served from R2, whatever rows remain.

pub(crate) mod bundle;
pub(crate) mod objects;
pub(crate) mod reads;
pub(crate) mod record;

use edgerunner_protocol::archive::{
    after_prune_batch, bundle_key, decide, record_key, ArchiveFacts, ArchiveStep, ArchiveSummary,
    ObjectDigest, ObjectHasher, PruneNext, StreamSummary, VerifiedObject, ARCHIVE_GRACE_MILLIS,
    PRUNE_BATCH_ROWS,
};
use edgerunner_protocol::stable_json::Sha256Hex;
use serde::{Deserialize, Serialize};
use worker::Env;

use crate::error::{ApiError, ApiResult};
use crate::store::{self, Db};
use bundle::{BundleWriter, ChunkSpan};
use objects::{PartsWriter, SINGLE_PUT_MAX_BYTES};
use record::{ArchiveRecord, ChunkEntry, RECORD_VERSION};

/// Prune batches one step runs at most; the rest is the next step's (the job's alarm comes
/// back at once), so that one step stays well inside a request's time.
const PRUNE_BATCHES_PER_STEP: u32 = 40;

/// When a step runs.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Mode {
    /// The job's alarm and the cron pass: a finished job is stored once its grace period is
    /// over ([`grace_ms`]).
    Due,
    /// An operator's `POST …/jobs/{id}/archive`: a finished job is stored now.
    Now,
}

/// Where a job's archive stands after a step.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Progress {
    /// The job is not finished.
    Live,
    /// Finished, in its grace period: due at this time (Unix ms).
    WaitUntil(i64),
    /// Stored, with rows still to prune: the next step goes on.
    More,
    /// Archived: stored and pruned.
    Done,
}

/// The grace period after a job's finish before its archive is due: [`ARCHIVE_GRACE_MILLIS`],
/// or on a local test server `ARCHIVE_GRACE_SECONDS` (so a test can see an alarm archive a job).
pub(crate) fn grace_ms(env: &Env) -> i64 {
    crate::platform::local_setting(
        env,
        "ARCHIVE_GRACE_SECONDS",
        ARCHIVE_GRACE_MILLIS / 1_000,
        0,
    )
    .saturating_mul(1_000)
}

/// One step of job `id`'s archive at `now`: whatever [`decide`] says it needs, the store and
/// as much of the prune as one step runs. Its job's object runs it, under its lock.
pub(crate) async fn advance(
    env: &Env,
    db: &Db,
    id: &str,
    now: i64,
    mode: Mode,
) -> ApiResult<Progress> {
    let row = store::archive::row(db, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))?;
    let org = row.organization_id.as_str();
    let facts = ArchiveFacts {
        state: row.state,
        finished_at_ms: row.finished_at,
        archive: row.stage(),
    };
    match (decide(&facts, now, grace_ms(env)), mode) {
        (ArchiveStep::Live, _) => Ok(Progress::Live),
        (ArchiveStep::WaitUntil { at_ms }, Mode::Due) => Ok(Progress::WaitUntil(at_ms)),
        (ArchiveStep::WaitUntil { .. } | ArchiveStep::Store, _) => {
            store_archive(env, db, org, id, now).await?;
            prune(db, org, id).await
        }
        (ArchiveStep::Prune, _) => prune(db, org, id).await,
        (ArchiveStep::Done, _) => Ok(Progress::Done),
    }
}

/// The store step: bundle and record to R2, read back and checked, then the summary.
async fn store_archive(env: &Env, db: &Db, org: &str, id: &str, now: i64) -> ApiResult<()> {
    let bucket = objects::bucket(env)?;
    let written = write_bundle(env, db, &bucket, org, id).await?;
    let read_back = read_whole(&bucket, &bundle_key(&written.digest.sha256)).await?;
    let bundle = VerifiedObject::bundle(&written.digest, &read_back).map_err(ApiError::internal)?;

    let record = ArchiveRecord {
        record_version: RECORD_VERSION,
        job_id: id.to_owned(),
        bundle_sha256: written.digest.sha256.as_str().to_owned(),
        detail: reads::detail_parts_from_rows(db, org, id).await?,
        chunks: written.spans.iter().map(ChunkEntry::from).collect(),
    };
    let bytes = serde_json::to_vec(&record).map_err(ApiError::internal)?;
    let mut hasher = ObjectHasher::new();
    hasher.update(&bytes);
    let digest = hasher.finish();
    let key = record_key(bundle.sha256());
    objects::put(&bucket, &key, bytes, &digest).await?;
    let read_back = read_whole(&bucket, &key).await?;
    let record =
        VerifiedObject::record(&bundle, &digest, &read_back).map_err(ApiError::internal)?;

    let summary = ArchiveSummary {
        bundle,
        record,
        stream: StreamSummary {
            chunks: written.spans.len() as u64,
            bytes: written.spans.iter().map(|s| s.payload_bytes).sum(),
            head: written
                .spans
                .last()
                .map(|s| Sha256Hex::parse(&s.checksum))
                .transpose()
                .map_err(ApiError::internal)?,
        },
        archived_at_ms: now,
    };
    if store::archive::store(db, org, id, &summary, written.basis).await? {
        Ok(())
    } else {
        // Only this job's object writes its decisions, and it runs this step under its lock,
        // so this is someone writing D1 directly: the next step writes the archive again.
        Err(ApiError::internal(format!(
            "job {id} changed while its archive was written"
        )))
    }
}

/// A bundle as written to R2: its digest, where each chunk sits in it, and what it was
/// written from.
struct WrittenBundle {
    digest: ObjectDigest,
    spans: Vec<ChunkSpan>,
    basis: store::archive::Basis,
}

/// Writes the job's bundle under its content-addressed key: from memory in one `put` when it
/// is small, else in parts from a second pass over D1 (the key is the hash of the whole).
async fn write_bundle(
    env: &Env,
    db: &Db,
    bucket: &worker::Bucket,
    org: &str,
    id: &str,
) -> ApiResult<WrittenBundle> {
    let mut writer = open_bundle(env, db, org, id).await?;
    let basis = writer.basis();
    let mut hasher = ObjectHasher::new();
    let mut spans = Vec::new();
    let mut kept = Some(Vec::new());
    while let Some(piece) = writer.next_piece().await? {
        hasher.update(&piece.bytes);
        spans.extend(piece.chunks);
        kept = kept
            .filter(|_| hasher.len() <= SINGLE_PUT_MAX_BYTES)
            .map(|mut all| {
                all.extend_from_slice(&piece.bytes);
                all
            });
    }
    let digest = hasher.finish();
    let key = bundle_key(&digest.sha256);
    match kept {
        Some(bytes) => objects::put(bucket, &key, bytes, &digest).await?,
        None => {
            let mut parts = PartsWriter::start(bucket, &key).await?;
            let mut again = open_bundle(env, db, org, id).await?;
            while let Some(piece) = again.next_piece().await? {
                parts.write(&piece.bytes).await?;
            }
            parts.finish(&digest).await?;
        }
    }
    Ok(WrittenBundle {
        digest,
        spans,
        basis,
    })
}

async fn open_bundle(env: &Env, db: &Db, org: &str, id: &str) -> ApiResult<BundleWriter> {
    BundleWriter::open(env, db, org, id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such job"))
}

/// `key` read back from R2 and hashed.
async fn read_whole(bucket: &worker::Bucket, key: &str) -> ApiResult<ObjectDigest> {
    objects::read_back(bucket, key)
        .await?
        .ok_or_else(|| ApiError::internal(format!("{key} was written but is not in R2")))
}

/// The prune step: batches until nothing is left (stage `pruned`) or the step's share is used.
async fn prune(db: &Db, org: &str, id: &str) -> ApiResult<Progress> {
    for _ in 0..PRUNE_BATCHES_PER_STEP {
        let batch = store::archive::prune_batch(db, org, id, PRUNE_BATCH_ROWS).await?;
        if after_prune_batch(&batch) == PruneNext::MarkPruned {
            // `false`: pruned already (a step that ran before this one).
            store::archive::mark_pruned(db, org, id).await?;
            return Ok(Progress::Done);
        }
    }
    Ok(Progress::More)
}
