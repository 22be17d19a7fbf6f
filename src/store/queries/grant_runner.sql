-- The grant's capacity: the CHECK (active_claims <= max_concurrent_jobs) aborts the batch when full.
-- An ephemeral runner (migration 0020) is drained by the grant of its one job, in this statement.
-- ?1 runner, ?2 ctx.now, ?3 runners::claiming_states() (JSON array), ?4 the state an ephemeral
-- runner's grant moves it to (the protocol's drain), ?5 its reason
UPDATE runners SET active_claims = active_claims + 1, last_seen_at = ?2,
       state = CASE WHEN ephemeral = 1 THEN ?4 ELSE state END,
       state_reason = CASE WHEN ephemeral = 1 THEN ?5 ELSE state_reason END,
       updated_at = CASE WHEN ephemeral = 1 THEN ?2 ELSE updated_at END
 WHERE id = ?1 AND state IN (SELECT value FROM json_each(?3))
