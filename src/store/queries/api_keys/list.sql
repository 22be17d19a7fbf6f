-- store::api_keys::list
SELECT id, organization_id, name, key_prefix, role, scopes, created_at, last_used_at, revoked_at, expires_at FROM api_keys WHERE organization_id = ?1 ORDER BY created_at, id
