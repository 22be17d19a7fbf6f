-- After a job's archive was marked pruned (archive_mark_pruned.sql), in its batch: a live job
-- is now an archived one, and its charge drops (never below zero) by its chunks' (from its
-- summary: stream bytes plus ?3 a chunk), its input's, and what its live row costs beyond the
-- archived row it moves to (?4). ?1 organization id, ?2 job id, ?3 CHUNK_ROW_BYTES,
-- ?4 JOB_ROW_BYTES - ARCHIVED_JOB_BYTES
UPDATE organization_usage
   SET jobs_live = jobs_live - 1, jobs_archived = jobs_archived + 1,
       d1_bytes = max(0, d1_bytes - (SELECT coalesce(stream_bytes, 0) + coalesce(stream_chunks, 0) * ?3
                                              + length(CAST(input AS BLOB)) + ?4
                                       FROM jobs WHERE id = ?2 AND organization_id = ?1))
 WHERE organization_id = ?1 AND changes() = 1
