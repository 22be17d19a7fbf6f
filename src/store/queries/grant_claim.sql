-- The grant's claim row, written first while the job is still queued (migration 0001's
-- trigger requires exactly that).
-- ?1 claim_id, ?2 job.id, ?3 org, ?4 runner, ?5 attempt, ?6 nonce, ?7 signing.key_id, ?8 issued, ?9
-- expires, ?10 lease, ?11 signed.to_string(), ?12 request_id
INSERT INTO job_claims (id, job_id, organization_id, runner_id, dispatch_attempt, nonce, key_id,
    issued_at, expires_at, lease_expires_at, signed_job, request_id)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
