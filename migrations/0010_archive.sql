-- Archive on finish (issue 40): a finished job's custody bundle leaves D1 for R2, byte for
-- byte, and D1 keeps the job row with a summary. The stages and their rules are the protocol
-- crate's (edgerunner_protocol::archive); this migration is the schema's own copy of them:
--
--   (not archived) --store--> stored --prune--> pruned
--
-- * stored: the bundle is in R2 under its SHA-256 and the job's record beside it, both read
--   back and checked, and the summary below is on the job row. Only from here on may the job's claims,
--   chunks, completions and events be deleted.
-- * pruned: none of them is left (checked when the stage is written).
--
-- Evidence custody stays: it belongs to the evidence, which outlives any job's log. So that it
-- can, custody no longer leans on the completion row (rebuilt below without that foreign key),
-- and an evaluation run counts as in custody when its custody row says so, not when an
-- accepted completion row names it.

-- ===========================================================================================
-- The summary, on the job row: NULL until the archive is stored, then final.
-- ===========================================================================================

ALTER TABLE jobs ADD COLUMN archive_state TEXT
    CHECK (archive_state IS NULL OR archive_state IN ('stored', 'pruned'));
-- The bundle's SHA-256 (its R2 key is bundles/<sha256>) and length.
ALTER TABLE jobs ADD COLUMN bundle_sha256 TEXT
    CHECK (bundle_sha256 IS NULL OR (length(bundle_sha256) = 64 AND bundle_sha256 NOT GLOB '*[^0-9a-f]*'));
ALTER TABLE jobs ADD COLUMN bundle_bytes INTEGER CHECK (bundle_bytes IS NULL OR bundle_bytes > 0);
-- (The job's record, what the reads that are not the bundle need, is kept beside the bundle
-- under records/<bundle sha256>: it costs the row nothing.)
-- The stream in sum, over every attempt: chunks, payload bytes, and the last chunk's checksum
-- of the last attempt that streamed (NULL without a stream).
ALTER TABLE jobs ADD COLUMN stream_chunks INTEGER CHECK (stream_chunks IS NULL OR stream_chunks >= 0);
ALTER TABLE jobs ADD COLUMN stream_bytes INTEGER CHECK (stream_bytes IS NULL OR stream_bytes >= 0);
ALTER TABLE jobs ADD COLUMN stream_head TEXT
    CHECK (stream_head IS NULL OR (length(stream_head) = 64 AND stream_head NOT GLOB '*[^0-9a-f]*'));
ALTER TABLE jobs ADD COLUMN archived_at INTEGER;

-- Only a finished job is archived, and only with its whole summary.
CREATE TRIGGER jobs_archive_needs_a_finished_job
BEFORE UPDATE OF archive_state ON jobs
WHEN NEW.archive_state IS NOT NULL
 AND (NEW.state NOT IN ('succeeded', 'failed', 'cancelled')
      OR NEW.bundle_sha256 IS NULL OR NEW.bundle_bytes IS NULL
      OR NEW.stream_chunks IS NULL OR NEW.stream_bytes IS NULL OR NEW.archived_at IS NULL
      OR (NEW.stream_chunks > 0) = (NEW.stream_head IS NULL))
BEGIN
    SELECT RAISE(ABORT, 'job_archive_incomplete');
END;

-- The stage only moves forward (stored → pruned), and the summary, once written, is final.
CREATE TRIGGER jobs_archive_is_final
BEFORE UPDATE OF archive_state, bundle_sha256, bundle_bytes, stream_chunks, stream_bytes,
                 stream_head, archived_at ON jobs
WHEN (OLD.archive_state IS NULL AND NEW.archive_state IS NULL
      AND (NEW.bundle_sha256 IS NOT NULL OR NEW.bundle_bytes IS NOT NULL
           OR NEW.stream_chunks IS NOT NULL OR NEW.stream_bytes IS NOT NULL OR NEW.stream_head IS NOT NULL
           OR NEW.archived_at IS NOT NULL))
  OR (OLD.archive_state IS NOT NULL
      AND (NEW.archive_state IS NULL
           OR (OLD.archive_state = 'pruned' AND NEW.archive_state <> 'pruned')
           OR NEW.bundle_sha256 IS NOT OLD.bundle_sha256 OR NEW.bundle_bytes IS NOT OLD.bundle_bytes
           OR NEW.stream_chunks IS NOT OLD.stream_chunks
           OR NEW.stream_bytes IS NOT OLD.stream_bytes OR NEW.stream_head IS NOT OLD.stream_head
           OR NEW.archived_at IS NOT OLD.archived_at))
