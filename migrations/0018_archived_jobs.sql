-- Archived jobs, compact (issue 42, point 6): once a job's archive is pruned, its row leaves
-- `jobs` for `archived_jobs` in the same batch, keeping only what an archived job's reads
-- need, in the fewest bytes. A job in `jobs` is live, or finished and not yet pruned; a job in
-- `archived_jobs` is pruned: its bundle and record are in R2 (bundles/<sha256>,
-- records/<sha256>), its custody rows stay in completion_evidence.
--
-- What an archived row drops or shrinks, measured by bench/storage.py (BENCHMARKS.md):
-- * the organization by a small number (organization_numbers) instead of its 28-byte id, in
--   the row and in every index;
-- * hashes as 32-byte blobs instead of 64 hex characters (the reads render them as hex);
-- * the subject by its version, which names its artifact, kind and content hash;
-- * the requirements by reference to one row per distinct document of the organization;
-- * the input (only the runner holding a live claim reads it), the routing columns, the
--   claim and lease columns (empty on a finished job), the queue.
--
-- The reads render an archived row as a job row (the view archived_job_rows), so every read
-- of a job by id, key or page asks `jobs` and then `archived_jobs` in one statement.

-- ===========================================================================================
-- Organization numbers
-- ===========================================================================================

CREATE TABLE organization_numbers (
    number          INTEGER PRIMARY KEY,
    organization_id TEXT    NOT NULL UNIQUE REFERENCES organizations (id)
);

INSERT INTO organization_numbers (organization_id) SELECT id FROM organizations ORDER BY created_at, id;

-- A new organization gets its number with its row (organizations are made by
-- scripts/bootstrap-admin, whose insert checks no row count).
CREATE TRIGGER organization_numbers_for_a_new_organization
AFTER INSERT ON organizations
BEGIN
    INSERT INTO organization_numbers (organization_id) VALUES (NEW.id);
END;

-- ===========================================================================================
-- Requirements documents, one per distinct document of an organization's archived jobs
-- ===========================================================================================

CREATE TABLE requirement_documents (
    id                  INTEGER PRIMARY KEY,
    organization_number INTEGER NOT NULL REFERENCES organization_numbers (number),
    document            TEXT    NOT NULL
                                CHECK (json_valid(document) AND json_type(document) = 'object'),
    -- How many archived jobs name it; at 0 it is deleted with the last of them.
    jobs                INTEGER NOT NULL CHECK (jobs >= 0),
    UNIQUE (organization_number, document)
);

-- The documents no archived job names any more (deleted in the same batch as the last one).
CREATE INDEX requirement_documents_unused ON requirement_documents (organization_number)
    WHERE jobs = 0;

-- A document goes only when no archived job names it.
CREATE TRIGGER requirement_documents_stay_while_named
BEFORE DELETE ON requirement_documents
WHEN OLD.jobs > 0
BEGIN
    SELECT RAISE(ABORT, 'requirement_document_is_named');
END;

-- ===========================================================================================
-- Archived jobs
-- ===========================================================================================

