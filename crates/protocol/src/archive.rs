//! Archiving a finished job: its custody bundle leaves D1 for object storage (R2), byte for
//! byte, and D1 keeps the job row with a summary.
//!
//! A job's archive moves through three stages, each recorded on the job row
//! (`jobs.archive_state`, migration 0010):
//!
//! ```text
//!   (not archived) ──store──▶ stored ──prune──▶ pruned
//! ```
//!
//! - **Not archived.** The job is live, or finished less than [`ARCHIVE_GRACE_MILLIS`] ago:
//!   every row it ever wrote is in D1, and every read is served from there.
//! - **Stored.** Its bundle (the exact bytes `GET …/jobs/{id}/bundle` serves) is in R2 under
//!   its SHA-256 ([`bundle_key`]) and its record (what the job's other reads need: its timeline,
//!   where each chunk sits in the bundle) beside it ([`record_key`]), each read back and checked
//!   ([`VerifiedObject`]), and the job row carries the summary ([`ArchiveSummary`]). From here
//!   on the job's reads come from R2, and its bulky rows may be deleted; the schema refuses
//!   their deletion before.
//! - **Pruned.** No claim, chunk, completion or event of the job is left in D1 (the schema
//!   checks so when the stage is written). What stays is the job row and the evidence custody
//!   its accepted completion took (one row per evidence id: custody belongs to the evidence).
//!
//! [`decide`] says which step a job needs now, from its row alone; every caller (the job
//! object's alarm, the cron pass, an operator's run) asks it and applies the answer with writes
//! guarded by the stage, so a step run twice, or by two callers at once, changes nothing the
//! second time. A crash between steps leaves the job in the last stage written, fully readable
//! from one place or the other: rows are deleted only after the stage says the objects are
//! verified, and the stage says so only after they were read back.
//!
//! Nothing here performs I/O or reads a clock.

use core::fmt;

use sha2::{Digest as _, Sha256};

use crate::stable_json::Sha256Hex;
use crate::state::JobState;
use crate::wire_name::wire_names;

wire_names! {
    /// How far a finished job's archive has got (`jobs.archive_state`; NULL while it has not
    /// been stored). The schema's CHECK constraint lists the same names.
    pub enum ArchiveState: "an archive state" {
        /// The bundle and record are in R2, read back and checked; the rows may still be in D1.
        Stored = "stored",
        /// The job's claims, chunks, completions and events are gone from D1.
        Pruned = "pruned",
    }
}

/// How long a finished job stays whole in D1 before it is archived, in milliseconds.
///
/// A finished job is not quite frozen: the runner that finished it may repeat its completion
/// (a duplicate, after a lost answer) and a displaced attempt may still report (stale). Both
/// need a runner credential, which lives at most 10 minutes, and the SDK retries a completion
/// within one credential's life; the envelope a claim carries is valid for 5 minutes. Fifteen
/// minutes outlasts both, so the decisions a runner can still send in the ordinary course are
/// stored in full, in the bundle, before it is archived. Anything later is counted on the job
/// row (see `docs/API.md`, "Archived jobs").
pub const ARCHIVE_GRACE_MILLIS: i64 = 15 * 60 * 1000;

/// Rows of one table a prune batch deletes at most: one D1 batch stays well inside a query's
/// time limit (256 KiB chunk payloads at most), and a job of 8 × 10,000 chunks is pruned in
/// 160 batches.
pub const PRUNE_BATCH_ROWS: u32 = 500;

/// Finished jobs the cron pass archives at most per run (the backfill of an existing
/// deployment included): each costs a few R2 operations and D1 round trips, and a run must end
/// well inside the scheduled handler's time.
pub const JOBS_PER_PASS: u32 = 25;

/// The R2 key of a bundle whose bytes hash to `sha256`: content-addressed, so a bundle written
/// twice lands on the same key with the same bytes.
pub fn bundle_key(sha256: &Sha256Hex) -> String {
    format!("bundles/{sha256}")
}

/// The R2 key of the archive record of the job whose bundle hashes to `bundle_sha256`: the
/// record belongs to its bundle (it says where each chunk sits in it), and costs the job row
/// no hash of its own.
pub fn record_key(bundle_sha256: &Sha256Hex) -> String {
    format!("records/{bundle_sha256}")
}

