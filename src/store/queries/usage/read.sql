-- store::usage::read: an organization's usage in one bounded read. Its counters (kept by
-- queries/usage/*.sql on the write path), its retention setting and quota, its oldest job (the
-- first entries of jobs_by_organization and archived_jobs_by_organization) and how many jobs
-- the retention pass would expire at its cut now (a range of archived_jobs_to_expire, counted
-- to at most ?3).
-- ?1 organization id, ?2 now, ?3 the most counted
SELECT u.jobs_live, u.jobs_archived, u.jobs_expiring, u.jobs_held, u.r2_objects, u.r2_bytes,
       u.d1_bytes, o.d1_quota_bytes AS d1_quota_override,
       o.retention_days, o.retention_deleted_jobs,
       ?2 - o.retention_days * 86400000 AS cut,
       (SELECT min(at) FROM (
            SELECT min(created_at) AS at FROM jobs WHERE organization_id = ?1
            UNION ALL
            SELECT min(created_at) AS at FROM archived_jobs WHERE organization_number = n.number))
           AS oldest_job_at,
       (SELECT count(*) FROM (SELECT 1 FROM archived_jobs INDEXED BY archived_jobs_to_expire
           WHERE organization_number = n.number AND held_at IS NULL
             AND expiring_at IS NULL AND finished_at < ?2 - o.retention_days * 86400000
           LIMIT ?3)) AS due_at_cut
  FROM organization_usage AS u
  JOIN organizations AS o ON o.id = u.organization_id
  JOIN organization_numbers AS n ON n.organization_id = u.organization_id
 WHERE u.organization_id = ?1