CREATE TABLE archived_jobs (
    seq                    INTEGER PRIMARY KEY,
    id                     TEXT    NOT NULL UNIQUE,
    organization_number    INTEGER NOT NULL REFERENCES organization_numbers (number),
    idempotency_key        TEXT    NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    intent_hash            BLOB    NOT NULL
                                   CHECK (typeof(intent_hash) = 'blob' AND length(intent_hash) = 32),
    subject_version_id     INTEGER NOT NULL REFERENCES release_versions (id),
    subject_environment    TEXT    NOT NULL CHECK (subject_environment IN ('dev', 'staging', 'prod')),
    -- Its requirements_documents row; not a foreign key, whose check would walk this table for
    -- every document deleted: the document's count of the jobs naming it guards it instead.
    requirements_id        INTEGER NOT NULL,
    input_hash             BLOB    NOT NULL
                                   CHECK (typeof(input_hash) = 'blob' AND length(input_hash) = 32),
    state                  TEXT    NOT NULL CHECK (state IN ('succeeded', 'failed', 'cancelled')),
    dispatch_attempt       INTEGER NOT NULL CHECK (dispatch_attempt BETWEEN 0 AND 8),
    released_attempts      INTEGER NOT NULL CHECK (released_attempts BETWEEN 0 AND 5),
    cancel_reason          TEXT,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL,
    finished_at            INTEGER NOT NULL,
    -- The archive's summary (as jobs had it at stage stored).
    archived_at            INTEGER NOT NULL,
    bundle_sha256          BLOB    NOT NULL
                                   CHECK (typeof(bundle_sha256) = 'blob' AND length(bundle_sha256) = 32),
    bundle_bytes           INTEGER NOT NULL CHECK (bundle_bytes > 0),
    stream_chunks          INTEGER NOT NULL CHECK (stream_chunks >= 0),
    stream_bytes           INTEGER NOT NULL CHECK (stream_bytes >= 0),
    stream_head            BLOB    CHECK (stream_head IS NULL
                                          OR (typeof(stream_head) = 'blob' AND length(stream_head) = 32)),
    -- Decisions past the stored ones, late ones included (counted here once archived).
    unstored_decisions     INTEGER NOT NULL DEFAULT 0 CHECK (unstored_decisions >= 0),
    last_unstored_checksum BLOB    CHECK (last_unstored_checksum IS NULL
                                          OR (typeof(last_unstored_checksum) = 'blob'
                                              AND length(last_unstored_checksum) = 32)),
    last_unstored_decision TEXT    CHECK (last_unstored_decision IS NULL
                                          OR last_unstored_decision IN ('duplicate', 'conflict', 'stale')),
    last_unstored_at       INTEGER,
    -- An admin's hold, and the retention pass's mark (as on jobs, migrations 0011 and 0014).
    held_at                INTEGER,
    held_by                TEXT    CHECK (held_by IS NULL OR length(held_by) BETWEEN 1 AND 200),
    held_reason            TEXT    CHECK (held_reason IS NULL OR length(held_reason) BETWEEN 1 AND 1000),
    expiring_at            INTEGER,

    CHECK ((stream_chunks > 0) = (stream_head IS NOT NULL)),
    CHECK ((held_at IS NULL) = (held_by IS NULL)),
    CHECK (held_reason IS NULL OR held_at IS NOT NULL),
    -- A held job is never expiring, and an expiring one is never held.
    CHECK (expiring_at IS NULL OR held_at IS NULL)
);

-- Idempotency: at most one job per key, across both tables (jobs_idempotency_key_is_free
-- below guards the other way).
CREATE UNIQUE INDEX archived_jobs_by_key ON archived_jobs (organization_number, idempotency_key);
-- Pages of an organization's jobs, newest first, in all states or in one.
CREATE INDEX archived_jobs_by_organization ON archived_jobs (organization_number, created_at);
CREATE INDEX archived_jobs_by_state ON archived_jobs (organization_number, state, created_at);
-- The retention pass: neither held nor expiring, oldest finish first; and the expiring ones.
CREATE INDEX archived_jobs_to_expire ON archived_jobs (organization_number, finished_at)
    WHERE held_at IS NULL AND expiring_at IS NULL;
CREATE INDEX archived_jobs_expiring ON archived_jobs (organization_number, expiring_at)
    WHERE expiring_at IS NOT NULL;

