-- A heartbeat's contact time on the runner.
-- ?1 runner, ?2 ctx.now
UPDATE runners SET last_heartbeat_at = ?2, last_seen_at = ?2 WHERE id = ?1
