-- store::evidence::insert_run: ?1 id, ?2 organization, ?3 evaluation, ?4 metadata, ?5 now,
-- ?6 RunStatus::Running (a run starts running)
INSERT INTO evaluation_runs (id, organization_id, evaluation_id, status, metadata, created_at)
    VALUES (?1, ?2, ?3, ?6, ?4, ?5)
