-- store::history::sample: the cron pass's sample of each organization (at most ?3, by id) into
-- its five-minute bucket ?1: the jobs queued and held by runners now (ranges of
-- jobs_by_organization_state), the busy and total job slots of its active runners seen since ?2
-- (the queues view's online rule; a range of runners_by_organization_state), and its
-- finished-job counter (primary key lookups in organization_counters). An organization with
-- nothing to show (no live job, no online slot, no job finished since its last row) is left
-- out. A bucket's first sample takes the previous row's total as its base; later ones keep
-- the peaks, add the slots and move the total. queue_history_keeps_a_day bounds the rows.
-- ?4 JobState::Queued, ?5 states::held_job_states() (JSON array), ?6 RunnerState::Active
INSERT INTO queue_history (organization_id, bucket_at, samples, queued, running, busy_slots,
                           slots, finished_base, finished_total)
SELECT organization_id, ?1, 1, queued, running, busy_slots, slots,
       min(coalesce(last_total, finished_total), finished_total), finished_total
  FROM (
    SELECT o.id AS organization_id,
           (SELECT count(*) FROM jobs j
             WHERE j.organization_id = o.id AND j.state = ?4) AS queued,
           (SELECT count(*) FROM jobs j
             WHERE j.organization_id = o.id
               AND j.state IN (SELECT value FROM json_each(?5) AS states)) AS running,
           (SELECT coalesce(sum(r.active_claims), 0) FROM runners r
             WHERE r.organization_id = o.id AND r.state = ?6
               AND r.last_seen_at >= ?2) AS busy_slots,
           (SELECT coalesce(sum(r.max_concurrent_jobs), 0) FROM runners r
             WHERE r.organization_id = o.id AND r.state = ?6
               AND r.last_seen_at >= ?2) AS slots,
           (SELECT coalesce(sum(c.value), 0) FROM organization_counters c
             WHERE c.organization_id = o.id
               AND c.name IN ('completions_succeeded', 'completions_failed',
                              'completions_cancelled', 'attempts_exhausted')) AS finished_total,
           (SELECT h.finished_total FROM queue_history h
             WHERE h.organization_id = o.id
             ORDER BY h.bucket_at DESC LIMIT 1) AS last_total
      FROM organizations o
     ORDER BY o.id
     LIMIT ?3)
 WHERE queued > 0 OR running > 0 OR slots > 0 OR finished_total <> coalesce(last_total, 0)
ON CONFLICT (organization_id, bucket_at) DO UPDATE SET
    samples = samples + 1,
    queued = max(queued, excluded.queued),
    running = max(running, excluded.running),
    busy_slots = busy_slots + excluded.busy_slots,
    slots = slots + excluded.slots,
    finished_total = max(finished_total, excluded.finished_total)