/// What one pass over an object's bytes measured: their SHA-256 and length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectDigest {
    pub sha256: Sha256Hex,
    pub bytes: u64,
}

/// SHA-256 and length of an object's bytes, fed as they are written or read back.
#[derive(Clone, Default)]
pub struct ObjectHasher {
    sha: Sha256,
    bytes: u64,
}

impl ObjectHasher {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.sha.update(bytes);
        self.bytes += bytes.len() as u64;
    }

    /// The bytes fed so far.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    pub fn finish(self) -> ObjectDigest {
        ObjectDigest {
            sha256: Sha256Hex::from_digest(self.sha.finalize().into()),
            bytes: self.bytes,
        }
    }
}

/// Proof that an object was written under its key and read back whole: only
/// [`VerifiedObject::bundle`] and [`VerifiedObject::record`] build one, each deriving the key
/// itself, and a summary is made of two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedObject {
    key: String,
    digest: ObjectDigest,
}

impl VerifiedObject {
    /// A bundle: `written` is what was hashed while it was written under
    /// `bundle_key(written.sha256)`, `read_back` what was hashed reading that key back.
    pub fn bundle(
        written: &ObjectDigest,
        read_back: &ObjectDigest,
    ) -> Result<VerifiedObject, ArchiveError> {
        Self::check(bundle_key(&written.sha256), written, read_back)
    }

    /// The record of the verified `bundle`, written under `record_key(bundle)`.
    pub fn record(
        bundle: &VerifiedObject,
        written: &ObjectDigest,
        read_back: &ObjectDigest,
    ) -> Result<VerifiedObject, ArchiveError> {
        Self::check(record_key(bundle.sha256()), written, read_back)
    }

    fn check(
        key: String,
        written: &ObjectDigest,
        read_back: &ObjectDigest,
    ) -> Result<VerifiedObject, ArchiveError> {
        if read_back != written {
            return Err(ArchiveError::ReadBackDiffers {
                key,
                written: written.clone(),
                read_back: read_back.clone(),
            });
        }
        Ok(VerifiedObject {
            key,
            digest: written.clone(),
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn sha256(&self) -> &Sha256Hex {
        &self.digest.sha256
    }

    pub fn bytes(&self) -> u64 {
        self.digest.bytes
    }
}

/// A job's stream in sum, over every attempt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamSummary {
    pub chunks: u64,
    /// Payload bytes, as the chunks' running totals count them.
    pub bytes: u64,
    /// The checksum of the last chunk of the last attempt that streamed; `None` without a
    /// stream.
    pub head: Option<Sha256Hex>,
}

/// What the job row keeps once its archive is stored: enough to answer the job's queries
/// without its rows, and to find and check its objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSummary {
    pub bundle: VerifiedObject,
    pub record: VerifiedObject,
    pub stream: StreamSummary,
    /// When the archive was stored, in Unix milliseconds.
    pub archived_at_ms: i64,
}

/// What [`decide`] needs to know about a job: its row alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveFacts {
    pub state: JobState,
    /// When the job reached its terminal state; `None` while it has not.
    pub finished_at_ms: Option<i64>,
    pub archive: Option<ArchiveState>,
}

/// The step a job's archive needs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveStep {
    /// The job is not finished: nothing of it is archived.
    Live,
    /// Finished, inside the grace period: archive it at `at_ms`.
    WaitUntil { at_ms: i64 },
    /// Write the bundle and the record to R2, read both back and check them, then record the
    /// summary on the job row (stage `stored`).
    Store,
    /// The objects are verified: delete the job's bulky rows, [`PRUNE_BATCH_ROWS`] per table
    /// per batch, then record stage `pruned`.
    Prune,
    /// Archived: nothing left to do.
    Done,
}

/// The step `job` needs at `now_ms`, archived `grace_ms` after its finish (the deployment's
/// grace period: [`ARCHIVE_GRACE_MILLIS`] everywhere but a local test server). Pure and total.
pub fn decide(job: &ArchiveFacts, now_ms: i64, grace_ms: i64) -> ArchiveStep {
    match job.archive {
        Some(ArchiveState::Pruned) => ArchiveStep::Done,
        Some(ArchiveState::Stored) => ArchiveStep::Prune,
        None if !job.state.is_terminal() => ArchiveStep::Live,
        None => {
            // The schema holds a finish time for every terminal job; a row without one is
            // archived at once rather than never.
            let at_ms = job
                .finished_at_ms
                .map_or(i64::MIN, |finished| finished.saturating_add(grace_ms));
            if now_ms >= at_ms {
                ArchiveStep::Store
            } else {
                ArchiveStep::WaitUntil { at_ms }
            }
        }
    }
}

