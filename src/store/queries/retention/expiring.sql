-- Jobs marked expiring and not yet deleted in one organization (archived_jobs_expiring), with
-- their bundle's SHA-256 (its R2 objects' keys). ?1 organization id, ?2 at most
SELECT a.id, ?1 AS organization_id, lower(hex(a.bundle_sha256)) AS bundle_sha256
  FROM archived_jobs AS a INDEXED BY archived_jobs_expiring
 WHERE a.organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?1)
   AND a.expiring_at IS NOT NULL
 ORDER BY a.expiring_at LIMIT ?2
