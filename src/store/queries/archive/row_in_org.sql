-- store::archive::select_row: a job's archive, within its organization (the reads of a job
-- ask it in the same batch as what they read, so that they know where the job's rows are). A
-- job the retention pass marked expiring is not found: it answers as a deleted one.
-- ?1 organization id, ?2 job id
SELECT organization_id, state, finished_at, archive_state, bundle_sha256, bundle_bytes,
    stream_chunks, stream_bytes, stream_head, archived_at FROM jobs WHERE id = ?2 AND organization_id = ?1
    AND expiring_at IS NULL
UNION ALL
SELECT organization_id, state, finished_at, archive_state, bundle_sha256, bundle_bytes,
    stream_chunks, stream_bytes, stream_head, archived_at FROM archived_job_rows
    WHERE id = ?2 AND organization_id = ?1 AND expiring_at IS NULL
