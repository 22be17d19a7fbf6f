-- store::jobs::bundle_completion: One completion of the job as received ([`BundleCompletion`]).
SELECT id, decision, rationale, received FROM job_completions
    WHERE id = ?3 AND job_id = ?2 AND organization_id = ?1
