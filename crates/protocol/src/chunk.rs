//! Stream chunks and the hash chain they form.
//!
//! A chunk is what the SDK's `create_remote_runner_stream_chunk` makes:
//! `{jobId, claimId, dispatchAttempt, sequence, kind, previousChecksum, payload, payloadHash,
//! checksum, emittedAt}`, with `payloadHash = H(payload)` and `checksum` = `H` of the other
//! fields but `payload` (see [`chunk_checksum`]). Each chunk names its predecessor's checksum,
//! so a claim's stream is a chain from sequence 0, and its last checksum is what the completion
//! closes (`finalStreamChecksum`).
//!
//! The server keeps a [`ChainHead`] per job and admits a chunk with [`validate_append`], which
//! returns the next head or says exactly what is wrong. Rust runners make chunks with
//! [`ChunkWriter`].
//!
//! # Which rejection, and which status
//!
//! Checks run in this order, so each defect is reported by the first check that can see it:
//!
//! | check | error | status |
//! |---|---|---|
//! | job, claim and attempt are the active claim's | [`ChunkError::IdentityChanged`] | 409 |
//! | the claim's lease has not lapsed | [`ChunkError::LeaseExpired`] | 409 |
//! | payload within the size cap | [`ChunkError::PayloadTooLarge`] | 422 |
//! | `payloadHash = H(payload)` | [`ChunkError::PayloadHashMismatch`] | 422 |
//! | `checksum` matches the fields | [`ChunkError::ChecksumMismatch`] | 422 |
//! | not a replay of a stored chunk | [`ChunkError::DuplicateChecksum`] | 409 |
//! | sequence not behind the head | [`ChunkError::DuplicateSequence`] | 409 |
//! | sequence not ahead of the head | [`ChunkError::Gap`] | 422 |
//! | `previousChecksum` null at sequence 0 | [`ChunkError::PreviousAtZero`] | 422 |
//! | `previousChecksum` = the head's last | [`ChunkError::PreviousMismatch`] | 422 |
//! | the attempt holds fewer than its chunk limit | [`ChunkError::ChunkLimit`] | 409 |
//! | the attempt's payload bytes stay within its limit | [`ChunkError::BytesLimit`] | 409 |
//!
//! (Parsing comes first and reports [`ChunkError::Malformed`] and [`ChunkError::BadKind`], 422.)
//!
//! 409 means "well-formed, but conflicts with what is stored": another claim now holds the job,
//! the lease is gone, this sequence or chunk was already taken, or the attempt's stream is full
//! ([`MAX_CHUNKS_PER_ATTEMPT`], [`MAX_STREAM_BYTES_PER_ATTEMPT`]); retrying the same chunk can
//! never succeed, and the runner should stop or resynchronise. 422 means the chunk is wrong in
//! itself or does not fit the chain: a hash that does not match, a gap, a wrong predecessor, an
//! oversized payload. (The edge's whole-body size limit answers 413 before any of this.)
//!
//! Self-consistency comes before position: a chunk whose checksum does not match its own
//! fields was altered or mis-built, and saying "gap" about it would mislead. An exact replay of
//! a recently stored chunk is reported as [`ChunkError::DuplicateChecksum`] (the head remembers
//! the last [`RECENT_CHECKSUMS`] checksums), which lets a runner that retried after a lost
//! response recognise that its chunk is already stored; older replays are
//! [`ChunkError::DuplicateSequence`], and the database's unique checksum index backs both.

use core::fmt;
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::envelope::{ClaimId, DispatchAttempt, JobId};
use crate::error_code::ErrorCode;
use crate::recovery::lease_expired;
use crate::stable_json::{self, FieldError, Fields, Sha256Hex};
use crate::time::{Timestamp, UnixMillis};

/// What a chunk carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    Log,
    Trajectory,
}

impl ChunkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Log => "log",
            Self::Trajectory => "trajectory",
        }
    }

    pub fn parse(text: &str) -> Result<Self, ChunkError> {
        match text {
            "log" => Ok(Self::Log),
            "trajectory" => Ok(Self::Trajectory),
            _ => Err(ChunkError::BadKind {
                kind: text.to_owned(),
            }),
        }
    }
}

impl fmt::Display for ChunkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The claim a chunk belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ChunkIdentity {
    pub job_id: JobId,
    pub claim_id: ClaimId,
    pub dispatch_attempt: DispatchAttempt,
}

/// One stream chunk, as the SDK sends it.
///
/// `payload` stays a JSON value so that its number lexemes, which `payloadHash` covers, survive;
/// `emitted_at` keeps its text for the same reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamChunk {
    pub identity: ChunkIdentity,
    pub sequence: u64,
    pub kind: ChunkKind,
    pub previous_checksum: Option<Sha256Hex>,
    pub payload: Value,
    pub payload_hash: Sha256Hex,
    pub checksum: Sha256Hex,
    pub emitted_at: Timestamp,
}

impl StreamChunk {
    /// Reads a received chunk. Integers must be written as plain digits (so that the checksum
    /// recomputed from the parsed fields covers the same text the client hashed); unknown fields
    /// are ignored.
    pub fn from_json(value: &Value) -> Result<Self, ChunkError> {
        let malformed = |error: FieldError| ChunkError::Malformed {
            reason: error.to_string(),
        };
        let fields = Fields::of(value, "").map_err(malformed)?;
        let kind = ChunkKind::parse(fields.str("kind").map_err(malformed)?)?;
        Self::read(&fields, kind).map_err(malformed)
    }

