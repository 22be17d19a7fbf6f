-- A heartbeat's lease on the claim, and when it started and last beat.
-- ?1 claim_id, ?2 lease, ?3 ctx.now, ?4 ClaimState::Active
UPDATE job_claims SET lease_expires_at = ?2, started_at = COALESCE(started_at, ?3), last_heartbeat_at = ?3 WHERE id = ?1 AND state = ?4
