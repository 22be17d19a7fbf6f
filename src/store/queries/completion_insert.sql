-- A completion decision, stored (accepted, duplicate, conflict or stale).
-- ?1 completion_id, ?2 job.id, ?3 job.organization_id, ?4 claim.id, ?5 runner, ?6 attempt, ?7
-- outcome, ?8 decision.rationale, ?9 completion.checksum(), ?10 fields.status, ?11
-- fields.input_hash, ?12 fields.result_hash.as_ref().map(Sha256Hex::as_str), ?13
-- fields.final_stream_checksum.as_ref().map(Sha256Hex::as_str), ?14
-- Some(evidence.evaluation_run_id.key()), ?15 evidence_json.to_string(), ?16
-- reported_costs.as_deref(), ?17 fields.completed_at, ?18 ctx.now, ?19 raw.to_string()
INSERT INTO job_completions (id, job_id, organization_id, claim_id, runner_id, dispatch_attempt, decision,
    rationale, completion_checksum, status, input_hash, result_hash, final_stream_checksum, evaluation_run_id,
    evidence, reported_costs, completed_at, received_at, received)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
