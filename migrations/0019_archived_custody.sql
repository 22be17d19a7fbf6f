-- The custody of an archived job's evaluation run, in its archived row (issue 42, point 6).
--
-- An accepted completion takes the evaluation run it names into custody (a completion_evidence
-- row of kind 'evaluation_run'), and with it every row of that run: nothing of it changes or
-- goes until the job expires. That row cost an archived job 254 bytes (its key, its job and
-- organization as text, and an index by job): more than half again the archived row's own
-- 447 (bench/storage.py, BENCHMARKS.md). From here on the move to archived_jobs carries it
-- into three columns of the archived row, under one index by run, and deletes the custody
-- row in the same batch (archive/move_custody.sql):
--
-- * a job in `jobs` holds its run in completion_evidence, as before;
-- * a job in `archived_jobs` holds its run in custody_run_id (its other custody rows, evidence
--   its completion named besides the run, stay in completion_evidence);
-- * a run is held once across both (completion_evidence's key, the unique index below and
--   the insert guard completion_evidence_run_is_free).
--
-- Every check of a run's custody reads both places: the nine guards that keep a held run's
-- rows, the archived job's deletion, and the reads (evidence_holder, get_run, jobs/evidence);
-- the retention pass and its usage read the archived row alone (only an archived job expires).

ALTER TABLE archived_jobs ADD COLUMN custody_run_id TEXT
    CHECK (custody_run_id IS NULL OR length(custody_run_id) BETWEEN 1 AND 255);
ALTER TABLE archived_jobs ADD COLUMN custody_completion_id TEXT
    CHECK ((custody_completion_id IS NULL) = (custody_run_id IS NULL));
ALTER TABLE archived_jobs ADD COLUMN custody_attached_at INTEGER
    CHECK ((custody_attached_at IS NULL) = (custody_run_id IS NULL));

-- The runs archived jobs already hold move now, as the move carries them from here on. (Their
-- custody rows go once the guard below lets a moved row go.)
UPDATE archived_jobs
   SET custody_run_id = ce.evidence_id, custody_completion_id = ce.completion_id,
       custody_attached_at = ce.attached_at
  FROM completion_evidence AS ce
 WHERE ce.job_id = archived_jobs.id AND ce.evidence_kind = 'evaluation_run';

-- One holder per run, and the lookup of every check by run.
CREATE UNIQUE INDEX archived_jobs_by_custody_run ON archived_jobs (custody_run_id)
    WHERE custody_run_id IS NOT NULL;

-- What the job was, how it ended and what it holds are final.
DROP TRIGGER archived_jobs_are_final;
CREATE TRIGGER archived_jobs_are_final
BEFORE UPDATE OF id, organization_number, idempotency_key, intent_hash, subject_version_id,
                 subject_environment, requirements_id, input_hash, state, dispatch_attempt,
                 released_attempts, cancel_reason, created_at, updated_at, archived_at,
                 bundle_sha256, bundle_bytes, stream_chunks, stream_bytes, stream_head,
                 custody_run_id, custody_completion_id, custody_attached_at
              ON archived_jobs
BEGIN
    SELECT RAISE(ABORT, 'archived_job_is_final');
END;

-- A moving job takes exactly the custody its completion took: its run's custody row, as it
-- is, or none when it has none.
CREATE TRIGGER archived_jobs_take_their_runs_custody
BEFORE INSERT ON archived_jobs
WHEN NOT (CASE WHEN NEW.custody_run_id IS NULL
    THEN NOT EXISTS (SELECT 1 FROM completion_evidence
                      WHERE job_id = NEW.id AND evidence_kind = 'evaluation_run')
    ELSE EXISTS (SELECT 1 FROM completion_evidence
                  WHERE evidence_kind = 'evaluation_run' AND evidence_id = NEW.custody_run_id
                    AND job_id = NEW.id AND completion_id = NEW.custody_completion_id
                    AND attached_at = NEW.custody_attached_at)
END)
BEGIN
    SELECT RAISE(ABORT, 'archived_job_takes_its_runs_custody');
END;

-- A custody row goes with its expiring job, or as its run's custody moves to the archived row.
DROP TRIGGER completion_evidence_is_permanent_delete;
CREATE TRIGGER completion_evidence_is_permanent_delete
BEFORE DELETE ON completion_evidence
WHEN NOT EXISTS (SELECT 1 FROM archived_jobs
                  WHERE id = OLD.job_id
                    AND (expiring_at IS NOT NULL
                         OR (OLD.evidence_kind = 'evaluation_run'
                             AND custody_run_id = OLD.evidence_id)))
