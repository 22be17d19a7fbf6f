-- store::jobs::held_job_data
-- ?1 organization, ?2 job, ?3 runner, ?4 ClaimState::Active, ?5 states::held_job_states() (JSON array)
SELECT j.input, j.subject_version_id, j.subject_content_hash, v.content FROM jobs j
    JOIN job_claims c ON c.id = j.active_claim_id AND c.state = ?4
    JOIN release_versions v ON v.id = j.subject_version_id
    WHERE j.id = ?2 AND j.organization_id = ?1 AND c.runner_id = ?3
    AND j.state IN (SELECT value FROM json_each(?5))
