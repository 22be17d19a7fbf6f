-- store::evidence::insert_run
INSERT INTO evaluation_runs (id, organization_id, evaluation_id, status, metadata, created_at)
    VALUES (?1, ?2, ?3, 'running', ?4, ?5)
