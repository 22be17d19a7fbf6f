-- store::api_keys::by_hash: the key with SHA-256 ?1, live or revoked.
SELECT id, organization_id, name, key_prefix, role, scopes, created_at, last_used_at, revoked_at, expires_at FROM api_keys WHERE key_hash = ?1
