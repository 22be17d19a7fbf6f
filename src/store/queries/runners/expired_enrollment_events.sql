-- store::runners::expire_enrollments, first: the audit event of each enrollment that waited
-- for approval too long (written before the move, while the runner is still pending).
-- ?1 cutoff (registered before it), ?2 at most this many, ?3 now,
-- ?4 runners::enrollment_expired_moves() (JSON object, from → to: the states the move applies to)
INSERT INTO job_events (organization_id, runner_id, actor, type, reason, at)
SELECT organization_id, id, 'system:cron', 'runner.enrollment_expired', 'not approved in time', ?3
  FROM runners
 WHERE id IN (SELECT id FROM runners
               WHERE state IN (SELECT key FROM json_each(?4)) AND registered_at < ?1
               ORDER BY registered_at, id LIMIT ?2)
