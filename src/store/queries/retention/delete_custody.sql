-- Then the job's other custody rows, the evidence its completion named besides the run (the
-- schema refuses them for a job that is not expiring). ?1 job id, ?2 organization id
DELETE FROM completion_evidence WHERE job_id = ?1 AND organization_id = ?2
