-- store::queues::register: the job's queue, named for the organization the first time a job of
-- it is enqueued, unless the organization has its ?6 queues already (the job's insert then
-- counts it in q_overflow). In the enqueue's batch, before the job's insert.
-- A queue the organization has costs one primary-key probe: its queues are counted (at most
-- ?6 rows) only for a queue it does not have yet.
-- ?1 organization id, ?2 queue id, ?3 name, ?4 canonical JSON, ?5 now, ?6 the most queues
INSERT INTO queues (organization_id, id, name, canonical, created_at)
SELECT ?1, ?2, ?3, ?4, ?5
 WHERE NOT EXISTS (SELECT 1 FROM queues WHERE organization_id = ?1 AND id = ?2)
   AND (SELECT count(*) FROM queues WHERE organization_id = ?1) < ?6
ON CONFLICT (organization_id, id) DO NOTHING
