-- A runner's claims, newest first (?3 rows): a range of job_claims_by_runner_issued, each with
-- what its job runs (the artifact's name and the version: primary key lookups; a claim's job
-- is live, since archiving prunes its claims).
SELECT c.id, c.job_id, c.dispatch_attempt, c.state, c.issued_at, c.lease_expires_at, c.started_at,
       c.ended_at, c.end_reason, a.name AS artifact_name, j.subject_version_id AS version_id
  FROM job_claims c
  LEFT JOIN jobs j ON j.id = c.job_id
  LEFT JOIN release_artifacts a ON a.id = j.subject_artifact_id
 WHERE c.runner_id = ?2 AND c.organization_id = ?1
 ORDER BY c.issued_at DESC, c.id DESC
 LIMIT ?3
