-- An expiring job's evidence, first: up to ?3 rows of cost_records of the evaluation run its
-- accepted completion took into custody (the schema refuses them for any other job).
-- ?1 job id, ?2 organization id, ?3 at most
DELETE FROM cost_records WHERE rowid IN
    (SELECT e.rowid FROM completion_evidence AS ce
       JOIN cost_records AS e ON e.evaluation_run_id = ce.evidence_id AND e.organization_id = ce.organization_id
      WHERE ce.job_id = ?1 AND ce.organization_id = ?2 AND ce.evidence_kind = 'evaluation_run'
      LIMIT ?3)
