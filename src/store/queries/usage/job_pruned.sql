-- After a job's archive was marked pruned (archive_mark_pruned.sql), in its batch: a live job
-- is now an archived one, and its chunks' charge is freed (from its summary: stream bytes plus
-- ?3 a chunk; never below zero). ?1 organization id, ?2 job id, ?3 CHUNK_ROW_BYTES
UPDATE organization_usage
   SET jobs_live = jobs_live - 1, jobs_archived = jobs_archived + 1,
       d1_bytes = max(0, d1_bytes - (SELECT coalesce(stream_bytes, 0) + coalesce(stream_chunks, 0) * ?3
                                       FROM jobs WHERE id = ?2 AND organization_id = ?1))
 WHERE organization_id = ?1 AND changes() = 1
