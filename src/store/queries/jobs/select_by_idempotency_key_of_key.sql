-- store::jobs::select_by_idempotency_key_of_key: [`by_idempotency_key`] as a statement, in the
-- organization of the API key whose hash is `key_hash`, to ride in the
-- enqueue's one read. ?1 key hash, ?2 idempotency key
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at, held_at, held_by, held_reason FROM jobs WHERE organization_id = (SELECT organization_id FROM api_keys WHERE key_hash = ?1 AND revoked_at IS NULL) AND idempotency_key = ?2
UNION ALL
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at, held_at, held_by, held_reason FROM archived_job_rows
    WHERE organization_number = (SELECT n.number FROM api_keys AS k
                                   JOIN organization_numbers AS n ON n.organization_id = k.organization_id
                                  WHERE k.key_hash = ?1 AND k.revoked_at IS NULL)
      AND idempotency_key = ?2
