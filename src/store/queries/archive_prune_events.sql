-- A prune batch, third: up to ?3 of an archived job's events (its timeline is in its record).
-- ?1 job id, ?2 organization id, ?3 archive::PRUNE_BATCH_ROWS
DELETE FROM job_events WHERE id IN
    (SELECT id FROM job_events WHERE job_id = ?1 AND organization_id = ?2 ORDER BY id LIMIT ?3)
