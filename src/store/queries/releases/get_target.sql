-- store::releases::get_target
SELECT id, target_key, repository, entrypoint, requirements, evaluation_id,
    version_id, content_hash, created_at, updated_at FROM executable_targets WHERE id = ?2 AND organization_id = ?1
