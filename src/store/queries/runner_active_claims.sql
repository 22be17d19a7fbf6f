-- The claims a runner holds now (at most its capacity, ?3 rows), oldest first: a range of
-- job_claims_by_runner (runner_id, state, issued_at). ?1 organization, ?2 runner, ?4 ClaimState::Active
SELECT id, job_id, dispatch_attempt, state, issued_at, lease_expires_at, started_at, ended_at, end_reason
  FROM job_claims
 WHERE runner_id = ?2 AND organization_id = ?1 AND state = ?4
 ORDER BY issued_at
 LIMIT ?3
