-- store::jobs::get: a job of the organization (from jobs or archived_jobs), unless the
-- retention pass marked it expiring (from then on it answers as an unknown job).
-- With its artifact's name (a primary key lookup; none once the artifact is gone, which its
-- foreign key forbids while the job lives). ?1 organization id, ?2 job id
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at, held_at, held_by, held_reason,
    (SELECT name FROM release_artifacts WHERE id = subject_artifact_id) AS subject_artifact_name
    FROM jobs WHERE id = ?2 AND organization_id = ?1 AND expiring_at IS NULL
UNION ALL
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at, held_at, held_by, held_reason,
    (SELECT name FROM release_artifacts WHERE id = subject_artifact_id) AS subject_artifact_name
    FROM archived_job_rows WHERE id = ?2 AND organization_id = ?1 AND expiring_at IS NULL
