-- An accepted completion ends its claim.
-- ?1 claim.id, ?2 ctx.now
UPDATE job_claims SET state = 'released', ended_at = ?2, end_reason = 'completed' WHERE id = ?1 AND state = 'active'
