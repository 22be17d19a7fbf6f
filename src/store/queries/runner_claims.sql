-- A runner's claims, newest first (?3 rows): a range of job_claims_by_runner_issued.
SELECT id, job_id, dispatch_attempt, state, issued_at, lease_expires_at, started_at, ended_at, end_reason
  FROM job_claims
 WHERE runner_id = ?2 AND organization_id = ?1
 ORDER BY issued_at DESC, id DESC
 LIMIT ?3