-- Only a job pruned in `jobs` comes here (the move's batch deletes it there next), naming
-- its own requirements as a document of its organization that counts it.
CREATE TRIGGER archived_jobs_come_from_pruned_jobs
BEFORE INSERT ON archived_jobs
WHEN NOT EXISTS (SELECT 1 FROM jobs AS j
                   JOIN organization_numbers AS n ON n.organization_id = j.organization_id
                   JOIN requirement_documents AS d ON d.id = NEW.requirements_id
                  WHERE j.id = NEW.id AND n.number = NEW.organization_number
                    AND j.archive_state = 'pruned' AND d.organization_number = n.number
                    AND d.document = j.requirements AND d.jobs > 0)
BEGIN
    SELECT RAISE(ABORT, 'archived_job_needs_a_pruned_job');
END;

-- What the job was and how it ended is final; only its late decisions' count, its hold and
-- its expiry change. (And its finish time, which jobs never guarded either: an operator may
-- move it through D1, as the retention tests do to see a pass delete a job.)
CREATE TRIGGER archived_jobs_are_final
BEFORE UPDATE OF id, organization_number, idempotency_key, intent_hash, subject_version_id,
                 subject_environment, requirements_id, input_hash, state, dispatch_attempt,
                 released_attempts, cancel_reason, created_at, updated_at, archived_at,
                 bundle_sha256, bundle_bytes, stream_chunks, stream_bytes, stream_head
              ON archived_jobs
BEGIN
    SELECT RAISE(ABORT, 'archived_job_is_final');
END;

-- A mark of expiry is final, and a hold or its release needs a job that is not expiring.
CREATE TRIGGER archived_jobs_expiring_is_final
BEFORE UPDATE OF expiring_at, held_at, held_by, held_reason ON archived_jobs
WHEN OLD.expiring_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'job_expiry_is_final');
END;

-- Deleting is the retention pass's last step: the job is expiring and its custody is gone.
CREATE TRIGGER archived_jobs_delete_needs_expiry
BEFORE DELETE ON archived_jobs
WHEN OLD.expiring_at IS NULL
  OR EXISTS (SELECT 1 FROM completion_evidence WHERE job_id = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'job_delete_needs_expiry');
END;

-- An archived job as a job row: the columns of `jobs` its reads select, hashes as hex.
CREATE VIEW archived_job_rows AS
SELECT a.id, n.organization_id, a.organization_number, a.idempotency_key,
       lower(hex(a.intent_hash)) AS intent_hash, r.kind AS subject_kind,
       v.artifact_id AS subject_artifact_id, a.subject_version_id,
       v.content_hash AS subject_content_hash, a.subject_environment,
       lower(hex(a.input_hash)) AS input_hash, d.document AS requirements, a.state,
       a.dispatch_attempt, a.released_attempts, NULL AS active_claim_id, NULL AS lease_expires_at,
       a.cancel_reason, a.created_at, a.updated_at, a.finished_at, a.unstored_decisions,
       nullif(lower(hex(a.last_unstored_checksum)), '') AS last_unstored_checksum,
       a.last_unstored_decision, a.last_unstored_at, a.held_at, a.held_by, a.held_reason,
       a.expiring_at, 'pruned' AS archive_state, lower(hex(a.bundle_sha256)) AS bundle_sha256,
       a.bundle_bytes, a.stream_chunks, a.stream_bytes,
       nullif(lower(hex(a.stream_head)), '') AS stream_head, a.archived_at
  FROM archived_jobs AS a
  JOIN organization_numbers AS n ON n.number = a.organization_number
  JOIN release_versions AS v ON v.id = a.subject_version_id
  JOIN release_artifacts AS r ON r.id = v.artifact_id
  JOIN requirement_documents AS d ON d.id = a.requirements_id;

-- ===========================================================================================
-- jobs: a row leaves only for archived_jobs; a new one takes a free key and id
-- ===========================================================================================

DROP TRIGGER jobs_delete_needs_expiry;
CREATE TRIGGER jobs_delete_needs_the_archived_row
BEFORE DELETE ON jobs
WHEN NOT EXISTS (SELECT 1 FROM archived_jobs WHERE id = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'job_delete_needs_the_archived_row');
END;

