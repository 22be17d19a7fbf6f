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
