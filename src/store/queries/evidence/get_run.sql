-- store::evidence::get_run: with the custody of each row (the accepted completion holding it, if any).
SELECT r.id, r.evaluation_id, r.status, r.metadata, r.created_at, r.finished_at,
    ce.completion_id AS attached_completion_id, ce.job_id AS attached_job_id, ce.attached_at AS attached_at
    FROM evaluation_runs AS r LEFT JOIN completion_evidence AS ce
    ON ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = r.id
    AND ce.organization_id = r.organization_id
    WHERE r.id = ?2 AND r.organization_id = ?1
