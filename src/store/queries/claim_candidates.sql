-- The claim's matching query: one (organization, kind, runtime, external) range of the
-- partial index jobs_queue, in queue order, after a keyset cursor (?5 created_at, ?6 id).
-- `state = 'queued'` is a literal so SQLite can prove the partial index applies.
-- tests/schema checks with EXPLAIN QUERY PLAN that this text searches the index.
SELECT id, requirements, subject_version_id, subject_content_hash, created_at FROM jobs
 WHERE organization_id = ?1 AND state = 'queued' AND execution_kind = ?2 AND runtime = ?3 AND external = ?4
   AND (created_at > ?5 OR (created_at = ?5 AND id > ?6))
 ORDER BY created_at, id
 LIMIT ?7
