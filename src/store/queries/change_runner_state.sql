-- An admin's lifecycle move, decided in Rust by the protocol's runner machine from the state
-- the caller read, and guarded by that state. What the move stamps is decided there too
-- (runners::change_state): NULL keeps the column as it is.
-- ?1 organization, ?2 runner, ?3 from, ?4 to, ?5 reason, ?6 ctx.now,
-- ?7 key id (NULL keeps it), ?8 approved_at (ctx.now on approval, else NULL),
-- ?9 revoked_at (ctx.now on revocation, else NULL), ?10 1 if the move retires the credential
-- generation, else 0
UPDATE runners SET state = ?4, state_reason = ?5, updated_at = ?6,
    approved_at = COALESCE(?8, approved_at),
    revoked_at = COALESCE(?9, revoked_at),
    credential_generation = credential_generation + ?10,
    key_id = COALESCE(?7, key_id)
WHERE id = ?2 AND organization_id = ?1 AND state = ?3
