-- store::jobs::select_accepted
SELECT dispatch_attempt, completion_checksum FROM job_completions WHERE job_id = ?1 AND decision = 'accepted'
