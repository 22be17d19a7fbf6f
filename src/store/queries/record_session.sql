-- A fresh session proves the runner alive: record contact, and apply the protocol's
-- session_proven move to the runner's state as it is now (a lost runner returns to active).
-- Guarded by the states that may authenticate at all and by the credential generation the
-- session was decided on: a rotation or revocation in between changes nothing.
-- ?1 runner, ?2 ctx.now, ?3 credential generation, ?4 job-signing key id,
-- ?5 runners::authenticating_states() (JSON array),
-- ?6 runners::session_proven_moves() (JSON object, from → to; only the states it changes),
-- ?7 the state reason recorded with a move
-- State names are CHECK-pinned identifiers, so '$.' || state is a plain key path.
UPDATE runners SET last_seen_at = ?2, updated_at = ?2, key_id = ?4,
    state = COALESCE(json_extract(?6, '$.' || state), state),
    state_reason = CASE WHEN json_extract(?6, '$.' || state) IS NULL THEN state_reason ELSE ?7 END
WHERE id = ?1 AND state IN (SELECT value FROM json_each(?5)) AND credential_generation = ?3
