-- store::api_keys::revoke: Revokes a live key of the organization; 0 rows when it is unknown,
-- foreign or already revoked.
UPDATE api_keys SET revoked_at = ?3 WHERE organization_id = ?1 AND id = ?2 AND revoked_at IS NULL
