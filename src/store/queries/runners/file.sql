-- store::runners::file
SELECT content FROM runner_files WHERE runner_id = ?2 AND organization_id = ?1 AND name = ?3
