-- Ephemeral runners (issue 44): an admin registers a runner for exactly one job. Its grant
-- drains it in the same statement that takes its capacity (grant_runner.sql), so it is offered
-- nothing more; once that job's claim ended, the cron pass revokes it (its identity is spent:
-- no session, no work), so a fleet of one-job runners does not pile up runners that look able
-- to work.

-- Only an admin-registered (bootstrap) runner is ephemeral, and it holds one claim at most.
ALTER TABLE runners ADD COLUMN ephemeral INTEGER NOT NULL DEFAULT 0
    CHECK (ephemeral = 0 OR (ephemeral = 1 AND identity_model = 'bootstrap'
                             AND max_concurrent_jobs = 1));

-- Whether a runner is ephemeral is decided at its registration, once.
CREATE TRIGGER runners_ephemeral_is_final
BEFORE UPDATE OF ephemeral ON runners
WHEN NEW.ephemeral IS NOT OLD.ephemeral
BEGIN
    SELECT RAISE(ABORT, 'runner_ephemeral_is_final');
END;

-- A drained ephemeral runner took its job (or was drained before it took any): it is spent,
-- and goes on only to revoked. An admin's "active" would offer it a second job.
CREATE TRIGGER runners_ephemeral_once_drained_stay_drained
BEFORE UPDATE OF state ON runners
WHEN OLD.ephemeral = 1 AND OLD.state = 'draining' AND NEW.state NOT IN ('draining', 'revoked')
BEGIN
    SELECT RAISE(ABORT, 'ephemeral_runner_is_spent');
END;

-- The cron pass's retirement: ephemeral runners drained and holding no claim.
CREATE INDEX runners_ephemeral_spent ON runners (updated_at, id)
    WHERE ephemeral = 1 AND state = 'draining' AND active_claims = 0;

-- A retired ephemeral runner goes a day after its revocation (the cron pass, reaper.rs), once
-- nothing of its job names it (its claim, its completions and the job's events went with the
-- job's archive): its own events, files, challenges and credentials first, then its row. So a
-- fleet of one-job runners keeps about a day of them, not one row per job ever run.
CREATE INDEX runners_ephemeral_retired ON runners (revoked_at, id)
    WHERE ephemeral = 1 AND state = 'revoked';

-- The runner's own events (no job) may go with it, as a never-approved enrollment's may
-- (migration 0012); every other event stays until its job's archive.
DROP TRIGGER job_events_are_append_only_delete;
CREATE TRIGGER job_events_are_append_only_delete
BEFORE DELETE ON job_events
WHEN NOT (
      (OLD.job_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id AND archive_state IS NOT NULL))
   OR (OLD.job_id IS NULL AND OLD.runner_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM runners AS r
                    WHERE r.id = OLD.runner_id AND r.organization_id = OLD.organization_id
                      AND ((r.identity_model = 'keypair' AND r.approved_at IS NULL)
                           OR (r.ephemeral = 1 AND r.state = 'revoked')))))
BEGIN
    SELECT RAISE(ABORT, 'job_events_are_append_only');
END;

-- Deleting a runner asks whether an event or a completion still names it (their foreign keys
-- to runners): by these indexes, never a range of the organization's events or a scan of the
-- completions. (A runner's audit trail reads the first the same way, organization included.)
DROP INDEX job_events_by_runner;
CREATE INDEX job_events_by_runner ON job_events (runner_id, organization_id, id);
CREATE INDEX job_completions_by_runner ON job_completions (runner_id, organization_id);
