-- store::evidence::model_calls_of: with the custody of each row (the accepted completion holding it, if any).
SELECT m.id, m.evaluation_run_id, m.provider, m.model, m.status, m.input_tokens,
    m.output_tokens, m.latency_ms, m.created_at, ce.completion_id AS attached_completion_id, ce.job_id AS attached_job_id, ce.attached_at AS attached_at
    FROM model_calls AS m LEFT JOIN completion_evidence AS ce
    ON ce.evidence_kind = 'model_call' AND ce.evidence_id = m.id
    AND ce.organization_id = m.organization_id
    WHERE m.evaluation_run_id = ?2 AND m.organization_id = ?1
    ORDER BY m.created_at, m.rowid LIMIT ?3
