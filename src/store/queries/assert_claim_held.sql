-- Claim ?1 is held by runner ?2 of organization ?3: what a job object that knows nothing of its
-- job presumes of a heartbeat's claim (with assert_job_as_known: that claim is the job's active
-- one). ?1 claim id, ?2 runner id, ?3 organization id.
INSERT INTO batch_assertions (code, held)
SELECT 'job_moved', EXISTS (
    SELECT 1 FROM job_claims WHERE id = ?1 AND runner_id = ?2 AND organization_id = ?3)
