-- Jobs marked expiring and not yet deleted, in every organization (archived_jobs_expiring),
-- with their bundle's SHA-256 (its R2 objects' keys). ?1 at most
SELECT a.id, n.organization_id, lower(hex(a.bundle_sha256)) AS bundle_sha256
  FROM archived_jobs AS a INDEXED BY archived_jobs_expiring
  JOIN organization_numbers AS n ON n.number = a.organization_number
 WHERE a.expiring_at IS NOT NULL
 LIMIT ?1
