-- store::history::read: the organization's buckets from ?2 on, oldest first (at most ?3): a
-- range of queue_history's primary key.
SELECT bucket_at, samples, queued, running, busy_slots, slots, finished_base, finished_total
  FROM queue_history
 WHERE organization_id = ?1 AND bucket_at >= ?2
 ORDER BY bucket_at
 LIMIT ?3
