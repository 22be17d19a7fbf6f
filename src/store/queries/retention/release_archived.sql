-- The same release of an archived job. ?1 job id, ?2 organization id
UPDATE archived_jobs SET held_at = NULL, held_by = NULL, held_reason = NULL
    WHERE id = ?1
      AND organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?2)
      AND held_at IS NOT NULL AND expiring_at IS NULL
