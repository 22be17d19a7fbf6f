-- store::evidence::get_run: with the custody of each row (the accepted completion holding it,
-- if any: a live job's in completion_evidence, an archived job's in its row, migration 0019).
SELECT r.id, r.evaluation_id, r.status, r.metadata, r.created_at, r.finished_at,
    coalesce(ce.completion_id, a.custody_completion_id) AS attached_completion_id,
    coalesce(ce.job_id, a.id) AS attached_job_id,
    coalesce(ce.attached_at, a.custody_attached_at) AS attached_at
    FROM evaluation_runs AS r LEFT JOIN completion_evidence AS ce
    ON ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = r.id
    AND ce.organization_id = r.organization_id
    LEFT JOIN archived_jobs AS a ON a.custody_run_id = r.id
    AND a.organization_number = (SELECT number FROM organization_numbers
                                  WHERE organization_id = r.organization_id)
    WHERE r.id = ?2 AND r.organization_id = ?1
