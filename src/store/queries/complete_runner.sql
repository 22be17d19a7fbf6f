-- An accepted completion gives the runner its capacity back.
-- ?1 runner, ?2 ctx.now
UPDATE runners SET active_claims = active_claims - 1, completed_jobs = completed_jobs + 1, last_seen_at = ?2 WHERE id = ?1
