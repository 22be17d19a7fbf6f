-- A page of a job's stream with payloads, in order, after a cursor (?3 attempt, ?4 sequence),
-- within attempts ?5..?6: at most ?7 chunks, and chunks only while the bytes before them stay
-- under ?8 (so one page holds at most ?8 plus one chunk's 256 KiB, whatever the stream holds).
-- The inner range is the primary key (job_id, dispatch_attempt, sequence).
SELECT dispatch_attempt, sequence, kind, claim_id, previous_checksum, payload, payload_hash,
       checksum, emitted_at, received_at, page_rows
  FROM (SELECT page.*,
               SUM(length(CAST(payload AS BLOB))) OVER (ORDER BY dispatch_attempt, sequence) AS running_bytes,
               COUNT(*) OVER () AS page_rows
          FROM (SELECT dispatch_attempt, sequence, kind, claim_id, previous_checksum, payload,
                       payload_hash, checksum, emitted_at, received_at
                  FROM stream_chunks
                 WHERE job_id = ?2 AND organization_id = ?1
                   AND (dispatch_attempt, sequence) > (?3, ?4)
                   AND dispatch_attempt BETWEEN ?5 AND ?6
                 ORDER BY dispatch_attempt, sequence
                 LIMIT ?7) AS page)
 WHERE running_bytes - length(CAST(payload AS BLOB)) < ?8
 ORDER BY dispatch_attempt, sequence