BEGIN
    SELECT RAISE(ABORT, 'evidence_custody_is_permanent');
END;

DELETE FROM completion_evidence
 WHERE evidence_kind = 'evaluation_run'
   AND evidence_id IN (SELECT custody_run_id FROM archived_jobs WHERE custody_run_id IS NOT NULL);

-- A run an archived job holds is not free for another completion (completion_evidence's key
-- says so for a run a live job holds; the completion answers both the same way).
CREATE TRIGGER completion_evidence_run_is_free
BEFORE INSERT ON completion_evidence
WHEN NEW.evidence_kind = 'evaluation_run'
 AND EXISTS (SELECT 1 FROM archived_jobs WHERE custody_run_id = NEW.evidence_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_held_by_archived_job');
END;

-- Deleting is the retention pass's last step: the job is expiring, its custody rows are gone
-- and so is the run it holds.
DROP TRIGGER archived_jobs_delete_needs_expiry;
CREATE TRIGGER archived_jobs_delete_needs_expiry
BEFORE DELETE ON archived_jobs
WHEN OLD.expiring_at IS NULL
  OR EXISTS (SELECT 1 FROM completion_evidence WHERE job_id = OLD.id)
  OR (OLD.custody_run_id IS NOT NULL
      AND EXISTS (SELECT 1 FROM evaluation_runs WHERE id = OLD.custody_run_id))
BEGIN
    SELECT RAISE(ABORT, 'job_delete_needs_expiry');
END;

-- A held run and its rows stay until its holder expires. A run's custody row in
-- completion_evidence belongs to a job in `jobs` (the move takes it), which never expires;
-- in an archived row, it goes once the job is expiring.
DROP TRIGGER evaluation_runs_in_custody_stay;
CREATE TRIGGER evaluation_runs_in_custody_stay
BEFORE DELETE ON evaluation_runs
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = OLD.id)
  OR EXISTS (SELECT 1 FROM archived_jobs WHERE custody_run_id = OLD.id AND expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER test_results_in_custody_stay;
CREATE TRIGGER test_results_in_custody_stay
BEFORE DELETE ON test_results
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = OLD.evaluation_run_id)
  OR EXISTS (SELECT 1 FROM archived_jobs
              WHERE custody_run_id = OLD.evaluation_run_id AND expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER cost_records_in_custody_stay;
CREATE TRIGGER cost_records_in_custody_stay
BEFORE DELETE ON cost_records
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = OLD.evaluation_run_id)
  OR EXISTS (SELECT 1 FROM archived_jobs
              WHERE custody_run_id = OLD.evaluation_run_id AND expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER model_calls_in_custody_stay;
CREATE TRIGGER model_calls_in_custody_stay
BEFORE DELETE ON model_calls
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = OLD.evaluation_run_id)
  OR EXISTS (SELECT 1 FROM archived_jobs
              WHERE custody_run_id = OLD.evaluation_run_id AND expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER traces_in_custody_stay;
CREATE TRIGGER traces_in_custody_stay
BEFORE DELETE ON traces
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = OLD.evaluation_run_id)
  OR EXISTS (SELECT 1 FROM archived_jobs
              WHERE custody_run_id = OLD.evaluation_run_id AND expiring_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

-- A held run takes no new rows (migration 0010), wherever its holder's row is.
DROP TRIGGER test_results_not_in_custody;
CREATE TRIGGER test_results_not_in_custody
BEFORE INSERT ON test_results
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = NEW.evaluation_run_id)
  OR EXISTS (SELECT 1 FROM archived_jobs WHERE custody_run_id = NEW.evaluation_run_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER cost_records_not_in_custody;
CREATE TRIGGER cost_records_not_in_custody
BEFORE INSERT ON cost_records
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = NEW.evaluation_run_id)
  OR EXISTS (SELECT 1 FROM archived_jobs WHERE custody_run_id = NEW.evaluation_run_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER model_calls_not_in_custody;
CREATE TRIGGER model_calls_not_in_custody
BEFORE INSERT ON model_calls
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = NEW.evaluation_run_id)
  OR EXISTS (SELECT 1 FROM archived_jobs WHERE custody_run_id = NEW.evaluation_run_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER traces_not_in_custody;
CREATE TRIGGER traces_not_in_custody
BEFORE INSERT ON traces
WHEN EXISTS (SELECT 1 FROM completion_evidence
              WHERE evidence_kind = 'evaluation_run' AND evidence_id = NEW.evaluation_run_id)
  OR EXISTS (SELECT 1 FROM archived_jobs WHERE custody_run_id = NEW.evaluation_run_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;