-- (An enqueue reads the key in both tables first; this is the race where the job it would
-- have found moved between that read and the insert: answered as the UNIQUE is, a replay.)
CREATE TRIGGER jobs_idempotency_key_is_free
BEFORE INSERT ON jobs
WHEN EXISTS (SELECT 1 FROM archived_jobs
              WHERE organization_number = (SELECT number FROM organization_numbers
                                            WHERE organization_id = NEW.organization_id)
                AND idempotency_key = NEW.idempotency_key)
BEGIN
    SELECT RAISE(ABORT, 'job_idempotency_key_taken');
END;

CREATE TRIGGER jobs_id_is_free
BEFORE INSERT ON jobs
WHEN EXISTS (SELECT 1 FROM archived_jobs WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'job_id_taken');
END;

-- ===========================================================================================
-- Custody: its rows stay with the job, wherever the job's row is
-- ===========================================================================================

-- completion_evidence named its job by a foreign key to jobs, which a moved job leaves; it is
-- rebuilt without it (the completion that takes custody names the job through its own row,
-- checked by completion_evidence_needs_accepted_completion). Nothing references it: copied
-- aside, dropped, created again and copied back, its triggers with it. Rebuilt compact too:
-- the row lives in its primary key's b-tree (WITHOUT ROWID: no second copy of the key), and
-- the index by completion goes (no statement reads custody by completion since migration
-- 0010 dropped that foreign key); bench/storage.py measures what a custody row costs.
CREATE TABLE kept_completion_evidence AS SELECT * FROM completion_evidence;
DROP TABLE completion_evidence;

CREATE TABLE completion_evidence (
    evidence_kind   TEXT    NOT NULL
                            CHECK (evidence_kind IN ('evaluation_run', 'test_result', 'cost_record',
                                                     'model_call', 'trace')),
    evidence_id     TEXT    NOT NULL,
    completion_id   TEXT    NOT NULL,
    job_id          TEXT    NOT NULL,
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    attached_at     INTEGER NOT NULL,
    PRIMARY KEY (evidence_kind, evidence_id)
) WITHOUT ROWID;

INSERT INTO completion_evidence (evidence_kind, evidence_id, completion_id, job_id, organization_id, attached_at)
    SELECT evidence_kind, evidence_id, completion_id, job_id, organization_id, attached_at
      FROM kept_completion_evidence;
DROP TABLE kept_completion_evidence;

CREATE INDEX completion_evidence_by_job ON completion_evidence (job_id);

CREATE TRIGGER completion_evidence_needs_accepted_completion
BEFORE INSERT ON completion_evidence
WHEN NOT EXISTS (SELECT 1 FROM job_completions AS c
                  WHERE c.id = NEW.completion_id AND c.job_id = NEW.job_id
                    AND c.organization_id = NEW.organization_id AND c.decision = 'accepted')
BEGIN
    SELECT RAISE(ABORT, 'evidence_needs_accepted_completion');
END;

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

CREATE TRIGGER completion_evidence_is_permanent_update
BEFORE UPDATE ON completion_evidence
BEGIN
    SELECT RAISE(ABORT, 'evidence_custody_is_permanent');
END;

-- Custody goes only with its job, once the retention pass marked the job expiring.
CREATE TRIGGER completion_evidence_is_permanent_delete
BEFORE DELETE ON completion_evidence
WHEN NOT EXISTS (SELECT 1 FROM archived_jobs WHERE id = OLD.job_id AND expiring_at IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'evidence_custody_is_permanent');
END;

