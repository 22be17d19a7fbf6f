-- The same hold of an archived job (every archived job is finished); 0 rows when it is held
-- already, expiring or not archived in the organization.
-- ?1 job id, ?2 organization id, ?3 now, ?4 who holds it, ?5 the finished states, ?6 why
UPDATE archived_jobs SET held_at = ?3, held_by = ?4, held_reason = ?6
    WHERE id = ?1
      AND organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?2)
      AND held_at IS NULL AND expiring_at IS NULL AND state IN (SELECT value FROM json_each(?5))
