-- store::releases::get_version: version ?2 of organization ?1, with its content.
SELECT v.id, v.artifact_id, a.kind, v.content_hash, v.created_at, v.content
    FROM release_versions AS v
    JOIN release_artifacts AS a ON a.id = v.artifact_id AND a.organization_id = v.organization_id
    WHERE v.id = ?2 AND v.organization_id = ?1
