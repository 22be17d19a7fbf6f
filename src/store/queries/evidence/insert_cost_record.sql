-- store::evidence::insert_cost_record: Rows inserted: 1, or 0 when the run is not the
-- organization's.
INSERT INTO cost_records (id, organization_id, evaluation_run_id, category, amount_micros,
    currency, description, created_at)
    SELECT ?3, ?1, ?2, ?4, ?5, ?6, ?7, ?8 WHERE EXISTS (SELECT 1 FROM evaluation_runs WHERE id = ?2 AND organization_id = ?1)
