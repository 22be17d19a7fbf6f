-- store::jobs::by_idempotency_key: the organization's job under the key, from jobs or
-- archived_jobs (a key names one job across both: jobs_idempotency_key_is_free).
-- ?1 organization id, ?2 idempotency key
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at, held_at, held_by, held_reason
    FROM jobs WHERE organization_id = ?1 AND idempotency_key = ?2
UNION ALL
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at, held_at, held_by, held_reason
    FROM archived_job_rows
    WHERE organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?1)
      AND idempotency_key = ?2