/// What one prune batch deleted, table by table (each at most [`PRUNE_BATCH_ROWS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PruneBatch {
    pub chunks: u32,
    pub completions: u32,
    pub events: u32,
    pub claims: u32,
}

/// After a prune batch: another, or the stage `pruned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneNext {
    /// A table gave a full batch: rows may remain.
    Again,
    /// Every table gave less than a full batch, so none has rows of the job left (the claims
    /// go last in the batch, once nothing that names them is left): record stage `pruned`.
    /// The schema checks it again.
    MarkPruned,
}

/// Whether `batch` emptied the job's rows. Pure.
pub fn after_prune_batch(batch: &PruneBatch) -> PruneNext {
    let full = |n: u32| n >= PRUNE_BATCH_ROWS;
    if full(batch.chunks) || full(batch.completions) || full(batch.events) || full(batch.claims) {
        PruneNext::Again
    } else {
        PruneNext::MarkPruned
    }
}

/// What happened to a job's archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveEvent {
    /// Its objects were verified and its summary recorded.
    Stored,
    /// Its last bulky row was deleted.
    Pruned,
}

/// The stage after `event`, from `current`. Repeating the event of the current stage changes
/// nothing (a step run twice); going back, or pruning what was never stored, is an error.
pub fn advance(
    current: Option<ArchiveState>,
    event: ArchiveEvent,
) -> Result<Option<ArchiveState>, ArchiveError> {
    match (current, event) {
        (None | Some(ArchiveState::Stored), ArchiveEvent::Stored) => Ok(Some(ArchiveState::Stored)),
        (Some(ArchiveState::Pruned), ArchiveEvent::Stored) => Ok(Some(ArchiveState::Pruned)),
        (Some(ArchiveState::Stored | ArchiveState::Pruned), ArchiveEvent::Pruned) => {
            Ok(Some(ArchiveState::Pruned))
        }
        (None, ArchiveEvent::Pruned) => Err(ArchiveError::PruneBeforeStore),
    }
}

/// Why an archive step cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveError {
    /// What was read back from the store is not what was written.
    ReadBackDiffers {
        key: String,
        written: ObjectDigest,
        read_back: ObjectDigest,
    },
    /// A job's rows may go only once its archive is stored.
    PruneBeforeStore,
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveError::ReadBackDiffers {
                key,
                written,
                read_back,
            } => write!(
                f,
                "{key} read back as {} bytes with SHA-256 {}, written as {} bytes with {}",
                read_back.bytes, read_back.sha256, written.bytes, written.sha256
            ),
            ArchiveError::PruneBeforeStore => {
                f.write_str("a job's rows may be pruned only once its archive is stored")
            }
        }
    }
}

