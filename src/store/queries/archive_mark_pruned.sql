-- A job's archive, pruned (store::archive::mark_pruned): the schema checks that none of its
-- claims, chunks, completions or events is left. ?1 job id, ?2 organization id
UPDATE jobs SET archive_state = 'pruned'
    WHERE id = ?1 AND organization_id = ?2 AND archive_state = 'stored'
