-- store::jobs::select_completion_ids: The job's completion ids, oldest first ([`CompletionId`]s):
-- the bundle reads each whole later.
SELECT id FROM job_completions WHERE job_id = ?2 AND organization_id = ?1 ORDER BY received_at, id
