-- store::releases::get_promotion
SELECT version_id, environment, promoted_at FROM release_promotions
    WHERE version_id = ?2 AND environment = ?3 AND organization_id = ?1
