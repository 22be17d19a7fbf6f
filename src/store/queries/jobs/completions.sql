-- store::jobs::completions
SELECT id, claim_id, runner_id, dispatch_attempt, decision, rationale, completion_checksum, status, input_hash,
    result_hash, final_stream_checksum, evidence, reported_costs, completed_at, received_at
    FROM job_completions WHERE job_id = ?2 AND organization_id = ?1 ORDER BY received_at, id
