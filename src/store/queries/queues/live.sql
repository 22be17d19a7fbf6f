-- store::queues::read, its jobs: the organization's live jobs by queue and state, how many and
-- the oldest's creation time, from the partial index jobs_live_by_queue alone (no table row);
-- at most ?2 jobs are looked at (the view says `capped` when the read stopped there).
-- ?1 organization id, ?2 the most live jobs read
SELECT queue_id, state, count(*) AS jobs, min(created_at) AS oldest_at
  FROM (SELECT queue_id, state, created_at FROM jobs INDEXED BY jobs_live_by_queue
         WHERE organization_id = ?1 AND state IN ('queued', 'claimed', 'running', 'cancel_requested')
         LIMIT ?2)
 GROUP BY queue_id, state
