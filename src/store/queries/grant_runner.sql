-- The grant's capacity: the CHECK (active_claims <= max_concurrent_jobs) aborts the batch when full.
-- ?1 runner, ?2 ctx.now, ?3 runners::claiming_states() (JSON array)
UPDATE runners SET active_claims = active_claims + 1, last_seen_at = ?2
 WHERE id = ?1 AND state IN (SELECT value FROM json_each(?3))
