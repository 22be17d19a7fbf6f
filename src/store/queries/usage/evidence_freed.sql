-- After the retention pass marked a job expiring (retention/expire.sql, then job_expiring.sql),
-- in its batch: the evaluation run its archived row holds and the run's rows are freed (they are
-- deleted next, in bounded batches; never below zero). ?1 organization id, ?2 job id
UPDATE organization_usage
   SET d1_bytes = max(0, d1_bytes - (
           WITH runs AS (SELECT a.custody_run_id AS id FROM archived_jobs AS a
                           JOIN organization_numbers AS n ON n.number = a.organization_number
                          WHERE a.id = ?2 AND n.organization_id = ?1 AND a.custody_run_id IS NOT NULL)
           SELECT (SELECT coalesce(sum(bytes), 0) FROM evaluation_run_bytes WHERE id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM test_result_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM cost_record_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM model_call_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM trace_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))))
 WHERE organization_id = ?1 AND changes() = 1
