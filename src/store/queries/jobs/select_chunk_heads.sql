-- store::jobs::select_chunk_heads: The first `limit` chunks of the job's stream without payloads
-- ([`ChunkRow`]s), in order: a range of the primary key. The rest is read with `GET
-- …/stream?after=`.
SELECT dispatch_attempt, sequence, kind, previous_checksum, payload_hash, checksum, emitted_at, received_at, claim_id
    FROM stream_chunks WHERE job_id = ?2 AND organization_id = ?1 ORDER BY dispatch_attempt, sequence LIMIT ?3
