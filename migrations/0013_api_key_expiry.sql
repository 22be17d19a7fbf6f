-- API keys expire (issue 41). A key made through POST /api/developer/api-keys lives
-- expiresInDays (1-365, default 90) and is refused once it has ended, as a revoked one is.
-- Keys made before this migration, and the first admin key scripts/bootstrap-admin writes (the
-- operator's own, made with database access), have none (NULL): they keep working until
-- revoked. No existing key is shortened here: a deployment that wants its old keys to end
-- revokes them and makes new ones.
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER
    CHECK (expires_at IS NULL OR expires_at > created_at);
