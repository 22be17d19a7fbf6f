-- The cron pass's candidates, every organization by its own cut (archived_jobs_to_expire,
-- walked per organization without a sort: CROSS JOIN keeps that order): archived jobs, neither
-- held nor expiring, that finished before now less the organization's retention_days. With
-- each, that cut (expire's guard). ?1 now, ?2 at most
SELECT a.id, o.id AS organization_id, ?1 - o.retention_days * 86400000 AS cut
  FROM organizations AS o
  CROSS JOIN organization_numbers AS n
  CROSS JOIN archived_jobs AS a INDEXED BY archived_jobs_to_expire
 WHERE n.organization_id = o.id AND a.organization_number = n.number
   AND a.held_at IS NULL AND a.expiring_at IS NULL
   AND a.finished_at < ?1 - o.retention_days * 86400000
 LIMIT ?2
