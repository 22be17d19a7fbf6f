-- store::releases::promotions_of_artifact: The promotions of every version of an artifact.
SELECT version_id, environment, promoted_at FROM release_promotions
    WHERE organization_id = ?1
    AND version_id IN (SELECT id FROM release_versions
    WHERE artifact_id = ?2 AND organization_id = ?1)
    ORDER BY version_id, CASE environment WHEN 'dev' THEN 0 WHEN 'staging' THEN 1 ELSE 2 END
