-- In the deletion batch, before the job's row goes: its requirements document is named by
-- one archived job fewer. ?1 job id, ?2 organization id
UPDATE requirement_documents SET jobs = jobs - 1
    WHERE id = (SELECT requirements_id FROM archived_jobs
                 WHERE id = ?1 AND expiring_at IS NOT NULL
                   AND organization_number = (SELECT number FROM organization_numbers
                                               WHERE organization_id = ?2))
