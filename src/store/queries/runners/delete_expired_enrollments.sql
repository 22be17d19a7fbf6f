-- store::runners::delete_expired_enrollments, last: each enrollment that waited too long for
-- approval is deleted (its fingerprint may enroll again). ?1 cutoff, ?2 at most this many,
-- ?3 runners::enrollment_expired_moves() (JSON object, from → to)
DELETE FROM runners
 WHERE id IN (SELECT id FROM runners
               WHERE state IN (SELECT key FROM json_each(?3)) AND registered_at < ?1
                 AND approved_at IS NULL
               ORDER BY registered_at, id LIMIT ?2)
