-- Jobs marked expiring and not yet deleted in one organization (jobs_expiring), with their
-- bundle's SHA-256 (its R2 objects' keys). ?1 organization id, ?2 at most
SELECT id, organization_id, bundle_sha256 FROM jobs INDEXED BY jobs_expiring
    WHERE organization_id = ?1 AND expiring_at IS NOT NULL
    ORDER BY expiring_at, id LIMIT ?2
