-- store::releases::promotions_of_version
-- ?1 organization, ?2 version, ?3 states::environment_order() (JSON array): in promotion order
SELECT version_id, environment, promoted_at FROM release_promotions
    WHERE version_id = ?2 AND organization_id = ?1 ORDER BY (SELECT key FROM json_each(?3) WHERE value = environment)
