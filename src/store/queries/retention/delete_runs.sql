-- Then the evaluation run its archived row holds (its rows went before: their foreign keys
-- refuse otherwise). ?1 job id, ?2 organization id
DELETE FROM evaluation_runs
    WHERE organization_id = ?2
      AND id = (SELECT a.custody_run_id FROM archived_jobs AS a
                  JOIN organization_numbers AS n ON n.number = a.organization_number
                 WHERE a.id = ?1 AND n.organization_id = ?2)
