-- store::evidence::insert_test_result: Rows inserted: 1, or 0 when the run is not the
-- organization's.
INSERT INTO test_results (id, organization_id, evaluation_run_id, name, status, score, created_at)
    SELECT ?3, ?1, ?2, ?4, ?5, CAST(?6 AS REAL), ?7 WHERE EXISTS (SELECT 1 FROM evaluation_runs WHERE id = ?2 AND organization_id = ?1)
