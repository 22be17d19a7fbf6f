-- store::releases::promotions_of_version
SELECT version_id, environment, promoted_at FROM release_promotions
    WHERE version_id = ?2 AND organization_id = ?1 ORDER BY CASE environment WHEN 'dev' THEN 0 WHEN 'staging' THEN 1 ELSE 2 END
