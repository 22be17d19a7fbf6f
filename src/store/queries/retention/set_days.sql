-- store::retention::set_days: 1 row for a known organization (the schema checks 1-400).
-- ?1 organization id, ?2 days
UPDATE organizations SET retention_days = ?2 WHERE id = ?1
