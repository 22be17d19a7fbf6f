//! A stream append: the holder of the job's active claim adds the next chunk of its
//! hash-chained log/trajectory stream, within the per-attempt bounds. Decided by [`decide`]
//! from the snapshot's stream head; the protocol crate's `validate_append` holds the chain rules.

use edgerunner_protocol::chunk::{
    validate_append, AppendLimits, ChunkIdentity, StreamChunk, MAX_CHUNKS_PER_ATTEMPT,
    MAX_STREAM_BYTES_PER_ATTEMPT, RECENT_CHECKSUMS,
};
use edgerunner_protocol::envelope::{ClaimId, DispatchAttempt, JobId};
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::time::UnixMillis;
use serde_json::Value;

use super::commit::{Answer, OpCtx, OpResult};
use super::snapshot::Snapshot;
use crate::error::ApiError;
use crate::objects::job::{ChunkAccepted, JobRefusal, JobReply};
use crate::store::counters::{self, Counter};
use crate::store::writes::Writes;
use crate::store::{self, jobs};

/// Largest stream payload, as stable JSON bytes (the schema's cap too).
const MAX_CHUNK_PAYLOAD_BYTES: usize = 256 * 1024;

/// A chunk admitted to the stream, as it will be stored.
#[derive(Debug)]
pub(super) struct Append<'a> {
    pub(super) chunk: StreamChunk,
    /// The active claim's id and attempt.
    pub(super) claim_id: &'a str,
    pub(super) attempt: i64,
    pub(super) sequence: i64,
    /// The stable JSON that was hashed and measured, so the schema's byte count (of the stored
    /// text) and the limit just checked count the same bytes.
    pub(super) payload: String,
    /// The attempt's payload bytes through this chunk.
    pub(super) stream_bytes: i64,
}

/// Whether `raw`, sent by `runner` at `now`, is the next chunk of the job's stream. Only the
/// holder of the job's active claim may append; a runner that never held a claim of this job
/// learns nothing about it.
pub(super) fn decide<'a>(
    snap: &'a Snapshot,
    runner: &str,
    raw: &Value,
    now: i64,
) -> OpResult<Append<'a>> {
    let chunk = StreamChunk::from_json(raw)?;
    let job = &snap.job;
    let held_one = snap.claims.iter().any(|c| c.runner_id == runner);
    let Some(active) = snap.active_claim() else {
        return Err(match held_one {
            true => JobRefusal::StreamClaimOver,
            false => JobRefusal::NoJobForRunner,
        });
    };
    if active.runner_id != runner {
        return Err(match held_one {
            true => JobRefusal::StreamTakenOver,
            false => JobRefusal::NoJobForRunner,
        });
    }
    let expected = ChunkIdentity {
        job_id: JobId::parse(&job.id).map_err(ApiError::internal)?,
        claim_id: ClaimId::parse(&active.id).map_err(ApiError::internal)?,
        dispatch_attempt: DispatchAttempt::new(u32::try_from(active.dispatch_attempt).unwrap_or(0))
            .ok_or_else(|| ApiError::internal("attempt out of range"))?,
    };
    // The head row carries the attempt's running byte total (a stream older than migration
    // 0004 counts from there).
    let stored_bytes = snap.head.first().and_then(|c| c.stream_bytes).unwrap_or(0);
    let limits = AppendLimits {
        max_payload_bytes: MAX_CHUNK_PAYLOAD_BYTES,
        max_chunks: MAX_CHUNKS_PER_ATTEMPT,
        max_stream_bytes: MAX_STREAM_BYTES_PER_ATTEMPT,
        stream_bytes: u64::try_from(stored_bytes).unwrap_or(0),
        lease_expires_at: UnixMillis::new(job.lease_expires_at.unwrap_or(0))
            .map_err(ApiError::internal)?,
        now: UnixMillis::new(now).map_err(ApiError::internal)?,
    };
    let admitted = validate_append(&snap.chain_head()?, &expected, &chunk, &limits)?;
    Ok(Append {
        sequence: i64::try_from(chunk.sequence).map_err(ApiError::internal)?,
        stream_bytes: i64::try_from(admitted.stream_bytes).map_err(ApiError::internal)?,
        payload: admitted.payload,
        claim_id: &active.id,
        attempt: active.dispatch_attempt,
        chunk,
    })
}

/// Decides and stores a chunk; the object learns the new stream head.
pub(super) async fn run(ctx: &OpCtx<'_>, snap: Snapshot, raw: &Value) -> Answer {
    let runner = ctx.runner()?;
    let append = decide(&snap, runner, raw, ctx.now)?;
    let job = &snap.job;
    let chunk = &append.chunk;
    let new_chunk = jobs::NewChunk {
        job_id: &job.id,
        organization_id: &job.organization_id,
        claim_id: append.claim_id,
        dispatch_attempt: append.attempt,
        sequence: append.sequence,
        kind: chunk.kind.as_str(),
        previous_checksum: chunk.previous_checksum.as_ref().map(Sha256Hex::as_str),
        payload: &append.payload,
        payload_hash: chunk.payload_hash.as_str(),
        checksum: chunk.checksum.as_str(),
        emitted_at: chunk.emitted_at.as_str(),
        received_at: ctx.now,
        stream_bytes: append.stream_bytes,
    };
    let mut writes = Writes::default();
    writes.one(
        "the chunk's insert",
        jobs::insert_chunk(ctx.db, &new_chunk)?,
    );
    writes.extend([
        // Charged to the organization's quota, which refuses the batch past it.
        store::usage::charge(
            ctx.db,
            &job.organization_id,
            store::usage::stored_bytes(&append.payload) + store::usage::CHUNK_ROW_BYTES,
            store::usage::default_quota(ctx.env),
        )?,
        counters::add(
            ctx.db,
            &job.organization_id,
            Counter::StreamBytes,
            store::usage::stored_bytes(&append.payload),
        )?,
    ]);
    ctx.commit(&snap, true, writes).await?;
    let mut known = snap.clone();
    known.head.insert(
        0,
        jobs::ChunkHeadRow {
            sequence: append.sequence,
            checksum: chunk.checksum.as_str().to_owned(),
            stream_bytes: Some(append.stream_bytes),
        },
    );
    known.head.truncate(RECENT_CHECKSUMS);
    ctx.learn(known);
    Ok(JobReply::Appended(ChunkAccepted {
        accepted: true,
        sequence: append.chunk.sequence,
        checksum: append.chunk.checksum,
    }))
}

