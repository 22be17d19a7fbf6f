-- A page of an organization's jobs, newest first, after a keyset cursor (?2 created_at, ?3 id;
-- the first page passes a cursor after every row): at most ?4 from jobs (a range of
-- jobs_by_organization, no sort) and at most ?4 from archived_jobs (a range of
-- archived_jobs_by_organization, sorted only among jobs made in the same millisecond), merged.
-- tests/schema checks the plan of this text.
SELECT * FROM (
    SELECT id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
           subject_version_id, subject_content_hash, subject_environment, input_hash, requirements,
           state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
           created_at, updated_at, finished_at, held_at, held_by, held_reason,
           (SELECT name FROM release_artifacts WHERE id = subject_artifact_id) AS subject_artifact_name
      FROM jobs
     WHERE organization_id = ?1 AND (created_at, id) < (?2, ?3) AND expiring_at IS NULL
     ORDER BY created_at DESC, id DESC
     LIMIT ?4)
UNION ALL
SELECT * FROM (
    SELECT id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
           subject_version_id, subject_content_hash, subject_environment, input_hash, requirements,
           state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
           created_at, updated_at, finished_at, held_at, held_by, held_reason,
           (SELECT name FROM release_artifacts WHERE id = subject_artifact_id) AS subject_artifact_name
      FROM archived_job_rows
     WHERE organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?1)
       AND (created_at, id) < (?2, ?3) AND expiring_at IS NULL
     ORDER BY created_at DESC, id DESC
     LIMIT ?4)
ORDER BY created_at DESC, id DESC
LIMIT ?4
