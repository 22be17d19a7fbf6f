-- store::runners::delete_expired_enrollments, third: challenges of each expired enrollment
-- (none is issued to a runner that cannot authenticate; deleted so that the foreign key can
-- never hold the pass back). ?1 cutoff, ?2 at most this many,
-- ?3 runners::enrollment_expired_moves() (JSON object, from → to)
DELETE FROM runner_challenges
 WHERE runner_id IN (SELECT id FROM runners
                      WHERE state IN (SELECT key FROM json_each(?3)) AND registered_at < ?1
                        AND approved_at IS NULL
                      ORDER BY registered_at, id LIMIT ?2)
