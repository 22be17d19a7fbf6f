-- store::events::insert_if_changed: The event, only if the statement just before it in the same
-- batch changed exactly one row: a guarded update and its audit record then commit together or not
-- at all, and a guard that did not hold leaves no event behind. (`changes()` is per connection; a
-- D1 batch runs its statements in order on one.)
INSERT INTO job_events (organization_id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at)
    SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 WHERE changes() = 1
