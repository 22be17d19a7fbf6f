-- store::evidence::insert_model_call: Rows inserted: 1, or 0 when the run is not the
-- organization's.
INSERT INTO model_calls (id, organization_id, evaluation_run_id, provider, model, status,
    input_tokens, output_tokens, latency_ms, created_at)
    SELECT ?3, ?1, ?2, ?4, ?5, ?6, ?7, ?8, ?9, ?10 WHERE EXISTS (SELECT 1 FROM evaluation_runs WHERE id = ?2 AND organization_id = ?1)
