-- The job's deletion batch, first: the organization's count of jobs deleted by retention
-- grows by one when the job is there to delete (the batch's last statement deletes it).
-- ?1 job id, ?2 organization id
UPDATE organizations SET retention_deleted_jobs = retention_deleted_jobs + 1
    WHERE id = ?2
      AND EXISTS (SELECT 1 FROM jobs WHERE id = ?1 AND organization_id = ?2 AND expiring_at IS NOT NULL)
