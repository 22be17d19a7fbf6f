-- Jobs marked expiring and not yet deleted, in every organization (jobs_expiring), with their
-- bundle's SHA-256 (its R2 objects' keys). ?1 at most
SELECT id, organization_id, bundle_sha256 FROM jobs INDEXED BY jobs_expiring
    WHERE expiring_at IS NOT NULL
    LIMIT ?1
