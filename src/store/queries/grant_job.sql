-- The grant's job update: queued at attempt n - 1 → claimed at attempt n.
-- ?1 job.id, ?2 org, ?3 attempt, ?4 claim_id, ?5 lease, ?6 ctx.now, ?7 JobState::Claimed,
-- ?8 JobState::Queued
UPDATE jobs SET state = ?7, dispatch_attempt = ?3, active_claim_id = ?4, lease_expires_at = ?5,
    updated_at = ?6 WHERE id = ?1 AND organization_id = ?2 AND state = ?8 AND dispatch_attempt = ?3 - 1
