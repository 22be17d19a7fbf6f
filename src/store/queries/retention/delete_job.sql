-- Then the archived row (the schema refuses it before it is expiring and its custody is gone).
-- ?1 job id, ?2 organization id
DELETE FROM archived_jobs
    WHERE id = ?1 AND expiring_at IS NOT NULL
      AND organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?2)
