-- Marks a job expiring, guarded by what made it due (the schema checks the same); the job as
-- its deletion needs it, or no row when the guard did not hold.
-- ?1 job id, ?2 organization id, ?3 now, ?4 the cut (finished before it)
UPDATE jobs SET expiring_at = ?3
    WHERE id = ?1 AND organization_id = ?2 AND archive_state = 'pruned' AND held_at IS NULL
      AND expiring_at IS NULL AND finished_at < ?4
    RETURNING id, organization_id, bundle_sha256
