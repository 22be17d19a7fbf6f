-- The grant's capacity: the CHECK (active_claims <= max_concurrent_jobs) aborts the batch when full.
-- ?1 runner, ?2 ctx.now
UPDATE runners SET active_claims = active_claims + 1, last_seen_at = ?2 WHERE id = ?1 AND state = 'active'
