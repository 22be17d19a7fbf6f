-- store::releases::promotions_of_artifact: The promotions of every version of an artifact.
-- ?1 organization, ?2 artifact, ?3 states::environment_order() (JSON array): in promotion order
SELECT version_id, environment, promoted_at FROM release_promotions
    WHERE organization_id = ?1
    AND version_id IN (SELECT id FROM release_versions
    WHERE artifact_id = ?2 AND organization_id = ?1)
    ORDER BY version_id, (SELECT key FROM json_each(?3) WHERE value = environment)
