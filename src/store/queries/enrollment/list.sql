-- store::enrollment::list: The newest `limit` tokens of the organization, newest first.
SELECT id, name, token_prefix, max_uses, uses, created_at, created_by, expires_at,
    revoked_at, last_used_at FROM enrollment_tokens WHERE organization_id = ?1
    ORDER BY created_at DESC, id DESC LIMIT ?2
