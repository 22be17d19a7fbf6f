-- The runner is in the state an admin's change was decided from. ?1 runner id, ?2 organization
-- id, ?3 state.
INSERT INTO batch_assertions (code, held)
SELECT 'runner_moved', EXISTS (
    SELECT 1 FROM runners WHERE id = ?1 AND organization_id = ?2 AND state = ?3)
