-- Storage per job is bounded (issue 11, item 5): what one runner can make the database hold
-- for one job is capped, and each cap is refused by name. The job's Durable Object checks every
-- cap in memory before it writes (and answers with the protocol crate's codes); the triggers
-- here are the schema's own copy of each rule, mapped by src/store/guards.rs.

-- Each chunk carries its attempt's running payload total (bytes of the stored payload text,
-- this chunk included), so the object reads the attempt's byte count from the head row it
-- already reads, and the limit costs no extra round trip. Chunks stored before this migration
-- have NULL: a stream in flight across the migration counts from its next chunk.
ALTER TABLE stream_chunks ADD COLUMN stream_bytes INTEGER CHECK (stream_bytes IS NULL OR stream_bytes >= 0);

-- The running total is exact: the predecessor's total plus this payload.
CREATE TRIGGER stream_chunks_count_their_bytes
BEFORE INSERT ON stream_chunks
WHEN NEW.stream_bytes IS NOT
     COALESCE((SELECT p.stream_bytes FROM stream_chunks AS p
                WHERE p.job_id = NEW.job_id
                  AND p.dispatch_attempt = NEW.dispatch_attempt
                  AND p.sequence = NEW.sequence - 1), 0)
     + length(CAST(NEW.payload AS BLOB))
BEGIN
    SELECT RAISE(ABORT, 'stream_bytes_miscounted');
END;

-- At most 10,000 chunks per attempt (sequences 0–9,999): edgerunner_protocol::chunk::MAX_CHUNKS_PER_ATTEMPT.
CREATE TRIGGER stream_chunks_per_attempt_are_bounded
BEFORE INSERT ON stream_chunks
WHEN NEW.sequence >= 10000
BEGIN
    SELECT RAISE(ABORT, 'stream_chunk_limit');
END;

-- At most 64 MiB of payload per attempt: edgerunner_protocol::chunk::MAX_STREAM_BYTES_PER_ATTEMPT.
CREATE TRIGGER stream_bytes_per_attempt_are_bounded
BEFORE INSERT ON stream_chunks
WHEN NEW.stream_bytes > 67108864
BEGIN
    SELECT RAISE(ABORT, 'stream_bytes_limit');
END;

-- Duplicate, conflict and stale decisions are stored in full up to 20 per job; past that the
-- job row counts them and keeps the latest one's checksum, decision and time (the runner's
-- answer is the same either way). The accepted decision is one per job (its unique index).
ALTER TABLE jobs ADD COLUMN unstored_decisions INTEGER NOT NULL DEFAULT 0 CHECK (unstored_decisions >= 0);
ALTER TABLE jobs ADD COLUMN last_unstored_checksum TEXT
    CHECK (last_unstored_checksum IS NULL OR
           (length(last_unstored_checksum) = 64 AND last_unstored_checksum NOT GLOB '*[^0-9a-f]*'));
ALTER TABLE jobs ADD COLUMN last_unstored_decision TEXT
    CHECK (last_unstored_decision IS NULL OR last_unstored_decision IN ('duplicate', 'conflict', 'stale'));
ALTER TABLE jobs ADD COLUMN last_unstored_at INTEGER;

CREATE TRIGGER job_completions_refusals_are_bounded
BEFORE INSERT ON job_completions
WHEN NEW.decision <> 'accepted'
 AND (SELECT count(*) FROM job_completions AS c
       WHERE c.job_id = NEW.job_id AND c.decision <> 'accepted') >= 20
BEGIN
    SELECT RAISE(ABORT, 'completion_decisions_at_cap');
END;