BEGIN
    SELECT RAISE(ABORT, 'job_archive_is_final');
END;

-- Pruned means pruned: no claim, chunk, completion or event of the job is left.
CREATE TRIGGER jobs_pruned_means_no_rows_left
BEFORE UPDATE OF archive_state ON jobs
WHEN NEW.archive_state = 'pruned' AND OLD.archive_state IS NOT 'pruned'
 AND (EXISTS (SELECT 1 FROM stream_chunks WHERE job_id = NEW.id)
      OR EXISTS (SELECT 1 FROM job_completions WHERE job_id = NEW.id)
      OR EXISTS (SELECT 1 FROM job_events WHERE job_id = NEW.id)
      OR EXISTS (SELECT 1 FROM job_claims WHERE job_id = NEW.id))
BEGIN
    SELECT RAISE(ABORT, 'job_rows_remain');
END;

-- The archive pass: finished jobs not yet pruned, oldest finish first. Terminal states are
-- final and pruned is the last stage, so an archived job leaves this index for good.
CREATE INDEX jobs_to_archive ON jobs (finished_at, id)
    WHERE state IN ('succeeded', 'failed', 'cancelled') AND archive_state IS NOT 'pruned';

-- Deleting a claim checks every foreign key that may name it. The chunks' (primary key),
-- completions' (job_completions_by_job) and claims' own are indexed; these two were not, so
-- each deleted claim would walk the whole events table and the whole jobs table. Only live
-- jobs hold a claim, and only claim events name one.
CREATE INDEX job_events_by_claim ON job_events (claim_id) WHERE claim_id IS NOT NULL;
CREATE INDEX jobs_by_active_claim ON jobs (active_claim_id) WHERE active_claim_id IS NOT NULL;

-- ===========================================================================================
-- Nothing new is written for an archived job but its counters; its rows go only once stored.
-- ===========================================================================================

-- A decision arriving after the archive was stored is counted on the job row (unstored_*),
-- never stored as a row the archive does not hold.
CREATE TRIGGER job_completions_not_for_archived_jobs
BEFORE INSERT ON job_completions
WHEN EXISTS (SELECT 1 FROM jobs WHERE id = NEW.job_id AND archive_state IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'job_is_archived');
END;

CREATE TRIGGER job_events_not_for_archived_jobs
BEFORE INSERT ON job_events
WHEN NEW.job_id IS NOT NULL
 AND EXISTS (SELECT 1 FROM jobs WHERE id = NEW.job_id AND archive_state IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'job_is_archived');
END;

DROP TRIGGER job_events_are_append_only_delete;
CREATE TRIGGER job_events_are_append_only_delete
BEFORE DELETE ON job_events
WHEN OLD.job_id IS NULL
  OR NOT EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id AND archive_state IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'job_events_are_append_only');
END;

DROP TRIGGER job_completions_are_append_only_delete;
CREATE TRIGGER job_completions_are_append_only_delete
BEFORE DELETE ON job_completions
WHEN NOT EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id AND archive_state IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'job_completions_are_append_only');
END;

CREATE TRIGGER stream_chunks_stay_until_archived
BEFORE DELETE ON stream_chunks
WHEN NOT EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id AND archive_state IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'stream_chunks_are_immutable');
END;

CREATE TRIGGER job_claims_stay_until_archived
BEFORE DELETE ON job_claims
WHEN NOT EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id AND archive_state IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'claim_is_over');
END;

-- ===========================================================================================
-- Evidence custody without the completion row.
-- ===========================================================================================

-- completion_evidence referenced job_completions; its rows now outlive the completion row,
-- so the table is rebuilt with the job as its parent instead. Nothing references
-- completion_evidence, so it is copied aside, dropped, created again and copied back (foreign
-- keys stay on during a D1 migration; a row that does not come back fails the migration).
CREATE TABLE kept_completion_evidence AS SELECT * FROM completion_evidence;
DROP TABLE completion_evidence;

-- Custody: the primary key is the evidence row's identity, so an evidence row is attached to
-- at most one accepted completion, across all jobs and without a lock. A second completion
-- naming the same row violates this key and its whole batch (job finalization included)
-- rolls back. Written last in the completion batch, after the completion row it names; it
-- stays when the job is archived and the completion row goes.
CREATE TABLE completion_evidence (
    evidence_kind   TEXT    NOT NULL
                            CHECK (evidence_kind IN ('evaluation_run', 'test_result', 'cost_record',
                                                     'model_call', 'trace')),
    evidence_id     TEXT    NOT NULL,
    completion_id   TEXT    NOT NULL,
    job_id          TEXT    NOT NULL,
    organization_id TEXT    NOT NULL,
    attached_at     INTEGER NOT NULL,
    PRIMARY KEY (evidence_kind, evidence_id),
    FOREIGN KEY (job_id, organization_id) REFERENCES jobs (id, organization_id)
);

