-- store::runners::rotate
-- ?7 IdentityModel::Bootstrap, ?8 runners::rotatable_states() (JSON array): the rotation rule
-- (routes::views::runners::rotation_refusal) from the protocol, not a second copy of it
UPDATE runners SET bootstrap_token_hash = ?4, bootstrap_token_expires_at = ?5,
    credential_generation = credential_generation + 1, key_id = NULL, updated_at = ?6
    WHERE id = ?2 AND organization_id = ?1 AND identity_model = ?7
    AND state IN (SELECT value FROM json_each(?8)) AND credential_generation = ?3
