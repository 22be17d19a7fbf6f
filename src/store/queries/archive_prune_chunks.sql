-- A prune batch, first: up to ?3 of an archived job's stream chunks (the schema refuses any of
-- a job whose archive is not stored). ?1 job id, ?2 organization id, ?3 archive::PRUNE_BATCH_ROWS
DELETE FROM stream_chunks WHERE rowid IN
    (SELECT rowid FROM stream_chunks WHERE job_id = ?1 AND organization_id = ?2 LIMIT ?3)
