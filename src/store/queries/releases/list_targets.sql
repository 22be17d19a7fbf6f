-- store::releases::list_targets: Newest first; only those of one evaluation when `evaluation_id` is
-- given.
SELECT id, target_key, repository, entrypoint, requirements, evaluation_id,
    version_id, content_hash, created_at, updated_at FROM executable_targets
    WHERE organization_id = ?1 AND evaluation_id = ?2
    ORDER BY created_at DESC, id DESC LIMIT ?3
