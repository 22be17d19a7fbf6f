-- store::events::insert
INSERT INTO job_events (organization_id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