impl std::error::Error for ArchiveError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stable_json::sha256_hex;
    use crate::wire_name::assert_round_trips;

    const FINISHED: i64 = 1_780_000_000_000;

    fn facts(state: JobState, archive: Option<ArchiveState>) -> ArchiveFacts {
        ArchiveFacts {
            state,
            finished_at_ms: state.is_terminal().then_some(FINISHED),
            archive,
        }
    }

    fn digest(bytes: &[u8]) -> ObjectDigest {
        ObjectDigest {
            sha256: sha256_hex(bytes),
            bytes: bytes.len() as u64,
        }
    }

    #[test]
    fn archive_states_travel_by_their_stored_names() {
        assert_round_trips(ArchiveState::ALL, ArchiveState::as_str, ArchiveState::parse);
        assert_eq!(ArchiveState::ALL.len(), 2);
        assert_eq!(ArchiveState::parse("archived"), None);
    }

    #[test]
    fn a_job_that_is_not_finished_is_never_archived() {
        for state in JobState::ALL.into_iter().filter(|s| !s.is_terminal()) {
            assert_eq!(
                decide(&facts(state, None), i64::MAX, 0),
                ArchiveStep::Live,
                "{state}"
            );
        }
    }

    #[test]
    fn a_finished_job_waits_out_the_grace_period_then_is_stored() {
        for state in JobState::ALL.into_iter().filter(|s| s.is_terminal()) {
            let job = facts(state, None);
            let at_ms = FINISHED + ARCHIVE_GRACE_MILLIS;
            assert_eq!(
                decide(&job, FINISHED, ARCHIVE_GRACE_MILLIS),
                ArchiveStep::WaitUntil { at_ms }
            );
            assert_eq!(
                decide(&job, at_ms - 1, ARCHIVE_GRACE_MILLIS),
                ArchiveStep::WaitUntil { at_ms }
            );
            assert_eq!(
                decide(&job, at_ms, ARCHIVE_GRACE_MILLIS),
                ArchiveStep::Store,
                "{state}"
            );
            assert_eq!(
                decide(&job, at_ms + 1, ARCHIVE_GRACE_MILLIS),
                ArchiveStep::Store
            );
        }
    }

    #[test]
    fn the_grace_period_is_the_one_given() {
        let job = facts(JobState::Succeeded, None);
        assert_eq!(
            decide(&job, FINISHED, 3_000),
            ArchiveStep::WaitUntil {
                at_ms: FINISHED + 3_000
            }
        );
        assert_eq!(decide(&job, FINISHED + 3_000, 3_000), ArchiveStep::Store);
        assert_eq!(decide(&job, FINISHED, 0), ArchiveStep::Store);
    }

    #[test]
    fn a_terminal_row_without_a_finish_time_is_stored_at_once() {
        let job = ArchiveFacts {
            state: JobState::Succeeded,
            finished_at_ms: None,
            archive: None,
        };
        assert_eq!(decide(&job, 0, ARCHIVE_GRACE_MILLIS), ArchiveStep::Store);
    }

    #[test]
    fn the_grace_period_cannot_overflow() {
        let job = ArchiveFacts {
            state: JobState::Failed,
            finished_at_ms: Some(i64::MAX - 1),
            archive: None,
        };
        assert_eq!(
            decide(&job, i64::MAX - 1, ARCHIVE_GRACE_MILLIS),
            ArchiveStep::WaitUntil { at_ms: i64::MAX }
        );
    }

    #[test]
    fn a_stored_archive_is_pruned_and_a_pruned_one_is_done_whatever_the_time() {
        for now in [i64::MIN, 0, FINISHED, i64::MAX] {
            let stored = facts(JobState::Succeeded, Some(ArchiveState::Stored));
            assert_eq!(
                decide(&stored, now, ARCHIVE_GRACE_MILLIS),
                ArchiveStep::Prune
            );
            let pruned = facts(JobState::Cancelled, Some(ArchiveState::Pruned));
            assert_eq!(
                decide(&pruned, now, ARCHIVE_GRACE_MILLIS),
                ArchiveStep::Done
            );
        }
    }

    #[test]
    fn each_step_applied_leads_to_the_next_and_ends_done() {
        let mut job = facts(JobState::Succeeded, None);
        let now = FINISHED + ARCHIVE_GRACE_MILLIS;
        let mut steps = Vec::new();
        for _ in 0..4 {
            let step = decide(&job, now, ARCHIVE_GRACE_MILLIS);
            steps.push(step);
            job.archive = match step {
                ArchiveStep::Store => advance(job.archive, ArchiveEvent::Stored).unwrap(),
                ArchiveStep::Prune => advance(job.archive, ArchiveEvent::Pruned).unwrap(),
                _ => job.archive,
            };
        }
        assert_eq!(
            steps,
            [
                ArchiveStep::Store,
                ArchiveStep::Prune,
                ArchiveStep::Done,
                ArchiveStep::Done
            ]
        );
    }

    #[test]
    fn a_step_run_twice_changes_nothing_the_second_time() {
        let stored = advance(None, ArchiveEvent::Stored).unwrap();
        assert_eq!(advance(stored, ArchiveEvent::Stored), Ok(stored));
        let pruned = advance(stored, ArchiveEvent::Pruned).unwrap();
        assert_eq!(pruned, Some(ArchiveState::Pruned));
        assert_eq!(advance(pruned, ArchiveEvent::Pruned), Ok(pruned));
        // A late "stored" (a second caller finishing its write) never takes a pruned job back.
        assert_eq!(advance(pruned, ArchiveEvent::Stored), Ok(pruned));
    }

    #[test]
    fn rows_are_never_pruned_before_the_archive_is_stored() {
        assert_eq!(
            advance(None, ArchiveEvent::Pruned),
            Err(ArchiveError::PruneBeforeStore)
        );
    }

    #[test]
    fn a_prune_batch_that_filled_any_table_goes_again() {
        let full = PRUNE_BATCH_ROWS;
        for batch in [
            PruneBatch {
                chunks: full,
                ..PruneBatch::default()
            },
            PruneBatch {
                completions: full,
                ..PruneBatch::default()
            },
            PruneBatch {
                events: full,
                chunks: 3,
                ..PruneBatch::default()
            },
            PruneBatch {
                claims: full,
                ..PruneBatch::default()
            },
        ] {
            assert_eq!(after_prune_batch(&batch), PruneNext::Again, "{batch:?}");
        }
    }

    #[test]
    fn a_prune_batch_short_in_every_table_left_nothing() {
        let short = PRUNE_BATCH_ROWS - 1;
        for batch in [
            PruneBatch::default(),
            PruneBatch {
                chunks: short,
                completions: short,
                events: short,
                claims: 8,
            },
        ] {
            assert_eq!(
                after_prune_batch(&batch),
                PruneNext::MarkPruned,
                "{batch:?}"
            );
        }
    }

    #[test]
    fn the_bundle_is_content_addressed_and_its_record_lies_beside_it() {
        let sha = sha256_hex(b"{}");
        assert_eq!(bundle_key(&sha), format!("bundles/{}", sha.as_str()));
        assert_eq!(record_key(&sha), format!("records/{}", sha.as_str()));
        assert_ne!(bundle_key(&sha), record_key(&sha));
    }

    #[test]
    fn an_object_is_verified_only_when_read_back_whole_under_its_own_key() {
        let bytes = b"{\"bundleVersion\":1}";
        let written = digest(bytes);
        let bundle = VerifiedObject::bundle(&written, &digest(bytes)).unwrap();
        assert_eq!(bundle.key(), bundle_key(&written.sha256));
        assert_eq!(bundle.sha256(), &written.sha256);
        assert_eq!(bundle.bytes(), bytes.len() as u64);

        // Read back short, or other bytes of the same length.
        for other in [
            &bytes[..bytes.len() - 1],
            b"{\"bundleVersion\":2}".as_slice(),
        ] {
            let refused = VerifiedObject::bundle(&written, &digest(other));
            assert!(
                matches!(&refused, Err(ArchiveError::ReadBackDiffers { key, .. }) if key == bundle.key()),
                "{refused:?}"
            );
        }

        // The record lies under its bundle's key, whatever its own bytes hash to.
        let record_bytes = b"{\"recordVersion\":1}";
        let record =
            VerifiedObject::record(&bundle, &digest(record_bytes), &digest(record_bytes)).unwrap();
        assert_eq!(record.key(), record_key(&written.sha256));
        assert_eq!(record.sha256(), &digest(record_bytes).sha256);
        assert!(VerifiedObject::record(&bundle, &digest(record_bytes), &digest(b"{}")).is_err());
    }

    #[test]
    fn the_hasher_measures_bytes_fed_in_pieces_as_one() {
        let whole = b"{\"bundleVersion\":1,\"stream\":[]}";
        let mut hasher = ObjectHasher::new();
        assert!(hasher.is_empty());
        for piece in whole.chunks(5) {
            hasher.update(piece);
        }
        assert_eq!(hasher.len(), whole.len() as u64);
        assert_eq!(hasher.finish(), digest(whole));
        assert_eq!(ObjectHasher::new().finish(), digest(b""));
    }

    #[test]
    fn errors_say_what_failed() {
        let written = digest(b"abc");
        let read_back = digest(b"ab");
        let text = ArchiveError::ReadBackDiffers {
            key: "bundles/x".into(),
            written,
            read_back,
        }
        .to_string();
        assert!(text.contains("bundles/x") && text.contains("2 bytes") && text.contains("3 bytes"));
        assert!(ArchiveError::PruneBeforeStore
            .to_string()
            .contains("stored"));
    }
}
