-- Then the evaluation run in the job's custody (its rows went before: their foreign keys
-- refuse otherwise). ?1 job id, ?2 organization id
DELETE FROM evaluation_runs
    WHERE organization_id = ?2
      AND id IN (SELECT evidence_id FROM completion_evidence
                  WHERE job_id = ?1 AND organization_id = ?2 AND evidence_kind = 'evaluation_run')
