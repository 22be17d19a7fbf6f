-- The claim's matching query: one (organization, kind, runtime, external) range of the
-- partial index jobs_queue, in queue order, after a keyset cursor (?5 created_at, ?6 id).
-- `state = 'queued'` is a literal so SQLite can prove the partial index applies.
-- tests/schema checks with EXPLAIN QUERY PLAN that this text searches the index. INDEXED BY
-- pins it: jobs_by_organization_state (organization, state, created_at) also matches these
-- terms, and SQLite's planner picks it when it has no statistics — a range over every queued
-- job of the organization instead of this runner's kind and runtime. With INDEXED BY, a schema
-- change that made the index unusable fails the statement instead of slowing it.
SELECT id, requirements, subject_version_id, subject_content_hash, created_at FROM jobs INDEXED BY jobs_queue
 WHERE organization_id = ?1 AND state = 'queued' AND execution_kind = ?2 AND runtime = ?3 AND external = ?4
   AND (created_at > ?5 OR (created_at = ?5 AND id > ?6))
 ORDER BY created_at, id
 LIMIT ?7
