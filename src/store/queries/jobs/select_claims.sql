-- store::jobs::select_claims
SELECT id, runner_id, dispatch_attempt, state, key_id, issued_at, expires_at, lease_expires_at,
    started_at, ended_at, end_reason, last_heartbeat_at FROM job_claims WHERE job_id = ?1 ORDER BY dispatch_attempt
