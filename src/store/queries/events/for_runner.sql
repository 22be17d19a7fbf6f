-- store::events::for_runner: a page of a runner's audit trail, newest first, before a keyset
-- cursor (?3, an event id; the first page passes one past every id). A range of
-- job_events_by_runner (runner_id, organization_id, id; migration 0020), no sort.
SELECT id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at
  FROM job_events
 WHERE runner_id = ?2 AND organization_id = ?1 AND id < ?3
 ORDER BY id DESC
 LIMIT ?4
