-- An admin holds a finished job that is not expiring (store::retention::hold), in jobs; 0 rows
-- when it is held already, live, expiring, archived (hold_archived.sql) or unknown in the
-- organization. ?1 job id, ?2 organization id, ?3 now, ?4 who holds it, ?5 the finished
-- states, ?6 why
UPDATE jobs SET held_at = ?3, held_by = ?4, held_reason = ?6
    WHERE id = ?1 AND organization_id = ?2 AND held_at IS NULL AND expiring_at IS NULL
      AND state IN (SELECT value FROM json_each(?5))
