-- store::runners::set_tags
UPDATE runners SET tags = ?3, updated_at = ?4 WHERE id = ?2 AND organization_id = ?1 AND state <> 'revoked'
