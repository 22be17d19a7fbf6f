-- A prune batch, last: an archived job's claims (at most 8), once no chunk, completion or event
-- of the job is left to name one. ?1 job id, ?2 organization id, ?3 archive::PRUNE_BATCH_ROWS
DELETE FROM job_claims WHERE rowid IN
    (SELECT rowid FROM job_claims WHERE job_id = ?1 AND organization_id = ?2 LIMIT ?3)
    AND NOT EXISTS (SELECT 1 FROM stream_chunks WHERE job_id = ?1)
    AND NOT EXISTS (SELECT 1 FROM job_completions WHERE job_id = ?1)
    AND NOT EXISTS (SELECT 1 FROM job_events WHERE job_id = ?1)
