-- Retention (issue 42): each organization keeps its finished jobs for as long as it chooses
-- (1-400 days, 90 by default), an admin can hold a job past that, and the retention pass
-- deletes the rest. The steps and their rules are the protocol crate's
-- (edgerunner_protocol::retention); this migration is the schema's own copy of them:
--
--   archived (pruned) --expire--> expiring --delete--> (gone)
--
-- * expiring: the job row is marked (jobs.expiring_at); every read answers 404 from then on.
--   Only an archived (pruned), finished job that is not held is marked, and the mark is final.
-- * delete: its R2 objects go first, then its evidence (the evaluation run its accepted
--   completion took into custody, with the run's rows), its custody rows and the job row.
--   None of them may be deleted before the job is marked.

-- ===========================================================================================
-- The organization's setting and its count of jobs deleted by retention.
-- ===========================================================================================

ALTER TABLE organizations ADD COLUMN retention_days INTEGER NOT NULL DEFAULT 90
    CHECK (retention_days BETWEEN 1 AND 400);
ALTER TABLE organizations ADD COLUMN retention_deleted_jobs INTEGER NOT NULL DEFAULT 0
    CHECK (retention_deleted_jobs >= 0);

-- ===========================================================================================
-- Hold and expiry, on the job row.
-- ===========================================================================================

-- An admin's hold: when and by whom (both or neither).
ALTER TABLE jobs ADD COLUMN held_at INTEGER;
ALTER TABLE jobs ADD COLUMN held_by TEXT CHECK (held_by IS NULL OR length(held_by) BETWEEN 1 AND 200);
-- When the retention pass marked the job for deletion; final once set.
ALTER TABLE jobs ADD COLUMN expiring_at INTEGER;

-- Only a finished job that is not expiring is held (or released); the hold names its holder.
CREATE TRIGGER jobs_hold_needs_a_finished_job
BEFORE UPDATE OF held_at, held_by ON jobs
WHEN (NEW.held_at IS NULL) <> (NEW.held_by IS NULL)
  OR ((NEW.held_at IS NOT OLD.held_at OR NEW.held_by IS NOT OLD.held_by)
      AND (NEW.state NOT IN ('succeeded', 'failed', 'cancelled') OR OLD.expiring_at IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'job_hold_needs_a_finished_job');
END;

-- Only an archived, finished job that is not held is marked expiring, and the mark is final.
CREATE TRIGGER jobs_expiring_needs_an_archived_unheld_job
BEFORE UPDATE OF expiring_at ON jobs
WHEN (OLD.expiring_at IS NOT NULL AND NEW.expiring_at IS NOT OLD.expiring_at)
  OR (OLD.expiring_at IS NULL AND NEW.expiring_at IS NOT NULL
      AND (NEW.archive_state IS NOT 'pruned' OR NEW.held_at IS NOT NULL
           OR NEW.state NOT IN ('succeeded', 'failed', 'cancelled')))
BEGIN
    SELECT RAISE(ABORT, 'job_expiry_needs_an_archived_unheld_job');
END;

-- A job row goes only once it is expiring and its custody rows are gone (its claims, chunks,
-- completions and events went when it was pruned; their foreign keys hold that too).
CREATE TRIGGER jobs_delete_needs_expiry
BEFORE DELETE ON jobs
WHEN OLD.expiring_at IS NULL
  OR EXISTS (SELECT 1 FROM completion_evidence WHERE job_id = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'job_delete_needs_expiry');
END;

-- ===========================================================================================
-- Custody and evidence go with an expiring job, and only with one.
-- ===========================================================================================

DROP TRIGGER completion_evidence_is_permanent_delete;
CREATE TRIGGER completion_evidence_is_permanent_delete
BEFORE DELETE ON completion_evidence
WHEN NOT EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id AND expiring_at IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_custody_is_permanent');
END;

-- An evaluation run in custody, and each row of one, is deleted only with its expiring job.
CREATE TRIGGER evaluation_runs_in_custody_stay
BEFORE DELETE ON evaluation_runs
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce JOIN jobs AS j ON j.id = ce.job_id
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.id
                AND j.expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

CREATE TRIGGER test_results_in_custody_stay
BEFORE DELETE ON test_results
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce JOIN jobs AS j ON j.id = ce.job_id
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.evaluation_run_id
                AND j.expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

CREATE TRIGGER cost_records_in_custody_stay
BEFORE DELETE ON cost_records
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce JOIN jobs AS j ON j.id = ce.job_id
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.evaluation_run_id
                AND j.expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

CREATE TRIGGER model_calls_in_custody_stay
BEFORE DELETE ON model_calls
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce JOIN jobs AS j ON j.id = ce.job_id
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.evaluation_run_id
                AND j.expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

CREATE TRIGGER traces_in_custody_stay
BEFORE DELETE ON traces
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce JOIN jobs AS j ON j.id = ce.job_id
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.evaluation_run_id
                AND j.expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

-- ===========================================================================================
-- The retention pass's reads.
-- ===========================================================================================

-- Archived jobs that are neither held nor expiring yet, per organization, oldest finish
-- first: the pass reads those before its organization's cut through this index alone.
CREATE INDEX jobs_to_expire ON jobs (organization_id, finished_at, id)
    WHERE archive_state = 'pruned' AND held_at IS NULL AND expiring_at IS NULL;

-- Jobs marked expiring and not yet deleted (a pass that stopped midway leaves some).
CREATE INDEX jobs_expiring ON jobs (organization_id, expiring_at, id)
    WHERE expiring_at IS NOT NULL;