INSERT INTO completion_evidence (evidence_kind, evidence_id, completion_id, job_id, organization_id, attached_at)
    SELECT evidence_kind, evidence_id, completion_id, job_id, organization_id, attached_at
      FROM kept_completion_evidence;
DROP TABLE kept_completion_evidence;

CREATE INDEX completion_evidence_by_completion ON completion_evidence (completion_id);
CREATE INDEX completion_evidence_by_job ON completion_evidence (job_id);

-- Only an accepted completion takes custody (it is in the same batch, so its row is there).
CREATE TRIGGER completion_evidence_needs_accepted_completion
BEFORE INSERT ON completion_evidence
WHEN NOT EXISTS (SELECT 1 FROM job_completions AS c
                  WHERE c.id = NEW.completion_id AND c.job_id = NEW.job_id
                    AND c.organization_id = NEW.organization_id AND c.decision = 'accepted')
BEGIN
    SELECT RAISE(ABORT, 'evidence_needs_accepted_completion');
END;

-- Evidence exists, belongs to the completion's organization, and is the evaluation run the
-- completion named or a row of that run.
CREATE TRIGGER completion_evidence_belongs_to_the_run
BEFORE INSERT ON completion_evidence
WHEN NOT (CASE NEW.evidence_kind
    WHEN 'evaluation_run' THEN EXISTS (
        SELECT 1 FROM job_completions AS c JOIN evaluation_runs AS e ON e.id = c.evaluation_run_id
         WHERE c.id = NEW.completion_id AND e.id = NEW.evidence_id
           AND e.organization_id = NEW.organization_id)
    WHEN 'test_result' THEN EXISTS (
        SELECT 1 FROM job_completions AS c JOIN test_results AS e ON e.evaluation_run_id = c.evaluation_run_id
         WHERE c.id = NEW.completion_id AND e.id = NEW.evidence_id
           AND e.organization_id = NEW.organization_id)
    WHEN 'cost_record' THEN EXISTS (
        SELECT 1 FROM job_completions AS c JOIN cost_records AS e ON e.evaluation_run_id = c.evaluation_run_id
         WHERE c.id = NEW.completion_id AND e.id = NEW.evidence_id
           AND e.organization_id = NEW.organization_id)
    WHEN 'model_call' THEN EXISTS (
        SELECT 1 FROM job_completions AS c JOIN model_calls AS e ON e.evaluation_run_id = c.evaluation_run_id
         WHERE c.id = NEW.completion_id AND e.id = NEW.evidence_id
           AND e.organization_id = NEW.organization_id)
    WHEN 'trace' THEN EXISTS (
        SELECT 1 FROM job_completions AS c JOIN traces AS e ON e.evaluation_run_id = c.evaluation_run_id
         WHERE c.id = NEW.completion_id AND e.id = NEW.evidence_id
           AND e.organization_id = NEW.organization_id)
    ELSE 0
END)
BEGIN
    SELECT RAISE(ABORT, 'evidence_not_in_completion_run');
END;

-- Custody is never released or moved.
CREATE TRIGGER completion_evidence_is_permanent_update
BEFORE UPDATE ON completion_evidence
BEGIN
    SELECT RAISE(ABORT, 'evidence_custody_is_permanent');
END;

CREATE TRIGGER completion_evidence_is_permanent_delete
BEFORE DELETE ON completion_evidence
BEGIN
    SELECT RAISE(ABORT, 'evidence_custody_is_permanent');
END;

-- Once an accepted completion names an evaluation run, the run's evidence is final: new rows
-- in it are refused. Every accepted completion takes its run into custody first
-- (job_do/complete.rs, `attachments`), so the run's custody row says so, and it stays when the
-- completion row is archived away (it was the completion row that said so before).
DROP TRIGGER test_results_not_in_custody;
CREATE TRIGGER test_results_not_in_custody
BEFORE INSERT ON test_results
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = NEW.evaluation_run_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER cost_records_not_in_custody;
CREATE TRIGGER cost_records_not_in_custody
BEFORE INSERT ON cost_records
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = NEW.evaluation_run_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER model_calls_not_in_custody;
CREATE TRIGGER model_calls_not_in_custody
BEFORE INSERT ON model_calls
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = NEW.evaluation_run_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER traces_not_in_custody;
CREATE TRIGGER traces_not_in_custody
BEFORE INSERT ON traces
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = NEW.evaluation_run_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;
