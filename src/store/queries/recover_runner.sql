-- Recovery's runner update: capacity back, and an active runner is marked lost with its
-- credential generation moved on (its next call gets 401; a fresh session brings it back).
-- ?1 claim.runner_id, ?2 ctx.now, ?3 format!("job {}: {lapse}", job.id)
UPDATE runners SET active_claims = active_claims - 1,
    state = CASE WHEN state = 'active' THEN 'lost' ELSE state END,
    state_reason = CASE WHEN state = 'active' THEN ?3 ELSE state_reason END,
    credential_generation = credential_generation + CASE WHEN state = 'active' THEN 1 ELSE 0 END,
    updated_at = ?2 WHERE id = ?1
