-- The move's third step: the pruned job's archived row (migration 0018: hashes as blobs, the
-- organization by its number, the requirements by their document's row), holding the run its
-- completion took into custody (migration 0019; its custody row goes next).
-- ?1 job id, ?2 organization id, ?3 ArchiveState::Pruned, ?4 EvidenceKind::EvaluationRun
INSERT INTO archived_jobs (id, organization_number, idempotency_key, intent_hash,
    subject_version_id, subject_environment, requirements_id, input_hash, state,
    dispatch_attempt, released_attempts, cancel_reason, created_at, updated_at, finished_at,
    archived_at, bundle_sha256, bundle_bytes, stream_chunks, stream_bytes, stream_head,
    unstored_decisions, last_unstored_checksum, last_unstored_decision, last_unstored_at,
    held_at, held_by, held_reason, expiring_at, custody_run_id, custody_completion_id,
    custody_attached_at)
SELECT j.id, n.number, j.idempotency_key, unhex(j.intent_hash), j.subject_version_id,
       j.subject_environment, d.id, unhex(j.input_hash), j.state, j.dispatch_attempt,
       j.released_attempts, j.cancel_reason, j.created_at, j.updated_at, j.finished_at,
       j.archived_at, unhex(j.bundle_sha256), j.bundle_bytes, j.stream_chunks, j.stream_bytes,
       unhex(j.stream_head), j.unstored_decisions, unhex(j.last_unstored_checksum),
       j.last_unstored_decision, j.last_unstored_at, j.held_at, j.held_by, j.held_reason,
       j.expiring_at, ce.evidence_id, ce.completion_id, ce.attached_at
  FROM jobs AS j
  JOIN organization_numbers AS n ON n.organization_id = j.organization_id
  JOIN requirement_documents AS d ON d.organization_number = n.number AND d.document = j.requirements
  LEFT JOIN completion_evidence AS ce ON ce.job_id = j.id AND ce.evidence_kind = ?4
 WHERE j.id = ?1 AND j.organization_id = ?2 AND j.archive_state = ?3
