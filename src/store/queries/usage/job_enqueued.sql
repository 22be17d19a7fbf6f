-- After a job's insert, in its batch: one more live job, when the insert made one.
-- ?1 organization id
UPDATE organization_usage SET jobs_live = jobs_live + 1
    WHERE organization_id = ?1 AND changes() = 1
