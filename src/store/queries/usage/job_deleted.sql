-- In an archived job's deletion batch, before its row goes (retention/delete_job.sql): an
-- expiring job and its two R2 objects are gone, and its row's charge is freed (its
-- requirements as stored plus ?3; never below zero), when the job is there to delete.
-- ?1 job id, ?2 organization id, ?3 ARCHIVED_JOB_BYTES
UPDATE organization_usage
   SET jobs_expiring = jobs_expiring - 1, r2_objects = r2_objects - 2,
       r2_bytes = r2_bytes - (SELECT bundle_bytes FROM archived_jobs WHERE id = ?1),
       d1_bytes = max(0, d1_bytes - (SELECT ?3 + length(CAST(d.document AS BLOB))
                                       FROM archived_jobs AS a
                                       JOIN requirement_documents AS d ON d.id = a.requirements_id
                                      WHERE a.id = ?1))
 WHERE organization_id = ?2
   AND EXISTS (SELECT 1 FROM archived_jobs
                WHERE id = ?1 AND expiring_at IS NOT NULL
                  AND organization_number = (SELECT number FROM organization_numbers
                                              WHERE organization_id = ?2))
