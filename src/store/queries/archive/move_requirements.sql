-- The move's second step (store::archive::mark_pruned), after the job's stage became pruned:
-- its requirements document, one row per distinct document of the organization, counted once
-- more. ?1 job id, ?2 organization id, ?3 ArchiveState::Pruned
INSERT INTO requirement_documents (organization_number, document, jobs)
SELECT n.number, j.requirements, 1
  FROM jobs AS j JOIN organization_numbers AS n ON n.organization_id = j.organization_id
 WHERE j.id = ?1 AND j.organization_id = ?2 AND j.archive_state = ?3
ON CONFLICT (organization_number, document) DO UPDATE SET jobs = jobs + 1
