-- store::jobs::bundle_claims
SELECT id, runner_id, dispatch_attempt, state, signed_job FROM job_claims
    WHERE job_id = ?2 AND organization_id = ?1 ORDER BY dispatch_attempt
