-- store::jobs::select_stored_refusals: How many non-accepted decisions the job has stored
-- ([`StoredRefusals`]).
SELECT count(*) AS stored FROM job_completions WHERE job_id = ?1 AND decision <> 'accepted'
