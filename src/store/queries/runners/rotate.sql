-- store::runners::rotate
UPDATE runners SET bootstrap_token_hash = ?4, bootstrap_token_expires_at = ?5,
    credential_generation = credential_generation + 1, key_id = NULL, updated_at = ?6
    WHERE id = ?2 AND organization_id = ?1 AND identity_model = 'bootstrap'
    AND state <> 'revoked' AND credential_generation = ?3
