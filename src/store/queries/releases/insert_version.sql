-- store::releases::insert_version: Inserts a version of an artifact of the caller's organization
-- and returns its new id, or `None` when no such artifact exists there (the guard; the composite
-- foreign key agrees).
INSERT INTO release_versions (artifact_id, organization_id, content, content_hash, created_at)
    SELECT ?1, ?2, ?3, ?4, ?5
    WHERE EXISTS (SELECT 1 FROM release_artifacts WHERE id = ?1 AND organization_id = ?2)
    RETURNING id
