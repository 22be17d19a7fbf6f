-- store::queues::read, its names: the organization's queues (at most 100, by the enqueue's cap).
-- ?1 organization id
SELECT id, name, canonical FROM queues WHERE organization_id = ?1 ORDER BY id
