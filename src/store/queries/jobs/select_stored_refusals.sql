-- store::jobs::select_stored_refusals: How many non-accepted decisions the job has stored
-- ([`StoredRefusals`]). ?1 job id, ?2 Decision::Accepted
SELECT count(*) AS stored FROM job_completions WHERE job_id = ?1 AND decision <> ?2
