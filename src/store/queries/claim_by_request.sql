-- The runner's active claim granted for this request id, if any: what a retried claim answers
-- (migration 0008). ?1 runner id, ?2 request id.
SELECT id, job_id, runner_id, dispatch_attempt, issued_at, expires_at, lease_expires_at, signed_job
  FROM job_claims
 WHERE runner_id = ?1 AND request_id = ?2 AND state = 'active'
