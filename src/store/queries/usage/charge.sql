-- After a write the organization's quota bounds (a chunk, a release version), in its batch:
-- its bytes charged, when the write changed its row; migration 0015's trigger refuses a charge
-- past the quota, which aborts the batch. ?1 organization id, ?2 bytes, ?3 the default quota
UPDATE organization_usage
   SET d1_bytes = d1_bytes + ?2,
       d1_quota_bytes = coalesce((SELECT d1_quota_bytes FROM organizations WHERE id = ?1), ?3)
 WHERE organization_id = ?1 AND changes() = 1
