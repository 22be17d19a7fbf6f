-- One row when the runner still holds this credential generation and is in a state that may
-- act (not revoked, not awaiting approval): the read-side twin of assert_credential_current.sql.
-- ?1 runner id, ?2 organization id, ?3 credential generation,
-- ?4 runners::authenticating_states() (JSON array).
SELECT 1 AS current FROM runners
 WHERE id = ?1 AND organization_id = ?2 AND credential_generation = ?3
   AND state IN (SELECT value FROM json_each(?4))
