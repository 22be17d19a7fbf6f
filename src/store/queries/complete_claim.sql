-- An accepted completion ends its claim.
-- ?1 claim.id, ?2 ctx.now, ?3 ClaimState::Released, ?4 ClaimState::Active
UPDATE job_claims SET state = ?3, ended_at = ?2, end_reason = 'completed' WHERE id = ?1 AND state = ?4