    fn read(fields: &Fields<'_>, kind: ChunkKind) -> Result<Self, FieldError> {
        Ok(Self {
            identity: ChunkIdentity {
                job_id: fields.parsed("jobId", JobId::parse)?,
                claim_id: fields.parsed("claimId", ClaimId::parse)?,
                dispatch_attempt: DispatchAttempt::read(fields, "dispatchAttempt")?,
            },
            sequence: fields.uint("sequence")?,
            kind,
            previous_checksum: fields.nullable_parsed("previousChecksum", Sha256Hex::parse)?,
            payload: fields.value("payload")?.clone(),
            payload_hash: fields.parsed("payloadHash", Sha256Hex::parse)?,
            checksum: fields.parsed("checksum", Sha256Hex::parse)?,
            emitted_at: fields.parsed("emittedAt", Timestamp::parse)?,
        })
    }

    /// The wire form, field for field what the SDK sends.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("jobId".into(), self.identity.job_id.clone().into());
        map.insert("claimId".into(), self.identity.claim_id.clone().into());
        map.insert(
            "dispatchAttempt".into(),
            self.identity.dispatch_attempt.into(),
        );
        map.insert("sequence".into(), self.sequence.into());
        map.insert("kind".into(), self.kind.as_str().into());
        map.insert(
            "previousChecksum".into(),
            self.previous_checksum
                .clone()
                .map_or(Value::Null, Value::from),
        );
        map.insert("payload".into(), self.payload.clone());
        map.insert("payloadHash".into(), self.payload_hash.clone().into());
        map.insert("checksum".into(), self.checksum.clone().into());
        map.insert("emittedAt".into(), self.emitted_at.as_str().into());
        Value::Object(map)
    }

    /// The checksum this chunk's fields call for (which `checksum` must equal).
    pub fn expected_checksum(&self) -> Sha256Hex {
        chunk_checksum(
            &self.identity,
            self.sequence,
            self.kind,
            self.previous_checksum.as_ref(),
            &self.payload_hash,
            &self.emitted_at,
        )
    }
}

/// `H(payload)`.
pub fn payload_hash(payload: &Value) -> Sha256Hex {
    stable_json::hash(payload)
}

/// `H({claimId, dispatchAttempt, emittedAt, jobId, kind, payloadHash, previousChecksum, sequence})`,
/// exactly the object the SDK hashes.
pub fn chunk_checksum(
    identity: &ChunkIdentity,
    sequence: u64,
    kind: ChunkKind,
    previous_checksum: Option<&Sha256Hex>,
    payload_hash: &Sha256Hex,
    emitted_at: &Timestamp,
) -> Sha256Hex {
    let mut map = Map::new();
    map.insert("claimId".into(), identity.claim_id.clone().into());
    map.insert("dispatchAttempt".into(), identity.dispatch_attempt.into());
    map.insert("emittedAt".into(), emitted_at.as_str().into());
    map.insert("jobId".into(), identity.job_id.clone().into());
    map.insert("kind".into(), kind.as_str().into());
    map.insert("payloadHash".into(), payload_hash.clone().into());
    map.insert(
        "previousChecksum".into(),
        previous_checksum.cloned().map_or(Value::Null, Value::from),
    );
    map.insert("sequence".into(), sequence.into());
    stable_json::hash(&Value::Object(map))
}

/// How many of the latest checksums a [`ChainHead`] remembers to recognise exact replays.
pub const RECENT_CHECKSUMS: usize = 32;

/// Where a claim's stream stands: the next sequence it accepts and the checksum that chunk
/// must name as its predecessor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChainHead {
    next_sequence: u64,
    /// Newest last; never longer than [`RECENT_CHECKSUMS`]; its last entry is the chain's last
    /// checksum (empty exactly when the chain is).
    recent: VecDeque<Sha256Hex>,
}

impl ChainHead {
    /// The head of a stream with no chunks.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Rebuilds a head from storage: the next sequence and the latest checksums, oldest first
    /// (at least the last one; up to [`RECENT_CHECKSUMS`] are kept). `None` when they cannot
    /// describe a chain: checksums without chunks, chunks without a last checksum, or more
    /// checksums than chunks.
    pub fn restore(next_sequence: u64, latest_checksums: Vec<Sha256Hex>) -> Option<Self> {
        let count = u64::try_from(latest_checksums.len()).ok()?;
        if (next_sequence == 0) != (count == 0) || count > next_sequence {
            return None;
        }
        let mut recent = VecDeque::from(latest_checksums);
        while recent.len() > RECENT_CHECKSUMS {
            recent.pop_front();
        }
        Some(Self {
            next_sequence,
            recent,
        })
    }

    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// The checksum the next chunk must name, and a completion must close; `None` before the
    /// first chunk.
    pub fn last_checksum(&self) -> Option<&Sha256Hex> {
        self.recent.back()
    }

    /// The latest checksums, oldest first.
    pub fn recent_checksums(&self) -> impl Iterator<Item = &Sha256Hex> {
        self.recent.iter()
    }

    /// The chunk that extends this chain.
    pub fn next_chunk(
        &self,
        identity: &ChunkIdentity,
        kind: ChunkKind,
        payload: Value,
        emitted_at: Timestamp,
    ) -> StreamChunk {
        let payload_hash = payload_hash(&payload);
        let previous_checksum = self.last_checksum().cloned();
        let checksum = chunk_checksum(
            identity,
            self.next_sequence,
            kind,
            previous_checksum.as_ref(),
            &payload_hash,
            &emitted_at,
        );
        StreamChunk {
            identity: identity.clone(),
            sequence: self.next_sequence,
            kind,
            previous_checksum,
            payload,
            payload_hash,
            checksum,
            emitted_at,
        }
    }

