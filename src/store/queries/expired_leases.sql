-- The reaper's sweep across organizations (cron, CRON_SECRET): expired leases, oldest first.
-- The IN list is spelled exactly as the partial index jobs_lease_expiry's WHERE.
SELECT id FROM jobs
 WHERE state IN ('claimed', 'running', 'cancel_requested') AND lease_expires_at <= ?1
 ORDER BY lease_expires_at
 LIMIT ?2
