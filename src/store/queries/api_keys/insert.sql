-- store::api_keys::insert
INSERT INTO api_keys (id, organization_id, name, key_prefix, key_hash, role, scopes, created_at,
    expires_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
