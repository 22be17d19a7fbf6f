-- store::jobs::evidence
SELECT evidence_kind, evidence_id, completion_id FROM completion_evidence
    WHERE job_id = ?2 AND organization_id = ?1 ORDER BY evidence_kind, evidence_id
