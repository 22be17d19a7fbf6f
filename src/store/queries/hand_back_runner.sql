-- A hand-back gives the runner its capacity back; its state and credential are untouched.
-- ?1 runner, ?2 ctx.now
UPDATE runners SET active_claims = active_claims - 1, last_seen_at = ?2, updated_at = ?2 WHERE id = ?1
