-- store::runners::spent_ephemeral: ephemeral runners (migration 0020) drained and holding no
-- claim, longest drained first, through the partial index runners_ephemeral_spent (whose WHERE
-- names the state as written here: a bound state would not match it). ?1 at most this many
SELECT id, organization_id FROM runners
 WHERE ephemeral = 1 AND state = 'draining' AND active_claims = 0
 ORDER BY updated_at, id LIMIT ?1
