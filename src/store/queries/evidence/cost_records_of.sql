-- store::evidence::cost_records_of: with the custody of each row (the accepted completion holding it, if any).
SELECT c.id, c.evaluation_run_id, c.category, c.amount_micros, c.currency, c.description,
    c.created_at, ce.completion_id AS attached_completion_id, ce.job_id AS attached_job_id, ce.attached_at AS attached_at
    FROM cost_records AS c LEFT JOIN completion_evidence AS ce
    ON ce.evidence_kind = 'cost_record' AND ce.evidence_id = c.id
    AND ce.organization_id = c.organization_id
    WHERE c.evaluation_run_id = ?2 AND c.organization_id = ?1
    ORDER BY c.created_at, c.rowid LIMIT ?3
