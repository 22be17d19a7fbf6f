-- The same page, of the jobs in one state (?4): ranges of jobs_by_organization_state and
-- archived_jobs_by_state, merged.
SELECT * FROM (
    SELECT id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
           subject_version_id, subject_content_hash, subject_environment, input_hash, requirements,
           state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
           created_at, updated_at, finished_at, held_at, held_by, held_reason,
           (SELECT name FROM release_artifacts WHERE id = subject_artifact_id) AS subject_artifact_name
      FROM jobs
     WHERE organization_id = ?1 AND state = ?4 AND (created_at, id) < (?2, ?3)
       AND expiring_at IS NULL
     ORDER BY created_at DESC, id DESC
     LIMIT ?5)
UNION ALL
SELECT * FROM (
    SELECT id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
           subject_version_id, subject_content_hash, subject_environment, input_hash, requirements,
           state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
           created_at, updated_at, finished_at, held_at, held_by, held_reason,
           (SELECT name FROM release_artifacts WHERE id = subject_artifact_id) AS subject_artifact_name
      FROM archived_job_rows
     WHERE organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?1)
       AND state = ?4 AND (created_at, id) < (?2, ?3) AND expiring_at IS NULL
     ORDER BY created_at DESC, id DESC
     LIMIT ?5)
ORDER BY created_at DESC, id DESC
LIMIT ?5
