-- store::jobs::insert: The new job's row, answered by the insert itself ([`JobRow`], `RETURNING`):
-- the enqueue's answer costs no read of its own. Its queue ?19 as queues/register.sql left it:
-- the organization's, or q_overflow when that one could not be named (past its 100).
INSERT INTO jobs (id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
    subject_version_id, subject_content_hash, subject_environment, input, input_hash, requirements,
    execution_kind, runtime, external, problem_type, tags, created_at, updated_at, queue_id)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?18,
            CASE WHEN EXISTS (SELECT 1 FROM queues WHERE organization_id = ?2 AND id = ?19)
                 THEN ?19 ELSE 'q_overflow' END)
    RETURNING id, organization_id, idempotency_key, intent_hash, subject_kind,
    subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input_hash,
    requirements, state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason,
    created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum,
    last_unstored_decision, last_unstored_at
