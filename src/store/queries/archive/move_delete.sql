-- The move's last step: the job's row in jobs goes (the schema refuses it unless its archived
-- row is there). ?1 job id, ?2 organization id, ?3 ArchiveState::Pruned
DELETE FROM jobs WHERE id = ?1 AND organization_id = ?2 AND archive_state = ?3
