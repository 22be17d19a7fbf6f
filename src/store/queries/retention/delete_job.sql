-- Last, the job row (the schema refuses it before it is expiring and its custody is gone).
-- ?1 job id, ?2 organization id
DELETE FROM jobs WHERE id = ?1 AND organization_id = ?2 AND expiring_at IS NOT NULL
