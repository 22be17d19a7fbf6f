-- store::releases::versions_of: An artifact's versions, newest first, without content.
SELECT v.id, v.artifact_id, a.kind, v.content_hash, v.created_at
    FROM release_versions AS v
    JOIN release_artifacts AS a ON a.id = v.artifact_id AND a.organization_id = v.organization_id
    WHERE v.artifact_id = ?2 AND v.organization_id = ?1
    ORDER BY v.id DESC LIMIT ?3