    fn advanced(&self, checksum: &Sha256Hex) -> Self {
        let mut recent = self.recent.clone();
        if recent.len() == RECENT_CHECKSUMS {
            recent.pop_front();
        }
        recent.push_back(checksum.clone());
        Self {
            next_sequence: self.next_sequence.saturating_add(1),
            recent,
        }
    }
}

/// Chunks one attempt's stream may hold (sequences `0..MAX_CHUNKS_PER_ATTEMPT`).
pub const MAX_CHUNKS_PER_ATTEMPT: u64 = 10_000;
/// Payload bytes (stable JSON, as stored) one attempt's stream may hold in all: 64 MiB.
pub const MAX_STREAM_BYTES_PER_ATTEMPT: u64 = 64 * 1024 * 1024;

/// The bounds one append must stay within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendLimits {
    /// Largest payload, counted as the bytes of its stable JSON (what is hashed and stored).
    pub max_payload_bytes: usize,
    /// Chunks the attempt may hold: a chunk at this sequence or beyond is refused.
    pub max_chunks: u64,
    /// Payload bytes the attempt may hold in all.
    pub max_stream_bytes: u64,
    /// Payload bytes the attempt already holds (the stored head's running total).
    pub stream_bytes: u64,
    /// When the active claim's lease lapses.
    pub lease_expires_at: UnixMillis,
    pub now: UnixMillis,
}

/// What admitting a chunk yields: the chain's new head, and the payload's stable JSON (the
/// bytes that were hashed and measured, and that are stored) with the attempt's new byte total.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub head: ChainHead,
    pub payload: String,
    pub stream_bytes: u64,
}

/// Admits `chunk` after `head` for the active claim `expected`.
pub fn validate_append(
    head: &ChainHead,
    expected: &ChunkIdentity,
    chunk: &StreamChunk,
    limits: &AppendLimits,
) -> Result<Admitted, ChunkError> {
    check_identity(expected, &chunk.identity)?;
    if lease_expired(limits.lease_expires_at.get(), limits.now.get()) {
        return Err(ChunkError::LeaseExpired);
    }
    let payload = stable_json::stable_json(&chunk.payload);
    if payload.len() > limits.max_payload_bytes {
        return Err(ChunkError::PayloadTooLarge {
            bytes: payload.len(),
            max_bytes: limits.max_payload_bytes,
        });
    }
    let computed = stable_json::sha256_hex(payload.as_bytes());
    if computed != chunk.payload_hash {
        return Err(ChunkError::PayloadHashMismatch { computed });
    }
    let computed = chunk.expected_checksum();
    if computed != chunk.checksum {
        return Err(ChunkError::ChecksumMismatch { computed });
    }
    if head.recent.contains(&chunk.checksum) {
        return Err(ChunkError::DuplicateChecksum);
    }
    let next = head.next_sequence;
    if chunk.sequence < next {
        return Err(ChunkError::DuplicateSequence {
            expected: next,
            received: chunk.sequence,
        });
    }
    if chunk.sequence > next {
        return Err(ChunkError::Gap {
            expected: next,
            received: chunk.sequence,
        });
    }
    match (head.last_checksum(), chunk.previous_checksum.as_ref()) {
        (None, None) => {}
        (None, Some(_)) => return Err(ChunkError::PreviousAtZero),
        (Some(last), received) if received != Some(last) => {
            return Err(ChunkError::PreviousMismatch {
                expected: last.clone(),
            })
        }
        (Some(_), _) => {}
    }
    // Last, so that a replay or a misplaced chunk is still told what is wrong with it; a chunk
    // refused here would have extended the chain.
    if chunk.sequence >= limits.max_chunks {
        return Err(ChunkError::ChunkLimit {
            max_chunks: limits.max_chunks,
        });
    }
    let total = limits.stream_bytes.saturating_add(payload.len() as u64);
    if total > limits.max_stream_bytes {
        return Err(ChunkError::BytesLimit {
            stored: limits.stream_bytes,
            bytes: payload.len() as u64,
            max_bytes: limits.max_stream_bytes,
        });
    }
    Ok(Admitted {
        head: head.advanced(&chunk.checksum),
        payload,
        stream_bytes: total,
    })
}

fn check_identity(expected: &ChunkIdentity, received: &ChunkIdentity) -> Result<(), ChunkError> {
    let changed = |field, expected: &dyn fmt::Display, received: &dyn fmt::Display| {
        Err(ChunkError::IdentityChanged {
            field,
            expected: expected.to_string(),
            received: received.to_string(),
        })
    };
    if received.job_id != expected.job_id {
        return changed(IdentityField::JobId, &expected.job_id, &received.job_id);
    }
    if received.claim_id != expected.claim_id {
        return changed(
            IdentityField::ClaimId,
            &expected.claim_id,
            &received.claim_id,
        );
    }
    if received.dispatch_attempt != expected.dispatch_attempt {
        return changed(
            IdentityField::DispatchAttempt,
            &expected.dispatch_attempt,
            &received.dispatch_attempt,
        );
    }
    Ok(())
}

/// Makes a claim's chunks in order (for Rust runners).
///
/// Each call to [`ChunkWriter::next`] advances the chain; to retry a failed POST, send the same
/// chunk again rather than making a new one.
#[derive(Clone, Debug)]
pub struct ChunkWriter {
    identity: ChunkIdentity,
    head: ChainHead,
}

impl ChunkWriter {
    pub fn new(identity: ChunkIdentity) -> Self {
        Self {
            identity,
            head: ChainHead::empty(),
        }
    }

    pub fn next(&mut self, kind: ChunkKind, payload: Value, emitted_at: Timestamp) -> StreamChunk {
        let chunk = self
            .head
            .next_chunk(&self.identity, kind, payload, emitted_at);
        self.head = self.head.advanced(&chunk.checksum);
        chunk
    }

