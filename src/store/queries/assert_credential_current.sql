-- The runner still holds this credential generation and is in a state that may act (one that
-- may authenticate: not revoked, not awaiting approval). ?1 runner id, ?2 organization id,
-- ?3 credential generation, ?4 runners::authenticating_states() (JSON array).
INSERT INTO batch_assertions (code, held)
SELECT 'credential_revoked', EXISTS (
    SELECT 1 FROM runners
     WHERE id = ?1 AND organization_id = ?2 AND credential_generation = ?3
       AND state IN (SELECT value FROM json_each(?4)))