-- Evidence in a job's custody stays until that job is expiring (only an archived job is).
DROP TRIGGER evaluation_runs_in_custody_stay;
CREATE TRIGGER evaluation_runs_in_custody_stay
BEFORE DELETE ON evaluation_runs
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.id
                AND NOT EXISTS (SELECT 1 FROM archived_jobs AS a
                                 WHERE a.id = ce.job_id AND a.expiring_at IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER test_results_in_custody_stay;
CREATE TRIGGER test_results_in_custody_stay
BEFORE DELETE ON test_results
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.evaluation_run_id
                AND NOT EXISTS (SELECT 1 FROM archived_jobs AS a
                                 WHERE a.id = ce.job_id AND a.expiring_at IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER cost_records_in_custody_stay;
CREATE TRIGGER cost_records_in_custody_stay
BEFORE DELETE ON cost_records
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.evaluation_run_id
                AND NOT EXISTS (SELECT 1 FROM archived_jobs AS a
                                 WHERE a.id = ce.job_id AND a.expiring_at IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER model_calls_in_custody_stay;
CREATE TRIGGER model_calls_in_custody_stay
BEFORE DELETE ON model_calls
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.evaluation_run_id
                AND NOT EXISTS (SELECT 1 FROM archived_jobs AS a
                                 WHERE a.id = ce.job_id AND a.expiring_at IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

DROP TRIGGER traces_in_custody_stay;
CREATE TRIGGER traces_in_custody_stay
BEFORE DELETE ON traces
WHEN EXISTS (SELECT 1 FROM completion_evidence AS ce
              WHERE ce.evidence_kind = 'evaluation_run' AND ce.evidence_id = OLD.evaluation_run_id
                AND NOT EXISTS (SELECT 1 FROM archived_jobs AS a
                                 WHERE a.id = ce.job_id AND a.expiring_at IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'evidence_run_in_custody');
END;

-- ===========================================================================================
-- The jobs pruned before this migration move now, as the archive moves them from here on
-- ===========================================================================================

INSERT INTO requirement_documents (organization_number, document, jobs)
SELECT n.number, j.requirements, count(*)
  FROM jobs AS j JOIN organization_numbers AS n ON n.organization_id = j.organization_id
 WHERE j.archive_state = 'pruned'
 GROUP BY n.number, j.requirements;

INSERT INTO archived_jobs (id, organization_number, idempotency_key, intent_hash,
    subject_version_id, subject_environment, requirements_id, input_hash, state,
    dispatch_attempt, released_attempts, cancel_reason, created_at, updated_at, finished_at,
    archived_at, bundle_sha256, bundle_bytes, stream_chunks, stream_bytes, stream_head,
    unstored_decisions, last_unstored_checksum, last_unstored_decision, last_unstored_at,
    held_at, held_by, held_reason, expiring_at)
SELECT j.id, n.number, j.idempotency_key, unhex(j.intent_hash), j.subject_version_id,
       j.subject_environment, d.id, unhex(j.input_hash), j.state, j.dispatch_attempt,
       j.released_attempts, j.cancel_reason, j.created_at, j.updated_at, j.finished_at,
       j.archived_at, unhex(j.bundle_sha256), j.bundle_bytes, j.stream_chunks, j.stream_bytes,
       unhex(j.stream_head), j.unstored_decisions, unhex(j.last_unstored_checksum),
       j.last_unstored_decision, j.last_unstored_at, j.held_at, j.held_by, j.held_reason,
       j.expiring_at
  FROM jobs AS j
  JOIN organization_numbers AS n ON n.organization_id = j.organization_id
  JOIN requirement_documents AS d ON d.organization_number = n.number AND d.document = j.requirements
 WHERE j.archive_state = 'pruned'
 ORDER BY j.created_at, j.id;

-- Their charge (migration 0015) drops as the move's does (usage/job_pruned.sql): the input
-- and what a live row costs beyond an archived one (1024 - 512, as the worker has them here).
UPDATE organization_usage SET d1_bytes = max(0, d1_bytes -
    (SELECT coalesce(sum(512 + length(CAST(j.input AS BLOB))), 0)
       FROM jobs AS j WHERE j.organization_id = organization_usage.organization_id
        AND j.archive_state = 'pruned'));

DELETE FROM jobs WHERE archive_state = 'pruned';

-- The retention pass reads archived_jobs alone now: its indexes on jobs would stay empty.
DROP INDEX jobs_to_expire;
DROP INDEX jobs_expiring;
