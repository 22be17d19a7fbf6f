-- store::jobs::evidence: the job's custody rows, and the run its archived row holds
-- (migration 0019) as the row it was.
SELECT evidence_kind, evidence_id, completion_id FROM (
    SELECT evidence_kind, evidence_id, completion_id FROM completion_evidence
     WHERE job_id = ?2 AND organization_id = ?1
    UNION ALL
    SELECT 'evaluation_run', a.custody_run_id, a.custody_completion_id
      FROM archived_jobs AS a JOIN organization_numbers AS n ON n.number = a.organization_number
     WHERE a.id = ?2 AND n.organization_id = ?1 AND a.custody_run_id IS NOT NULL)
 ORDER BY evidence_kind, evidence_id
