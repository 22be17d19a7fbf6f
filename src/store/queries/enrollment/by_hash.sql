-- store::enrollment::by_hash: The organization's token whose hash this is; another organization's
-- token is not found.
SELECT id, name, token_prefix, max_uses, uses, created_at, created_by, expires_at,
    revoked_at, last_used_at FROM enrollment_tokens WHERE organization_id = ?1 AND token_hash = ?2
