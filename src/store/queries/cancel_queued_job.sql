-- A cancel of a job that holds no claim: cancelled at once.
-- ?1 job.id, ?2 org, ?3 state, ?4 reason, ?5 ctx.now, ?6 JobState::Cancelled
UPDATE jobs SET state = ?6, cancel_reason = ?4, cancel_requested_at = ?5, finished_at = ?5, updated_at = ?5
    WHERE id = ?1 AND organization_id = ?2 AND state = ?3 AND active_claim_id IS NULL
