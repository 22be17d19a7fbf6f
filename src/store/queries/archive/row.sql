-- store::archive::row: a job's archive as its own object reads it (by id; the row names its
-- organization), from jobs or, once pruned, archived_jobs. ?1 job id
SELECT organization_id, state, finished_at, archive_state, bundle_sha256, bundle_bytes,
    stream_chunks, stream_bytes, stream_head, archived_at FROM jobs WHERE id = ?1
UNION ALL
SELECT organization_id, state, finished_at, archive_state, bundle_sha256, bundle_bytes,
    stream_chunks, stream_bytes, stream_head, archived_at FROM archived_job_rows WHERE id = ?1
