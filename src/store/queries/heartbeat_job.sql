-- A heartbeat's lease (and claimed → running on the first one).
-- ?1 job.id, ?2 claim_id, ?3 claim.dispatch_attempt, ?4 lease, ?5 next_state, ?6 ctx.now, ?7 state
UPDATE jobs SET lease_expires_at = ?4, state = ?5, updated_at = ?6
    WHERE id = ?1 AND active_claim_id = ?2 AND dispatch_attempt = ?3 AND state = ?7
