-- After the retention pass marked a job expiring (retention/expire.sql), in its batch: only
-- an archived, unheld job is marked. ?1 organization id
UPDATE organization_usage SET jobs_archived = jobs_archived - 1, jobs_expiring = jobs_expiring + 1
    WHERE organization_id = ?1 AND changes() = 1
