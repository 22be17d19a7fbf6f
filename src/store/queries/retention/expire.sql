-- Marks an archived job expiring, guarded by what made it due (the schema checks the same);
-- the job as its deletion needs it, or no row when the guard did not hold.
-- ?1 job id, ?2 organization id, ?3 now, ?4 the cut (finished before it)
UPDATE archived_jobs SET expiring_at = ?3
    WHERE id = ?1
      AND organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?2)
      AND held_at IS NULL AND expiring_at IS NULL AND finished_at < ?4
    RETURNING id, ?2 AS organization_id, lower(hex(bundle_sha256)) AS bundle_sha256
