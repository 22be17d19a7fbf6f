-- store::evidence::test_results_of: with the custody of each row (the accepted completion holding it, if any).
SELECT t.id, t.evaluation_run_id, t.name, t.status, t.score, t.created_at, ce.completion_id AS attached_completion_id, ce.job_id AS attached_job_id, ce.attached_at AS attached_at
    FROM test_results AS t LEFT JOIN completion_evidence AS ce
    ON ce.evidence_kind = 'test_result' AND ce.evidence_id = t.id
    AND ce.organization_id = t.organization_id
    WHERE t.evaluation_run_id = ?2 AND t.organization_id = ?1
    ORDER BY t.created_at, t.rowid LIMIT ?3
