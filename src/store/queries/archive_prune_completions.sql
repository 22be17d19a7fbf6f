-- A prune batch, second: up to ?3 of an archived job's completion decisions (its evidence
-- custody stays). ?1 job id, ?2 organization id, ?3 archive::PRUNE_BATCH_ROWS
DELETE FROM job_completions WHERE id IN
    (SELECT id FROM job_completions WHERE job_id = ?1 AND organization_id = ?2 LIMIT ?3)
