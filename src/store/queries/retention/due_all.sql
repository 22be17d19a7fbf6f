-- The cron pass's candidates, every organization by its own cut (jobs_to_expire, walked per
-- organization without a sort): archived jobs, neither held nor expiring, that finished
-- before now less the organization's retention_days. With each, that cut (expire's guard).
-- ?1 now, ?2 at most
SELECT j.id, j.organization_id, ?1 - o.retention_days * 86400000 AS cut
  FROM organizations AS o
  JOIN jobs AS j INDEXED BY jobs_to_expire
    ON j.organization_id = o.id AND j.archive_state = 'pruned' AND j.held_at IS NULL
   AND j.expiring_at IS NULL AND j.finished_at < ?1 - o.retention_days * 86400000
 LIMIT ?2
