-- After a job's insert, in its batch: one more live job, and its row charged to the
-- organization's quota (migration 0015: input and requirements as stored, plus ?3), when the
-- insert made one. ?1 organization id, ?2 job id, ?3 JOB_ROW_BYTES, ?4 the default quota
UPDATE organization_usage
   SET jobs_live = jobs_live + 1,
       d1_bytes = d1_bytes + (SELECT ?3 + length(CAST(input AS BLOB)) + length(CAST(requirements AS BLOB))
                                FROM jobs WHERE id = ?2 AND organization_id = ?1),
       d1_quota_bytes = coalesce((SELECT d1_quota_bytes FROM organizations WHERE id = ?1), ?4)
 WHERE organization_id = ?1 AND changes() = 1
