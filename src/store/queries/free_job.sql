-- The job off a claim that ended without a completion: queued again, or cancelled with the
-- reason unless one is already recorded.
-- ?1 job.id, ?2 claim.id, ?3 claim.dispatch_attempt, ?4 from, ?5 to, ?6 ctx.now, ?7 finished_at, ?8
-- reason, ?9 i64::from(free_hand_back), ?10 JobState::Cancelled
UPDATE jobs SET state = ?5, active_claim_id = NULL, lease_expires_at = NULL, updated_at = ?6,
    finished_at = ?7, cancel_reason = COALESCE(cancel_reason, CASE WHEN ?5 = ?10 THEN ?8 END),
    released_attempts = released_attempts + ?9
    WHERE id = ?1 AND active_claim_id = ?2 AND dispatch_attempt = ?3 AND state = ?4
