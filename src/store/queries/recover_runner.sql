-- Recovery's runner update: capacity back, and the protocol's lease_lost move applied to the
-- runner's state as it is now (the job object does not know it): an active runner is marked
-- lost and its credential generation moves on (its next call gets 401; a fresh session brings
-- it back); the states lease_lost leaves alone keep their state, reason and generation.
-- ?1 claim.runner_id, ?2 ctx.now, ?3 format!("job {}: {lapse}", job.id),
-- ?4 runners::lease_lost_moves() (JSON object, from → to; only the states it changes),
-- ?5 runners::lease_lost_retiring() (JSON array of the states whose move retires the credential)
-- State names are CHECK-pinned identifiers, so '$.' || state is a plain key path.
UPDATE runners SET active_claims = active_claims - 1,
    state = COALESCE(json_extract(?4, '$.' || state), state),
    state_reason = CASE WHEN json_extract(?4, '$.' || state) IS NULL THEN state_reason ELSE ?3 END,
    credential_generation = credential_generation + (state IN (SELECT value FROM json_each(?5))),
    updated_at = ?2 WHERE id = ?1
