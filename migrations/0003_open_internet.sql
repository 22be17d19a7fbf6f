-- Guards for a service that answers strangers (issue 11): every guard a batch relies on has a
-- RAISE code that src/store/guards.rs maps by name, and what an unauthenticated caller can make
-- the database hold is bounded.

-- Capacity by name: the grant batch's `active_claims + 1` met the table's unnamed CHECK before;
-- this trigger fires first and names it.
CREATE TRIGGER runners_capacity_is_bounded
BEFORE UPDATE OF active_claims ON runners
WHEN NEW.active_claims > NEW.max_concurrent_jobs
BEGIN
    SELECT RAISE(ABORT, 'runner_at_capacity');
END;

-- At most this many key-pair runners wait for approval in an organization. The enroll batch
-- first sets it from the Worker's MAX_PENDING_ENROLLMENTS (default 100), so the count and the
-- insert happen in one transaction: concurrent enrollments cannot overshoot it.
ALTER TABLE organizations ADD COLUMN max_pending_enrollments INTEGER NOT NULL DEFAULT 100
    CHECK (max_pending_enrollments >= 0);

CREATE INDEX runners_by_organization_state ON runners (organization_id, state);

CREATE TRIGGER runners_pending_enrollments_are_capped
BEFORE INSERT ON runners
WHEN NEW.state = 'pending_approval'
 AND (SELECT count(*) FROM runners AS r
       WHERE r.organization_id = NEW.organization_id AND r.state = 'pending_approval')
     >= (SELECT o.max_pending_enrollments FROM organizations AS o WHERE o.id = NEW.organization_id)
BEGIN
    SELECT RAISE(ABORT, 'pending_enrollments_at_cap');
END;

-- Custody: once an accepted completion names an evaluation run, the run's evidence is final.
-- New rows in it are refused (the completion's evidence set would otherwise grow after the
-- fact, under a checksum that does not cover it).
CREATE INDEX job_completions_accepted_by_run
    ON job_completions (evaluation_run_id) WHERE decision = 'accepted';

CREATE TRIGGER test_results_not_in_custody
BEFORE INSERT ON test_results
WHEN EXISTS (SELECT 1 FROM job_completions AS c
              WHERE c.evaluation_run_id = NEW.evaluation_run_id AND c.decision = 'accepted')
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

CREATE TRIGGER cost_records_not_in_custody
BEFORE INSERT ON cost_records
WHEN EXISTS (SELECT 1 FROM job_completions AS c
              WHERE c.evaluation_run_id = NEW.evaluation_run_id AND c.decision = 'accepted')
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

CREATE TRIGGER model_calls_not_in_custody
BEFORE INSERT ON model_calls
WHEN EXISTS (SELECT 1 FROM job_completions AS c
              WHERE c.evaluation_run_id = NEW.evaluation_run_id AND c.decision = 'accepted')
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

CREATE TRIGGER traces_not_in_custody
BEFORE INSERT ON traces
WHEN EXISTS (SELECT 1 FROM job_completions AS c
              WHERE c.evaluation_run_id = NEW.evaluation_run_id AND c.decision = 'accepted')
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;
