-- The job is in the state, attempt and active claim its object decided from, and (when ?5 is
-- not NULL) that claim's lease is live at ?5; an archived job (archived_jobs) holds no claim
-- and no lease. ?1 job id, ?2 state, ?3 dispatch attempt, ?4 active claim id (NULL: none), ?5
-- now, or NULL when the decision did not rely on the lease.
INSERT INTO batch_assertions (code, held)
SELECT 'job_moved', EXISTS (
    SELECT 1 FROM jobs
     WHERE id = ?1 AND state = ?2 AND dispatch_attempt = ?3 AND active_claim_id IS ?4
       AND (?5 IS NULL OR lease_expires_at > ?5))
    OR EXISTS (
    SELECT 1 FROM archived_jobs
     WHERE id = ?1 AND state = ?2 AND dispatch_attempt = ?3 AND ?4 IS NULL AND ?5 IS NULL)
