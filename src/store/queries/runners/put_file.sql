-- store::runners::put_file
INSERT INTO runner_files (runner_id, organization_id, name, content, content_hash, uploaded_at)
    SELECT ?2, ?1, ?3, ?4, ?5, ?6
    WHERE (SELECT count(*) FROM runner_files WHERE runner_id = ?2 AND name <> ?3) < ?7
    AND (SELECT coalesce(sum(length(CAST(content AS BLOB))), 0) FROM runner_files
    WHERE runner_id = ?2 AND name <> ?3) + length(CAST(?4 AS BLOB)) <= ?8
    ON CONFLICT (runner_id, name) DO UPDATE SET content = excluded.content,
    content_hash = excluded.content_hash, uploaded_at = excluded.uploaded_at
