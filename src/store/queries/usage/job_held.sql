-- After a hold (retention/hold.sql, ?2 = 1) or a release (retention/release.sql, ?2 = -1), in
-- its batch. ?1 organization id, ?2 the change
UPDATE organization_usage SET jobs_held = jobs_held + ?2
    WHERE organization_id = ?1 AND changes() = 1
