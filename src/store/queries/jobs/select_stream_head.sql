-- store::jobs::select_stream_head: The newest chunks of the job's current attempt, newest first
-- (the chain head and the recent checksums the duplicate check remembers).
SELECT sequence, checksum, stream_bytes FROM stream_chunks
    WHERE job_id = ?1 AND dispatch_attempt = (SELECT dispatch_attempt FROM jobs WHERE id = ?1)
    ORDER BY sequence DESC LIMIT ?2
