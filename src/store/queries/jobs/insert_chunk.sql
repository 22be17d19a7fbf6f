-- store::jobs::insert_chunk
INSERT INTO stream_chunks (job_id, organization_id, claim_id, dispatch_attempt, sequence, kind,
    previous_checksum, payload, payload_hash, checksum, emitted_at, received_at, stream_bytes)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
