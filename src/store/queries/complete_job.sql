-- An accepted completion finishes the job (the claim is its active one at its attempt).
-- ?1 job.id, ?2 claim.id, ?3 attempt, ?4 job_state, ?5 ctx.now,
-- ?6 states::held_job_states() (JSON array)
UPDATE jobs SET state = ?4, active_claim_id = NULL, lease_expires_at = NULL, finished_at = ?5, updated_at = ?5
    WHERE id = ?1 AND active_claim_id = ?2 AND dispatch_attempt = ?3
    AND state IN (SELECT value FROM json_each(?6))
