-- store::releases::get_artifact
SELECT id, kind, name, created_at FROM release_artifacts
    WHERE id = ?2 AND organization_id = ?1
