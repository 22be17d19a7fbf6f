-- store::events::for_job
SELECT id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at FROM job_events WHERE job_id = ?2 AND organization_id = ?1 ORDER BY id LIMIT ?3
