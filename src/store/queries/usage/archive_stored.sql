-- After a job's archive was stored (archive_store.sql), in its batch: its bundle and record
-- are in R2. ?1 organization id, ?2 the bundle's bytes
UPDATE organization_usage SET r2_objects = r2_objects + 2, r2_bytes = r2_bytes + ?2
    WHERE organization_id = ?1 AND changes() = 1
