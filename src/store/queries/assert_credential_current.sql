-- The runner still holds this credential generation and may act (not revoked, not awaiting
-- approval). ?1 runner id, ?2 organization id, ?3 credential generation.
INSERT INTO batch_assertions (code, held)
SELECT 'credential_revoked', EXISTS (
    SELECT 1 FROM runners
     WHERE id = ?1 AND organization_id = ?2 AND credential_generation = ?3
       AND state NOT IN ('revoked', 'pending_approval'))
