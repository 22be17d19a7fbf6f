-- The claim's matching query: one (organization, kind, runtime, external) range of the
-- partial index jobs_queue, in queue order, after a keyset cursor (?5 created_at, ?6 id).
-- `state = 'queued'` is a literal so SQLite can prove the partial index applies.
-- tests/schema checks with EXPLAIN QUERY PLAN that this text searches the index. INDEXED BY
-- pins it: jobs_by_organization_state (organization, state, created_at) also matches these
-- terms, and SQLite's planner picks it when it has no statistics — a range over every queued
-- job of the organization instead of this runner's kind and runtime. With INDEXED BY, a schema
-- change that made the index unusable fails the statement instead of slowing it.
-- It answers whole job rows ([`JobRow`]'s columns, all but the input; the store's ROWS test
-- pins them), so that the
-- job's object grants a candidate from this read alone.
SELECT id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
       subject_version_id, subject_content_hash, subject_environment, input_hash, requirements, state,
       dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason, created_at,
       updated_at, finished_at, unstored_decisions, last_unstored_checksum, last_unstored_decision,
       last_unstored_at, held_at, held_by, held_reason
  FROM jobs INDEXED BY jobs_queue
 WHERE organization_id = ?1 AND state = 'queued' AND execution_kind = ?2 AND runtime = ?3 AND external = ?4
   AND (created_at > ?5 OR (created_at = ?5 AND id > ?6))
 ORDER BY created_at, id
 LIMIT ?7
