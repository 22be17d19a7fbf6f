-- store::evidence::run_is_for_job: Whether `run` was made for `job` through the runner's side (its
-- metadata names the job).
SELECT id FROM evaluation_runs WHERE id = ?2 AND organization_id = ?1
    AND json_extract(metadata, '$.metadata.jobId') = ?3
