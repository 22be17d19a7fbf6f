-- store::enrollment::insert: The insert; the schema refuses the 101st live token of an organization
-- (`enrollment_tokens_at_cap`).
INSERT INTO enrollment_tokens (id, organization_id, name, token_prefix, token_hash, max_uses,
    created_at, created_by, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
