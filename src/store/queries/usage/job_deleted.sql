-- In a job's deletion batch, before its row goes (retention/delete_job.sql ends the batch):
-- an expiring job and its two R2 objects are gone, and its row's charge is freed (never below
-- zero), when the job is there to delete. ?1 job id, ?2 organization id, ?3 JOB_ROW_BYTES
UPDATE organization_usage
   SET jobs_expiring = jobs_expiring - 1, r2_objects = r2_objects - 2,
       r2_bytes = r2_bytes - (SELECT bundle_bytes FROM jobs WHERE id = ?1),
       d1_bytes = max(0, d1_bytes - (SELECT ?3 + length(CAST(input AS BLOB)) + length(CAST(requirements AS BLOB))
                                       FROM jobs WHERE id = ?1))
 WHERE organization_id = ?2
   AND EXISTS (SELECT 1 FROM jobs WHERE id = ?1 AND organization_id = ?2 AND expiring_at IS NOT NULL)