    pub fn head(&self) -> &ChainHead {
        &self.head
    }

    /// What the completion's `finalStreamChecksum` must be.
    pub fn final_checksum(&self) -> Option<&Sha256Hex> {
        self.head.last_checksum()
    }
}

/// Which part of a chunk's claim identity differs from the active claim's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdentityField {
    JobId,
    ClaimId,
    DispatchAttempt,
}

impl IdentityField {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JobId => "jobId",
            Self::ClaimId => "claimId",
            Self::DispatchAttempt => "dispatchAttempt",
        }
    }
}

/// Why a chunk was refused. See the module docs for the order of checks and the statuses.
/// Serializable, so that a refusal decided in one place (the job's Durable Object) is answered
/// in another (the edge) with this type's own status, code and text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChunkError {
    Malformed {
        reason: String,
    },
    BadKind {
        kind: String,
    },
    IdentityChanged {
        field: IdentityField,
        expected: String,
        received: String,
    },
    LeaseExpired,
    PayloadTooLarge {
        bytes: usize,
        max_bytes: usize,
    },
    PayloadHashMismatch {
        computed: Sha256Hex,
    },
    ChecksumMismatch {
        computed: Sha256Hex,
    },
    DuplicateChecksum,
    DuplicateSequence {
        expected: u64,
        received: u64,
    },
    Gap {
        expected: u64,
        received: u64,
    },
    PreviousAtZero,
    PreviousMismatch {
        expected: Sha256Hex,
    },
    /// The attempt already holds its [`AppendLimits::max_chunks`] chunks.
    ChunkLimit {
        max_chunks: u64,
    },
    /// This payload would take the attempt past [`AppendLimits::max_stream_bytes`].
    BytesLimit {
        stored: u64,
        bytes: u64,
        max_bytes: u64,
    },
}

impl ChunkError {
    /// The machine code of `{"error": {"code", …}}` when the edge answers this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::Malformed { .. } => ErrorCode::StreamChunkMalformed,
            Self::BadKind { .. } => ErrorCode::StreamKindInvalid,
            Self::IdentityChanged { .. } => ErrorCode::StreamIdentityChanged,
            Self::LeaseExpired => ErrorCode::StreamLeaseExpired,
            Self::PayloadTooLarge { .. } => ErrorCode::StreamPayloadTooLarge,
            Self::PayloadHashMismatch { .. } => ErrorCode::StreamPayloadHashMismatch,
            Self::ChecksumMismatch { .. } => ErrorCode::StreamChecksumMismatch,
            Self::DuplicateChecksum => ErrorCode::StreamDuplicateChecksum,
            Self::DuplicateSequence { .. } => ErrorCode::StreamDuplicateSequence,
            Self::Gap { .. } => ErrorCode::StreamSequenceGap,
            Self::PreviousAtZero => ErrorCode::StreamPreviousAtZero,
            Self::PreviousMismatch { .. } => ErrorCode::StreamPreviousMismatch,
            Self::ChunkLimit { .. } => ErrorCode::StreamChunkLimit,
            Self::BytesLimit { .. } => ErrorCode::StreamBytesLimit,
        }
    }

    /// The wire name of [`Self::error_code`].
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    pub fn http_status(&self) -> u16 {
        match self {
            Self::IdentityChanged { .. }
            | Self::LeaseExpired
            | Self::DuplicateChecksum
            | Self::DuplicateSequence { .. }
            | Self::ChunkLimit { .. }
            | Self::BytesLimit { .. } => 409,
            Self::Malformed { .. }
            | Self::BadKind { .. }
            | Self::PayloadTooLarge { .. }
            | Self::PayloadHashMismatch { .. }
            | Self::ChecksumMismatch { .. }
            | Self::Gap { .. }
            | Self::PreviousAtZero
            | Self::PreviousMismatch { .. } => 422,
        }
    }
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { reason } => write!(f, "stream chunk is malformed: {reason}"),
            Self::BadKind { kind } => {
                write!(
                    f,
                    "chunk kind {kind:?} is neither \"log\" nor \"trajectory\""
                )
            }
            Self::IdentityChanged {
                field,
                expected,
                received,
            } => write!(
                f,
                "chunk {} is {received:?} but the active claim's is {expected:?}",
                field.as_str()
            ),
            Self::LeaseExpired => f.write_str("the claim's lease has expired; appends are closed"),
            Self::PayloadTooLarge { bytes, max_bytes } => write!(
                f,
                "chunk payload is {bytes} bytes of stable JSON; the limit is {max_bytes}"
            ),
            Self::PayloadHashMismatch { computed } => {
                write!(f, "payloadHash does not match H(payload) = {computed}")
            }
            Self::ChecksumMismatch { computed } => write!(
                f,
                "checksum does not match the chunk's fields (they hash to {computed})"
            ),
            Self::DuplicateChecksum => f.write_str("this exact chunk is already stored"),
            Self::DuplicateSequence { expected, received } => write!(
                f,
                "sequence {received} is already taken (reordered or duplicate); the stream \
                 expects {expected}"
            ),
            Self::Gap { expected, received } => write!(
                f,
                "sequence {received} leaves a gap; the stream expects {expected}"
            ),
            Self::PreviousAtZero => f.write_str("previousChecksum must be null at sequence 0"),
            Self::PreviousMismatch { expected } => {
                write!(
                    f,
                    "previousChecksum must be the last stored checksum, {expected}"
                )
            }
            Self::ChunkLimit { max_chunks } => write!(
                f,
                "this attempt's stream already holds {max_chunks} chunks, its limit; it is closed"
            ),
            Self::BytesLimit {
                stored,
                bytes,
                max_bytes,
            } => write!(
                f,
                "this attempt's stream holds {stored} payload bytes; {bytes} more would pass its \
                 limit of {max_bytes}"
            ),
        }
    }
}

