-- A job's archive, pruned (store::archive::mark_pruned), the move's first step: the schema
-- checks that none of its claims, chunks, completions or events is left. The rest of the
-- batch (archive/move_*.sql) moves the row to archived_jobs. ?1 job id, ?2 organization id,
-- ?3 ArchiveState::Pruned, ?4 ArchiveState::Stored
UPDATE jobs SET archive_state = ?3
    WHERE id = ?1 AND organization_id = ?2 AND archive_state = ?4
