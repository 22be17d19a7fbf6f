-- store::runners::expire_enrollments, last: the protocol's enrollment_expired move applied to
-- each enrollment that waited too long (pending_approval → revoked), its machine facts cleared;
-- the row and its audit event stay, as every revoked identity's do.
-- ?1 cutoff, ?2 at most this many, ?3 now,
-- ?4 runners::enrollment_expired_moves() (JSON object, from → to)
-- State names are CHECK-pinned identifiers, so '$.' || state is a plain key path.
UPDATE runners SET state = json_extract(?4, '$.' || state), revoked_at = ?3, updated_at = ?3,
       state_reason = 'enrollment expired before approval', machine = NULL
 WHERE id IN (SELECT id FROM runners
               WHERE state IN (SELECT key FROM json_each(?4)) AND registered_at < ?1
               ORDER BY registered_at, id LIMIT ?2)
