-- The reaper's sweep for one organization (an admin's reap), on jobs_lease_expiry_by_organization.
SELECT id FROM jobs
 WHERE organization_id = ?1 AND state IN ('claimed', 'running', 'cancel_requested') AND lease_expires_at <= ?2
 ORDER BY lease_expires_at
 LIMIT ?3
