-- store::jobs::held_job_data
SELECT j.input, j.subject_version_id, j.subject_content_hash, v.content FROM jobs j
    JOIN job_claims c ON c.id = j.active_claim_id AND c.state = 'active'
    JOIN release_versions v ON v.id = j.subject_version_id
    WHERE j.id = ?2 AND j.organization_id = ?1 AND c.runner_id = ?3
    AND j.state IN ('claimed', 'running', 'cancel_requested')
