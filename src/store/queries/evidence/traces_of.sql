-- store::evidence::traces_of: with the custody of each row (the accepted completion holding it, if any).
SELECT x.id, x.evaluation_run_id, x.name, x.spans, x.created_at, ce.completion_id AS attached_completion_id, ce.job_id AS attached_job_id, ce.attached_at AS attached_at
    FROM traces AS x LEFT JOIN completion_evidence AS ce
    ON ce.evidence_kind = 'trace' AND ce.evidence_id = x.id
    AND ce.organization_id = x.organization_id
    WHERE x.evaluation_run_id = ?2 AND x.organization_id = ?1
    ORDER BY x.created_at, x.rowid LIMIT ?3
