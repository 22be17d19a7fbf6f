-- store::jobs::select_bindable_version_of_key: The [`BindableVersion`] named, in the organization
-- of the API key whose hash is `key_hash`.
SELECT v.content_hash, a.kind, a.name,
    EXISTS (SELECT 1 FROM release_promotions p WHERE p.version_id = v.id AND p.environment = ?4) AS promoted
    FROM release_versions v JOIN release_artifacts a ON a.id = v.artifact_id AND a.organization_id = v.organization_id
    WHERE v.id = ?3 AND v.organization_id = (SELECT organization_id FROM api_keys WHERE key_hash = ?1 AND revoked_at IS NULL) AND v.artifact_id = ?2
