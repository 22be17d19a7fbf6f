-- store::counters::add: ?3 more of counter ?2 of organization ?1, last in the batch that did it
-- (the batch's assertions make it count exactly what the batch committed).
INSERT INTO organization_counters (organization_id, name, value) VALUES (?1, ?2, ?3)
ON CONFLICT (organization_id, name) DO UPDATE SET value = value + excluded.value
