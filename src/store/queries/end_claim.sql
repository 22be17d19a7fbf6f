-- A claim that ends without a completion (lost or handed back).
-- ?1 claim.id, ?2 ctx.now, ?3 claim_end.0, ?4 claim_end.1, ?5 ClaimState::Active
UPDATE job_claims SET state = ?3, ended_at = ?2, end_reason = ?4 WHERE id = ?1 AND state = ?5
