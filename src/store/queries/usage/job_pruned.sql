-- After a job's archive was marked pruned (archive_mark_pruned.sql), in its batch: a live job
-- is now an archived one. ?1 organization id
UPDATE organization_usage SET jobs_live = jobs_live - 1, jobs_archived = jobs_archived + 1
    WHERE organization_id = ?1 AND changes() = 1
