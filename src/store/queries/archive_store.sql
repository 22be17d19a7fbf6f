-- A job's archive, stored (store::archive::store): its summary, written once its bundle and
-- record were read back from R2 and checked. Guarded by the stage and by what the bundle was
-- written from: the job is finished and not archived, and holds exactly the completion
-- decisions (stored and counted) it held when its bundle was read, so a decision recorded
-- since cannot be pruned away unarchived.
-- ?1 job id, ?2 organization id, ?3 bundle SHA-256, ?4 bundle bytes, ?5 stream chunks, ?6 stream
-- bytes, ?7 stream head (NULL without a stream), ?8 archived at, ?9 completions stored when the
-- bundle was read, ?10 unstored decisions then, ?11 ArchiveState::Stored,
-- ?12 states::terminal_job_states() (JSON array)
UPDATE jobs SET archive_state = ?11, bundle_sha256 = ?3, bundle_bytes = ?4,
    stream_chunks = ?5, stream_bytes = ?6, stream_head = ?7, archived_at = ?8
    WHERE id = ?1 AND organization_id = ?2 AND archive_state IS NULL
    AND state IN (SELECT value FROM json_each(?12))
    AND unstored_decisions = ?10
    AND (SELECT count(*) FROM job_completions WHERE job_id = ?1) = ?9
