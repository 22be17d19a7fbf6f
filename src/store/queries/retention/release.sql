-- An admin releases a held job that is not expiring (store::retention::release), in jobs; 0
-- rows when it is not held, expiring, archived (release_archived.sql) or unknown in the
-- organization. ?1 job id, ?2 organization id
UPDATE jobs SET held_at = NULL, held_by = NULL, held_reason = NULL
    WHERE id = ?1 AND organization_id = ?2 AND held_at IS NOT NULL AND expiring_at IS NULL
