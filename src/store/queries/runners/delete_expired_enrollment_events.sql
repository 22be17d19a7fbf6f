-- store::runners::delete_expired_enrollments, first: the events of each enrollment that waited
-- for approval too long (migration 0012 lets the events of a never-approved key-pair runner go).
-- ?1 cutoff (registered before it), ?2 at most this many,
-- ?3 runners::enrollment_expired_moves() (JSON object, from → to: its keys are the states an
-- enrollment expires from)
DELETE FROM job_events
 WHERE job_id IS NULL
   AND runner_id IN (SELECT id FROM runners
                      WHERE state IN (SELECT key FROM json_each(?3)) AND registered_at < ?1
                        AND approved_at IS NULL
                      ORDER BY registered_at, id LIMIT ?2)
