-- store::runners::files: The runner's files in name order: the first `limit` after `after` (a
-- name), or from the start. A record lists one such page of [`MAX_RUNNER_FILES`], which is all of
-- them.
SELECT name, length(CAST(content AS BLOB)) AS size, content_hash, uploaded_at FROM runner_files
    WHERE runner_id = ?2 AND organization_id = ?1 AND name > ?3 ORDER BY name LIMIT ?4
