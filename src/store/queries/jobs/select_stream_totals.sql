-- store::jobs::select_stream_totals: Each attempt's stream in sum ([`StreamTotal`]): its chunk
-- count and payload bytes, read from its last chunk (one primary-key seek per attempt).
WITH RECURSIVE n (attempt) AS
    (SELECT 1 UNION ALL SELECT attempt + 1 FROM n WHERE attempt < ?3)
    SELECT s.dispatch_attempt, s.sequence + 1 AS chunks, s.stream_bytes, s.checksum AS last_checksum
    FROM n
    JOIN stream_chunks AS s ON s.job_id = ?2 AND s.dispatch_attempt = n.attempt
    AND s.sequence = (SELECT max(t.sequence) FROM stream_chunks AS t
    WHERE t.job_id = ?2 AND t.dispatch_attempt = n.attempt)
    WHERE s.organization_id = ?1
    ORDER BY s.dispatch_attempt