#[cfg(test)]
mod tests {
    use edgerunner_protocol::chunk::{ChunkError, ChunkKind, ChunkWriter};
    use edgerunner_protocol::state::JobState;
    use edgerunner_protocol::time::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::objects::job::fixtures::{held, requeued_after_loss, NOW};

    fn writer(claim: &str, attempt: u32) -> ChunkWriter {
        ChunkWriter::new(ChunkIdentity {
            job_id: JobId::parse("job_1").unwrap(),
            claim_id: ClaimId::parse(claim).unwrap(),
            dispatch_attempt: DispatchAttempt::new(attempt).unwrap(),
        })
    }

    fn at() -> Timestamp {
        Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap()
    }

    /// The snapshot after `chunks` were stored.
    fn with_head(mut snap: Snapshot, writer: &ChunkWriter, bytes: i64) -> Snapshot {
        snap.head = writer
            .head()
            .recent_checksums()
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .enumerate()
            .map(|(back, checksum)| jobs::ChunkHeadRow {
                sequence: i64::try_from(writer.head().next_sequence()).unwrap() - 1 - back as i64,
                checksum: checksum.as_str().to_owned(),
                stream_bytes: Some(bytes),
            })
            .collect();
        snap
    }

    #[test]
    fn the_holder_appends_the_next_chunk_of_its_chain() {
        let snap = held(JobState::Running);
        let mut w = writer("job_1-a1", 1);
        let first = w.next(ChunkKind::Log, json!({ "line": "hello" }), at());
        let append = decide(&snap, "run_1", &first.to_json(), NOW).unwrap();
        assert_eq!((append.sequence, append.attempt), (0, 1));
        assert_eq!(append.claim_id, "job_1-a1");
        assert_eq!(append.payload, r#"{"line":"hello"}"#);
        assert_eq!(append.stream_bytes, append.payload.len() as i64);
        // The next one chains to it, counting the bytes on from the head.
        let snap = with_head(snap, &w, 100);
        let second = w.next(ChunkKind::Log, json!({ "line": "again" }), at());
        let append = decide(&snap, "run_1", &second.to_json(), NOW).unwrap();
        assert_eq!(append.sequence, 1);
        assert_eq!(
            append.stream_bytes,
            100 + r#"{"line":"again"}"#.len() as i64
        );
    }

    #[test]
    fn a_resent_chunk_is_told_apart_from_one_out_of_sequence() {
        let snap = held(JobState::Running);
        let mut w = writer("job_1-a1", 1);
        let first = w.next(ChunkKind::Log, json!({ "n": 1 }), at());
        let snap = with_head(snap, &w, 10);
        // The same chunk again (its acknowledgement was lost): within the recent checksums.
        let resent = decide(&snap, "run_1", &first.to_json(), NOW);
        assert!(
            matches!(
                resent,
                Err(JobRefusal::Chunk(ChunkError::DuplicateChecksum))
            ),
            "{resent:?}"
        );
        // Another chunk with a sequence already taken.
        let other = writer("job_1-a1", 1).next(ChunkKind::Log, json!({ "n": 2 }), at());
        let refused = decide(&snap, "run_1", &other.to_json(), NOW);
        assert!(
            matches!(
                refused,
                Err(JobRefusal::Chunk(ChunkError::DuplicateSequence { .. }))
            ),
            "{refused:?}"
        );
    }

    #[test]
    fn a_chunk_from_another_runner_or_a_lost_claim_is_refused_by_who_sends_it() {
        let mut w = writer("job_1-a1", 1);
        let chunk = w.next(ChunkKind::Log, json!({}), at()).to_json();
        // A runner that never held a claim of this job learns nothing about it.
        assert!(matches!(
            decide(&held(JobState::Running), "run_9", &chunk, NOW),
            Err(JobRefusal::NoJobForRunner)
        ));
        // The holder of a claim that is over hears that it is over.
        assert!(matches!(
            decide(&requeued_after_loss(), "run_1", &chunk, NOW),
            Err(JobRefusal::StreamClaimOver)
        ));
        // A runner whose claim another attempt took over hears so.
        let mut taken = held(JobState::Running);
        taken.claims[0].runner_id = "run_2".to_owned();
        taken.claims.push(crate::objects::job::fixtures::claim(
            "job_1-a0",
            "run_1",
            edgerunner_protocol::state::ClaimState::Lost,
        ));
        assert!(matches!(
            decide(&taken, "run_1", &chunk, NOW),
            Err(JobRefusal::StreamTakenOver)
        ));
    }

    #[test]
    fn a_chunk_that_does_not_parse_is_refused_before_anything_else() {
        let snap = held(JobState::Running);
        let refused = decide(&snap, "run_9", &json!({ "sequence": "x" }), NOW);
        assert!(matches!(refused, Err(JobRefusal::Chunk(_))), "{refused:?}");
    }
}
