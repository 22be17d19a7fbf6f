-- store::enrollment::revoke: Revokes a token of the organization not yet revoked; 0 rows when it is
-- unknown, foreign or already revoked.
UPDATE enrollment_tokens SET revoked_at = ?3
    WHERE organization_id = ?1 AND id = ?2 AND revoked_at IS NULL
