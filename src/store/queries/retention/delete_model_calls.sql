-- An expiring job's evidence, first: up to ?3 rows of model_calls of the evaluation run its
-- accepted completion took into custody, which its archived row holds (migration 0019; the
-- schema refuses them for any other job). ?1 job id, ?2 organization id, ?3 at most
DELETE FROM model_calls WHERE rowid IN
    (SELECT e.rowid FROM archived_jobs AS a
       JOIN organization_numbers AS n ON n.number = a.organization_number
       JOIN model_calls AS e ON e.evaluation_run_id = a.custody_run_id AND e.organization_id = n.organization_id
      WHERE a.id = ?1 AND n.organization_id = ?2
      LIMIT ?3)
