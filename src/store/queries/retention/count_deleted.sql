-- The job's deletion batch, first: the organization's count of jobs deleted by retention
-- grows by one when the job is there to delete (the batch deletes it further on).
-- ?1 job id, ?2 organization id
UPDATE organizations SET retention_deleted_jobs = retention_deleted_jobs + 1
    WHERE id = ?2
      AND EXISTS (SELECT 1 FROM archived_jobs
                   WHERE id = ?1 AND expiring_at IS NOT NULL
                     AND organization_number = (SELECT number FROM organization_numbers
                                                 WHERE organization_id = ?2))
