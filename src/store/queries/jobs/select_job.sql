-- store::jobs::select_job: the job, from jobs or, once its archive is pruned, archived_jobs.
-- ?1 job id
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at, held_at, held_by, held_reason FROM jobs WHERE id = ?1
UNION ALL
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at, held_at, held_by, held_reason FROM archived_job_rows WHERE id = ?1
