-- store::releases::promote: Promotes a version of the caller's organization. Changes one row for a
-- first promotion and none when the version is already in that environment (`PRIMARY KEY
-- (version_id, environment)`: promoting twice is one promotion, and the first `promoted_at` stands)
-- or when the version is not the organization's. Put an `events::insert_if_changed` right after it
-- in the same batch so that only a real promotion is audited.
INSERT INTO release_promotions (version_id, organization_id, environment, promoted_at, promoted_by)
    SELECT ?1, ?2, ?3, ?4, ?5
    WHERE EXISTS (SELECT 1 FROM release_versions WHERE id = ?1 AND organization_id = ?2)
    ON CONFLICT (version_id, environment) DO NOTHING