impl std::error::Error for ChunkError {}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use std::collections::HashSet;

    use serde_json::json;

    use super::*;
    use crate::stable_json::tests::random_value;
    use crate::testkit::{assert_refusal, check, Rng};

    fn identity() -> ChunkIdentity {
        ChunkIdentity {
            job_id: JobId::parse("job_1").expect("id"),
            claim_id: ClaimId::parse("claim_1").expect("id"),
            dispatch_attempt: DispatchAttempt::FIRST,
        }
    }

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_instant(UnixMillis::new(millis).expect("in range"))
    }

    fn limits() -> AppendLimits {
        AppendLimits {
            max_payload_bytes: 1 << 20,
            max_chunks: MAX_CHUNKS_PER_ATTEMPT,
            max_stream_bytes: MAX_STREAM_BYTES_PER_ATTEMPT,
            stream_bytes: 0,
            lease_expires_at: UnixMillis::new(2_000_000_000_000).expect("in range"),
            now: UnixMillis::new(1_900_000_000_000).expect("in range"),
        }
    }

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("test JSON")
    }

    // create_remote_runner_stream_chunk(...) from evalgate-sdk 3.15.0, printed by json.dumps.
    const SDK_CHUNK_0: &str = r#"{"jobId": "job_1", "claimId": "claim_1", "dispatchAttempt": 1, "sequence": 0, "kind": "log", "previousChecksum": null, "payload": {"level": "info", "message": "execution started", "ratio": 1e-07, "big": 1000000000000000000000000000000, "text": "\u00e9\u2028\u007f\u0000"}, "payloadHash": "aff2818914bb22e1ef9daf318fd8970e09ac41d2602e3ed506528e10f67e0843", "checksum": "80a224042082261bb7b81744aa8f5c23b8887efbc706aec81e5cf67cd65efca3", "emittedAt": "2026-11-29T07:00:00.123456Z"}"#;
    const SDK_CHUNK_1: &str = r#"{"jobId": "job_1", "claimId": "claim_1", "dispatchAttempt": 1, "sequence": 1, "kind": "trajectory", "previousChecksum": "80a224042082261bb7b81744aa8f5c23b8887efbc706aec81e5cf67cd65efca3", "payload": {"event": "agent_started", "score": 1.0}, "payloadHash": "f75d9f9e9705d4dfdeb0bcc72a86b84aaf744a3df9ebd18e27679b34f26ccd63", "checksum": "d8832e52c5c095f96c0f4e657374d0a63cd6ce2daaea1a5c925d1aea5e117e81", "emittedAt": "2026-11-29T07:00:01Z"}"#;

    #[test]
    fn an_admitted_chunk_carries_its_stored_payload_and_the_new_byte_total() {
        let first = StreamChunk::from_json(&parse(SDK_CHUNK_0)).expect("parses");
        let limits = AppendLimits {
            stream_bytes: 100,
            ..limits()
        };
        let admitted =
            validate_append(&ChainHead::empty(), &identity(), &first, &limits).expect("admits");
        assert_eq!(admitted.payload, stable_json::stable_json(&first.payload));
        assert_eq!(
            stable_json::sha256_hex(admitted.payload.as_bytes()),
            first.payload_hash
        );
        assert_eq!(admitted.stream_bytes, 100 + admitted.payload.len() as u64);
    }

    #[test]
    fn chunks_made_by_the_python_sdk_validate() {
        let first = StreamChunk::from_json(&parse(SDK_CHUNK_0)).expect("parses");
        let second = StreamChunk::from_json(&parse(SDK_CHUNK_1)).expect("parses");
        let head = validate_append(&ChainHead::empty(), &identity(), &first, &limits())
            .map(|a| a.head)
            .expect("first chunk appends");
        let head = validate_append(&head, &identity(), &second, &limits())
            .map(|a| a.head)
            .expect("second appends");
        assert_eq!(head.next_sequence(), 2);
        assert_eq!(head.last_checksum(), Some(&second.checksum));
        assert_eq!(StreamChunk::from_json(&first.to_json()), Ok(first));
    }

    #[test]
    fn the_writer_makes_the_chunks_the_python_sdk_makes() {
        let sdk = StreamChunk::from_json(&parse(SDK_CHUNK_1)).expect("parses");
        let head = ChainHead::restore(1, vec![sdk.previous_checksum.clone().expect("linked")])
            .expect("consistent");
        let made = head.next_chunk(
            &identity(),
            ChunkKind::Trajectory,
            parse(r#"{"event": "agent_started", "score": 1.0}"#),
            Timestamp::parse("2026-11-29T07:00:01Z").expect("timestamp"),
        );
        assert_eq!(made, sdk);
        assert_eq!(made.to_json(), parse(SDK_CHUNK_1));
    }

    #[test]
    fn restore_refuses_heads_that_describe_no_chain() {
        let hash = stable_json::sha256_hex(b"x");
        assert_eq!(ChainHead::restore(0, vec![]), Some(ChainHead::empty()));
        assert_eq!(ChainHead::restore(0, vec![hash.clone()]), None);
        assert_eq!(ChainHead::restore(1, vec![]), None);
        assert_eq!(
            ChainHead::restore(1, vec![hash.clone(), hash.clone()]),
            None
        );
        let long = ChainHead::restore(100, vec![hash; 40]).expect("consistent");
        assert_eq!(long.recent_checksums().count(), RECENT_CHECKSUMS);
    }

    #[test]
    fn kind_and_shape_errors_come_from_parsing() {
        let mut value = parse(SDK_CHUNK_0);
        value["kind"] = "metric".into();
        assert_eq!(
            StreamChunk::from_json(&value),
            Err(ChunkError::BadKind {
                kind: "metric".into()
            })
        );
        for (field, bad) in [
            ("sequence", json!(-1)),
            ("sequence", json!(1.0)),
            ("sequence", json!("0")),
            ("dispatchAttempt", json!(0)),
            ("previousChecksum", json!("ABC")),
            ("emittedAt", json!("yesterday")),
            ("kind", json!(1)),
            ("jobId", json!("")),
        ] {
            let mut value = parse(SDK_CHUNK_0);
            value[field] = bad;
            assert!(
                matches!(
                    StreamChunk::from_json(&value),
                    Err(ChunkError::Malformed { .. })
                ),
                "{field}"
            );
        }
        let mut value = parse(SDK_CHUNK_0);
        value.as_object_mut().map(|map| map.remove("payload"));
        assert_eq!(
            StreamChunk::from_json(&value),
            Err(ChunkError::Malformed {
                reason: "`payload` is missing".into()
            })
        );
        assert!(matches!(
            StreamChunk::from_json(&json!([])),
            Err(ChunkError::Malformed { .. })
        ));
    }

    #[test]
    fn error_codes_are_distinct_and_statuses_are_409_or_422() {
        let hash = stable_json::sha256_hex(b"x");
        let errors = [
            ChunkError::Malformed {
                reason: String::new(),
            },
            ChunkError::BadKind {
                kind: String::new(),
            },
            ChunkError::IdentityChanged {
                field: IdentityField::JobId,
                expected: String::new(),
                received: String::new(),
            },
            ChunkError::LeaseExpired,
            ChunkError::PayloadTooLarge {
                bytes: 0,
                max_bytes: 0,
            },
            ChunkError::PayloadHashMismatch {
                computed: hash.clone(),
            },
            ChunkError::ChecksumMismatch {
                computed: hash.clone(),
            },
            ChunkError::DuplicateChecksum,
            ChunkError::DuplicateSequence {
                expected: 0,
                received: 0,
            },
            ChunkError::Gap {
                expected: 0,
                received: 0,
            },
            ChunkError::PreviousAtZero,
            ChunkError::PreviousMismatch { expected: hash },
            ChunkError::ChunkLimit { max_chunks: 0 },
            ChunkError::BytesLimit {
                stored: 0,
                bytes: 0,
                max_bytes: 0,
            },
        ];
        let codes: HashSet<&str> = errors.iter().map(ChunkError::code).collect();
        assert_eq!(codes.len(), errors.len());
        assert!(errors.iter().all(|e| matches!(e.http_status(), 409 | 422)));
    }

    #[test]
    fn an_attempt_holds_at_most_its_chunk_limit() {
        let mut limits = limits();
        limits.max_chunks = 2;
        let mut head = ChainHead::empty();
        for _ in 0..2 {
            let chunk = head.next_chunk(&identity(), ChunkKind::Log, json!({}), at(0));
            head = validate_append(&head, &identity(), &chunk, &limits)
                .expect("under the limit")
                .head;
        }
        let third = head.next_chunk(&identity(), ChunkKind::Log, json!({}), at(0));
        assert_eq!(
            validate_append(&head, &identity(), &third, &limits),
            Err(ChunkError::ChunkLimit { max_chunks: 2 })
        );
    }

    #[test]
    fn an_attempt_holds_at_most_its_payload_bytes_counted_as_stable_json() {
        let chunk =
            ChainHead::empty().next_chunk(&identity(), ChunkKind::Log, json!({"a": "bc"}), at(0));
        let bytes = stable_json::stable_json(&chunk.payload).len() as u64;
        let mut limits = limits();
        limits.max_stream_bytes = 100;
        limits.stream_bytes = 100 - bytes;
        assert!(validate_append(&ChainHead::empty(), &identity(), &chunk, &limits).is_ok());
        limits.stream_bytes += 1;
        assert_eq!(
            validate_append(&ChainHead::empty(), &identity(), &chunk, &limits),
            Err(ChunkError::BytesLimit {
                stored: 101 - bytes,
                bytes,
                max_bytes: 100,
            })
        );
    }

    #[test]
    fn lease_is_closed_at_its_expiry_instant() {
        let chunk = ChainHead::empty().next_chunk(&identity(), ChunkKind::Log, json!({}), at(0));
        let mut limits = limits();
        limits.now = limits.lease_expires_at;
        assert_eq!(
            validate_append(&ChainHead::empty(), &identity(), &chunk, &limits),
            Err(ChunkError::LeaseExpired)
        );
        limits.now = UnixMillis::new(limits.lease_expires_at.get() - 1).expect("in range");
        assert!(validate_append(&ChainHead::empty(), &identity(), &chunk, &limits).is_ok());
    }

    fn random_identity(rng: &mut Rng) -> ChunkIdentity {
        ChunkIdentity {
            job_id: JobId::parse(&format!("job_{}", rng.below(1000))).expect("id"),
            claim_id: ClaimId::parse(&format!("claim_{}", rng.below(1000))).expect("id"),
            dispatch_attempt: DispatchAttempt::new(1 + rng.below(3) as u32).expect("positive"),
        }
    }

    fn random_payload(rng: &mut Rng) -> Value {
        let mut map = Map::new();
        map.insert("n".into(), rng.next_u64().into());
        map.insert("v".into(), random_value(rng, 3));
        Value::Object(map)
    }

    /// A valid chain of 1..=`max_len` chunks from a writer.
    fn random_chain(rng: &mut Rng, max_len: u64) -> (ChunkIdentity, Vec<StreamChunk>) {
        let identity = random_identity(rng);
        let mut writer = ChunkWriter::new(identity.clone());
        let start = 1_700_000_000_000 + rng.below(1 << 30) as i64;
        let chunks = (0..1 + rng.below(max_len))
            .map(|i| {
                let kind = if rng.chance(1, 2) {
                    ChunkKind::Log
                } else {
                    ChunkKind::Trajectory
                };
                writer.next(kind, random_payload(rng), at(start + i as i64 * 7))
            })
            .collect();
        (identity, chunks)
    }

    fn heads(identity: &ChunkIdentity, chunks: &[StreamChunk]) -> Vec<ChainHead> {
        let mut heads = vec![ChainHead::empty()];
        for chunk in chunks {
            let last = heads.last().cloned().unwrap_or_default();
            heads.push(
                validate_append(&last, identity, chunk, &limits())
                    .expect("valid chain")
                    .head,
            );
        }
        heads
    }

    #[test]
    fn every_chain_the_writer_makes_validates() {
        check(200, |rng| {
            let (identity, chunks) = random_chain(rng, 50);
            let heads = heads(&identity, &chunks);
            let last = heads.last().expect("at least the empty head");
            assert_eq!(last.next_sequence(), chunks.len() as u64);
            assert_eq!(last.last_checksum(), chunks.last().map(|c| &c.checksum));
            for chunk in &chunks {
                let reparsed =
                    StreamChunk::from_json(&parse(&stable_json::stable_json(&chunk.to_json())));
                assert_eq!(reparsed.as_ref(), Ok(chunk));
            }
        });
    }

    #[test]
    fn arbitrary_values_are_chunks_that_print_back_or_typed_refusals() {
        let (mut accepted, mut refused) = (0, 0);
        check(300, |rng| {
            let value = if rng.chance(1, 3) {
                rng.json(3)
            } else {
                let (_, chunks) = random_chain(rng, 3);
                rng.mutate(&chunks[0].to_json())
            };
            match StreamChunk::from_json(&value) {
                Ok(chunk) => {
                    accepted += 1;
                    let printed = stable_json::stable_json(&chunk.to_json());
                    assert_eq!(
                        StreamChunk::from_json(&parse(&printed)).as_ref(),
                        Ok(&chunk)
                    );
                }
                Err(error) => {
                    refused += 1;
                    assert_refusal(error.code(), error.http_status(), &error);
                    assert!(
                        matches!(
                            error,
                            ChunkError::Malformed { .. } | ChunkError::BadKind { .. }
                        ),
                        "parsing refuses only the shape: {error:?}"
                    );
                }
            }
        });
        assert!(
            accepted > 0 && refused > 0,
            "{accepted} parsed, {refused} refused"
        );
    }

    #[test]
    fn a_chain_admits_a_mutated_chunk_only_when_it_reads_as_the_original() {
        // Whatever one edit of a chunk's JSON does, the chain either refuses it with a typed
        // error or the edit was invisible to the protocol (an unknown field).
        let (mut admitted_count, mut refused) = (0, 0);
        check(300, |rng| {
            let (identity, chunks) = random_chain(rng, 6);
            let i = rng.below(chunks.len() as u64) as usize;
            let heads = heads(&identity, &chunks[..i]);
            let Ok(chunk) = StreamChunk::from_json(&rng.mutate(&chunks[i].to_json())) else {
                return;
            };
            match validate_append(&heads[i], &identity, &chunk, &limits()) {
                Ok(admitted) => {
                    admitted_count += 1;
                    assert_eq!(chunk, chunks[i]);
                    assert_eq!(admitted.head.last_checksum(), Some(&chunk.checksum));
                }
                Err(error) => {
                    refused += 1;
                    assert_ne!(chunk, chunks[i]);
                    assert_refusal(error.code(), error.http_status(), &error);
                }
            }
        });
        assert!(
            admitted_count > 0 && refused > 0,
            "{admitted_count} admitted, {refused} refused"
        );
    }

    /// Applies one random defect to a copy of chunk `i` of a valid chain and returns it with the
    /// error that must be reported. `None` when the drawn mutation does not apply at `i`.
    fn mutate(
        rng: &mut Rng,
        chunks: &[StreamChunk],
        i: usize,
        limits: &mut AppendLimits,
    ) -> Option<(Result<StreamChunk, ChunkError>, ChunkError)> {
        let original = &chunks[i];
        let mut chunk = original.clone();
        let other_hash = stable_json::sha256_hex(&rng.next_u64().to_be_bytes());
        let rebuilt = |chunk: &StreamChunk| {
            let mut chunk = chunk.clone();
            chunk.payload_hash = payload_hash(&chunk.payload);
            chunk.checksum = chunk.expected_checksum();
            chunk
        };
        let through_json = |edit: &dyn Fn(&mut Value)| {
            let mut value = original.to_json();
            edit(&mut value);
            StreamChunk::from_json(&value)
        };
        let expected = match rng.below(17) {
            0 => {
                chunk.payload = json!({"tampered": rng.next_u64()});
                ChunkError::PayloadHashMismatch {
                    computed: payload_hash(&chunk.payload),
                }
            }
            1 => {
                chunk.payload_hash = other_hash;
                ChunkError::PayloadHashMismatch {
                    computed: original.payload_hash.clone(),
                }
            }
            2 => {
                chunk.checksum = other_hash;
                ChunkError::ChecksumMismatch {
                    computed: original.checksum.clone(),
                }
            }
            3 => {
                chunk.emitted_at =
                    at(chunk.emitted_at.instant().get() + 1 + rng.below(1000) as i64);
                ChunkError::ChecksumMismatch {
                    computed: chunk.expected_checksum(),
                }
            }
            4 => {
                chunk.kind = match chunk.kind {
                    ChunkKind::Log => ChunkKind::Trajectory,
                    ChunkKind::Trajectory => ChunkKind::Log,
                };
                ChunkError::ChecksumMismatch {
                    computed: chunk.expected_checksum(),
                }
            }
            5 => {
                chunk.sequence += 1 + rng.below(5);
                ChunkError::ChecksumMismatch {
                    computed: chunk.expected_checksum(),
                }
            }
            6 => {
                chunk.previous_checksum = Some(other_hash);
                ChunkError::ChecksumMismatch {
                    computed: chunk.expected_checksum(),
                }
            }
            7 => {
                let field = *rng.pick(&[
                    IdentityField::JobId,
                    IdentityField::ClaimId,
                    IdentityField::DispatchAttempt,
                ]);
                let (expected, received) = match field {
                    IdentityField::JobId => {
                        chunk.identity.job_id = JobId::parse("job_other").ok()?;
                        (original.identity.job_id.to_string(), "job_other".to_owned())
                    }
                    IdentityField::ClaimId => {
                        chunk.identity.claim_id = ClaimId::parse("claim_other").ok()?;
                        (
                            original.identity.claim_id.to_string(),
                            "claim_other".to_owned(),
                        )
                    }
                    IdentityField::DispatchAttempt => {
                        chunk.identity.dispatch_attempt = chunk.identity.dispatch_attempt.next()?;
                        (
                            original.identity.dispatch_attempt.to_string(),
                            chunk.identity.dispatch_attempt.to_string(),
                        )
                    }
                };
                // Re-hashing does not help: identity is checked against the claim first.
                if rng.chance(1, 2) {
                    chunk = rebuilt(&chunk);
                }
                ChunkError::IdentityChanged {
                    field,
                    expected,
                    received,
                }
            }
            8 => {
                let kind = rng.string(6);
                if kind == "log" || kind == "trajectory" {
                    return None;
                }
                let result = through_json(&|v| v["kind"] = kind.clone().into());
                return Some((result, ChunkError::BadKind { kind }));
            }
            9 => {
                let field = *rng.pick(&[
                    "jobId",
                    "sequence",
                    "payload",
                    "checksum",
                    "emittedAt",
                    "dispatchAttempt",
                ]);
                let result = through_json(&|v| {
                    v.as_object_mut().map(|m| m.remove(field));
                });
                let reason = format!("`{field}` is missing");
                return Some((result, ChunkError::Malformed { reason }));
            }
            10 => {
                // Self-consistent, but ahead of the head.
                chunk.sequence += 1 + rng.below(5);
                chunk = rebuilt(&chunk);
                ChunkError::Gap {
                    expected: original.sequence,
                    received: chunk.sequence,
                }
            }
            11 => {
                // An exact replay of an earlier chunk.
                if i == 0 {
                    return None;
                }
                let j = rng.below(i as u64) as usize;
                chunk = chunks[j].clone();
                if i - j <= RECENT_CHECKSUMS {
                    ChunkError::DuplicateChecksum
                } else {
                    ChunkError::DuplicateSequence {
                        expected: i as u64,
                        received: j as u64,
                    }
                }
            }
            12 => {
                // A different chunk claiming an earlier sequence.
                if i == 0 {
                    return None;
                }
                let j = rng.below(i as u64) as usize;
                chunk = chunks[j].clone();
                chunk.payload = json!({"different": rng.next_u64()});
                chunk = rebuilt(&chunk);
                ChunkError::DuplicateSequence {
                    expected: i as u64,
                    received: j as u64,
                }
            }
            13 => {
                // Right place, wrong predecessor.
                chunk.previous_checksum = if i > 0 && rng.chance(1, 3) {
                    None
                } else {
                    Some(other_hash)
                };
                chunk = rebuilt(&chunk);
                if i == 0 {
                    ChunkError::PreviousAtZero
                } else {
                    ChunkError::PreviousMismatch {
                        expected: chunks[i - 1].checksum.clone(),
                    }
                }
            }
            14 => {
                limits.now = limits
                    .lease_expires_at
                    .checked_add_millis(rng.below(10_000) as i64)?;
                ChunkError::LeaseExpired
            }
            15 => {
                let bytes = stable_json::stable_json(&chunk.payload).len();
                limits.max_payload_bytes = bytes - 1 - rng.below(bytes as u64) as usize;
                ChunkError::PayloadTooLarge {
                    bytes,
                    max_bytes: limits.max_payload_bytes,
                }
            }
            _ => {
                let result = through_json(&|v| v["sequence"] = json!(1.0));
                let reason =
                    "`sequence` must be a non-negative integer written as plain digits".to_owned();
                return Some((result, ChunkError::Malformed { reason }));
            }
        };
        Some((Ok(chunk), expected))
    }

    #[test]
    fn every_single_defect_is_refused_with_its_own_error() {
        let mut seen = HashSet::new();
        check(1500, |rng| {
            let (identity, chunks) = random_chain(rng, 40);
            let i = rng.below(chunks.len() as u64) as usize;
            let heads = heads(&identity, &chunks[..i]);
            let mut limits = limits();
            let Some((chunk, expected)) = mutate(rng, &chunks, i, &mut limits) else {
                return;
            };
            seen.insert(expected.code());
            let outcome = chunk.and_then(|chunk| {
                validate_append(&heads[i], &identity, &chunk, &limits).map(|a| a.head)
            });
            assert_eq!(outcome, Err(expected), "chunk {i} of {}", chunks.len());
        });
        assert_eq!(seen.len(), 12, "every error was exercised: {seen:?}");
    }
}
