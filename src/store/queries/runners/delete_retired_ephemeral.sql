-- store::runners::delete_retired_ephemeral, last: each ephemeral runner revoked before
-- ?1 that nothing of its job names any more (the partial index runners_ephemeral_retired;
-- migration 0020), at most ?2 of them.
DELETE FROM runners
 WHERE id IN (SELECT id FROM runners
                      WHERE ephemeral = 1 AND state = 'revoked' AND revoked_at < ?1
                        AND NOT EXISTS (SELECT 1 FROM job_claims AS c WHERE c.runner_id = runners.id)
                        AND NOT EXISTS (SELECT 1 FROM job_events AS e
                                         WHERE e.runner_id = runners.id AND e.job_id IS NOT NULL)
                      ORDER BY revoked_at, id LIMIT ?2)
