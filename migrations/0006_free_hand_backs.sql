-- Hand-backs that do not count: a runner handing its claim back (POST
-- /api/remote-runners/release) requeues the job without spending one of its three attempts.
--
-- The attempt number still grows with every dispatch (it fences the released claim's late
-- writes: the next grant is attempt n + 1 with a new nonce), so the bounds that said "three
-- attempts" become two numbers on the job: `dispatch_attempt`, every dispatch, at most 8, and
-- `released_attempts`, the free hand-backs among them, at most 5. The three-attempt limit is on
-- their difference. A sixth hand-back of the same job counts like a lapsed lease, so a runner
-- that keeps handing a job back cannot keep it in the queue for ever.
--
-- SQLite cannot change a CHECK in place, so the four tables whose CHECKs name the bound
-- (jobs, job_claims, job_events, job_completions) are rebuilt: each is copied aside, the four
-- are dropped, created again with the new bounds under the same names, filled from the copies,
-- and their indexes and triggers are created again (the triggers last, so that copying the
-- rows does not fire the insert guards meant for new ones).
--
-- D1 enforces foreign keys and runs a migration as one transaction. Dropping a parent table
-- counts its children's rows as violations; deferring the check to the commit lets the
-- re-created table of the same name take them back as its rows are copied in, and the commit
-- fails (and nothing changes) if any row did not come back. No table is renamed: renaming a
-- parent rewrites its children's REFERENCES clauses to the old name.
PRAGMA defer_foreign_keys = on;

CREATE TABLE kept_jobs AS SELECT * FROM jobs;
CREATE TABLE kept_job_claims AS SELECT * FROM job_claims;
CREATE TABLE kept_job_events AS SELECT * FROM job_events;
CREATE TABLE kept_job_completions AS SELECT * FROM job_completions;

DROP TABLE job_completions;
DROP TABLE job_events;
DROP TABLE job_claims;
DROP TABLE jobs;

CREATE TABLE jobs (
    id                   TEXT    PRIMARY KEY,
    organization_id      TEXT    NOT NULL REFERENCES organizations (id),
    -- Same key + same intent → the original job; same key + different intent → conflict.
    idempotency_key      TEXT    NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    intent_hash          TEXT    NOT NULL
                                 CHECK (length(intent_hash) = 64 AND intent_hash NOT GLOB '*[^0-9a-f]*'),

    -- The exact immutable subject: artifact, version, content hash, environment.
    subject_kind         TEXT    NOT NULL
                                 CHECK (subject_kind IN ('prompt', 'scorer', 'tool', 'workflow', 'agent')),
    subject_artifact_id  TEXT    NOT NULL,
    subject_version_id   INTEGER NOT NULL,
    subject_content_hash TEXT    NOT NULL,
    subject_environment  TEXT    NOT NULL CHECK (subject_environment IN ('dev', 'staging', 'prod')),

    input                TEXT    NOT NULL CHECK (json_valid(input)),
    -- H(input) over the lexemes the client sent; the envelope carries this, not the input.
    input_hash           TEXT    NOT NULL
                                 CHECK (length(input_hash) = 64 AND input_hash NOT GLOB '*[^0-9a-f]*'),
    requirements         TEXT    NOT NULL
                                 CHECK (json_valid(requirements) AND json_type(requirements) = 'object'),

    -- Denormalized from requirements for the claim's matching query (see jobs_queue).
    execution_kind       TEXT    NOT NULL
                                 CHECK (execution_kind IN ('prompt', 'scorer', 'tool', 'workflow', 'agent')),
    runtime              TEXT    NOT NULL CHECK (length(runtime) BETWEEN 1 AND 100),
    external             INTEGER NOT NULL DEFAULT 0 CHECK (external IN (0, 1)),
    problem_type         TEXT,
    tags                 TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(tags) AND json_type(tags) = 'array'),

    state                TEXT    NOT NULL DEFAULT 'queued'
                                 CHECK (state IN ('queued', 'claimed', 'running', 'cancel_requested',
                                                  'succeeded', 'failed', 'cancelled', 'lost')),
    -- Attempts dispatched so far, hand-backs included. A claim for attempt n is granted only
    -- while this is n - 1.
    dispatch_attempt     INTEGER NOT NULL DEFAULT 0 CHECK (dispatch_attempt BETWEEN 0 AND 8),
    -- Of those, the attempts their runner handed back (POST /api/remote-runners/release) that
    -- do not count against the three-attempt limit: the first five hand-backs of a job
    -- (edgerunner_protocol::recovery::MAX_FREE_HAND_BACKS). So a job is dispatched at most
    -- 3 + 5 = 8 times (MAX_DISPATCHES).
    released_attempts    INTEGER NOT NULL DEFAULT 0 CHECK (released_attempts BETWEEN 0 AND 5),
    active_claim_id      TEXT    REFERENCES job_claims (id),
    -- Authoritative lease expiry: the reaper reads this (jobs_lease_expiry), heartbeats extend it.
    lease_expires_at     INTEGER,
    cancel_reason        TEXT,
    cancel_requested_at  INTEGER,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    finished_at          INTEGER,
    -- Non-accepted completion decisions past the stored ones (migration 0004).
    unstored_decisions   INTEGER NOT NULL DEFAULT 0 CHECK (unstored_decisions >= 0),
    last_unstored_checksum TEXT
        CHECK (last_unstored_checksum IS NULL OR
               (length(last_unstored_checksum) = 64 AND last_unstored_checksum NOT GLOB '*[^0-9a-f]*')),
    last_unstored_decision TEXT
        CHECK (last_unstored_decision IS NULL OR last_unstored_decision IN ('duplicate', 'conflict', 'stale')),
    last_unstored_at     INTEGER,

    -- A job holds a claim and a lease exactly while it is claimed, running or being cancelled.
    CHECK ((state IN ('claimed', 'running', 'cancel_requested')) = (active_claim_id IS NOT NULL)),
    CHECK ((state IN ('claimed', 'running', 'cancel_requested')) = (lease_expires_at IS NOT NULL)),
    -- Bounded retry: a job that used its third counted attempt is never queued again.
    CHECK (released_attempts <= dispatch_attempt),
    CHECK (state <> 'queued' OR dispatch_attempt - released_attempts < 3),
    CHECK (state <> 'cancel_requested' OR cancel_reason IS NOT NULL),
    CHECK (state NOT IN ('succeeded', 'failed', 'cancelled') OR finished_at IS NOT NULL),

    UNIQUE (organization_id, idempotency_key),
    UNIQUE (id, organization_id),
    -- Subject consistency, declaratively: the artifact is of the subject kind, the version is
    -- that artifact's with that content hash, and it was promoted to the job's environment —
    -- all within the job's organization.
    FOREIGN KEY (subject_artifact_id, organization_id, subject_kind)
        REFERENCES release_artifacts (id, organization_id, kind),
    FOREIGN KEY (subject_version_id, organization_id, subject_artifact_id, subject_content_hash)
        REFERENCES release_versions (id, organization_id, artifact_id, content_hash),
    FOREIGN KEY (subject_version_id, subject_environment)
        REFERENCES release_promotions (version_id, environment)
);

CREATE TABLE job_claims (
    id               TEXT    PRIMARY KEY,
    job_id           TEXT    NOT NULL,
    organization_id  TEXT    NOT NULL,
    runner_id        TEXT    NOT NULL,
    dispatch_attempt INTEGER NOT NULL CHECK (dispatch_attempt BETWEEN 1 AND 8),
    -- Single use across the whole system: the runner refuses a nonce it has seen.
    nonce            TEXT    NOT NULL UNIQUE CHECK (length(nonce) >= 16),
    -- The signing key id the envelope was signed with.
    key_id           TEXT    NOT NULL,
    -- The signed job exactly as handed to the runner ({algorithm, keyId, envelope, payloadHash,
    -- signature}): the first link of the job's custody bundle.
    signed_job       TEXT    CHECK (signed_job IS NULL OR json_valid(signed_job)),
    state            TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'released', 'lost')),
    issued_at        INTEGER NOT NULL,
    -- The signed envelope's validity window.
    expires_at       INTEGER NOT NULL,
    -- The lease this claim last held (written with jobs.lease_expires_at, which is the one the
    -- reaper reads); kept here so the claim history shows how long each attempt was covered.
    lease_expires_at INTEGER NOT NULL,
    started_at       INTEGER,
    ended_at         INTEGER,
    end_reason       TEXT,
    -- When the last heartbeat was accepted (migration 0005); NULL before the first.
    last_heartbeat_at INTEGER,
    CHECK (expires_at > issued_at),
    CHECK ((state = 'active') = (ended_at IS NULL)),
    -- One claim per (job, attempt): two grants of the same attempt cannot both commit.
    UNIQUE (job_id, dispatch_attempt),
    -- Parent keys: chunks and completions name a claim together with its job and attempt
    -- (and, for completions, its runner), so they cannot mix identities.
    UNIQUE (id, job_id, dispatch_attempt),
    UNIQUE (id, job_id, dispatch_attempt, runner_id),
    FOREIGN KEY (job_id, organization_id) REFERENCES jobs (id, organization_id),
    FOREIGN KEY (runner_id, organization_id) REFERENCES runners (id, organization_id)
);

CREATE TABLE job_events (
    -- An integer key gives the timeline a total order that millisecond timestamps cannot
    -- (a batch writes several events in the same millisecond); AUTOINCREMENT never reuses one.
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    job_id          TEXT,
    runner_id       TEXT,
    claim_id        TEXT    REFERENCES job_claims (id),
    -- Who did it: 'api_key:<id>', 'runner:<id>', 'system:reaper', 'system:alarm', …
    actor           TEXT    NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    -- Dotted lower-case event names ('job.enqueued', 'job.claimed', 'runner.revoked',
    -- 'api_key.created', …). The set grows with features, so the shape is checked rather
    -- than a list that would need a migration per new event.
    type            TEXT    NOT NULL CHECK (type GLOB '[a-z]*.[a-z]*' AND type NOT GLOB '*[^a-z0-9_.]*'),
    attempt         INTEGER CHECK (attempt IS NULL OR attempt BETWEEN 0 AND 8),
    reason          TEXT,
    detail          TEXT    CHECK (detail IS NULL OR json_valid(detail)),
    at              INTEGER NOT NULL,
    FOREIGN KEY (job_id, organization_id) REFERENCES jobs (id, organization_id),
    FOREIGN KEY (runner_id, organization_id) REFERENCES runners (id, organization_id)
);

CREATE TABLE job_completions (
    id                    TEXT    PRIMARY KEY,
    job_id                TEXT    NOT NULL,
    organization_id       TEXT    NOT NULL,
    claim_id              TEXT    NOT NULL,
    runner_id             TEXT    NOT NULL,
    dispatch_attempt      INTEGER NOT NULL CHECK (dispatch_attempt BETWEEN 1 AND 8),
    decision              TEXT    NOT NULL CHECK (decision IN ('accepted', 'duplicate', 'conflict', 'stale')),
    rationale             TEXT    NOT NULL,
    completion_checksum   TEXT    NOT NULL
                                  CHECK (length(completion_checksum) = 64 AND completion_checksum NOT GLOB '*[^0-9a-f]*'),
    status                TEXT    NOT NULL CHECK (status IN ('succeeded', 'failed', 'cancelled')),
    input_hash            TEXT    NOT NULL
                                  CHECK (length(input_hash) = 64 AND input_hash NOT GLOB '*[^0-9a-f]*'),
    result_hash           TEXT    CHECK (result_hash IS NULL OR
                                         (length(result_hash) = 64 AND result_hash NOT GLOB '*[^0-9a-f]*')),
    -- NULL when the attempt streamed nothing.
    final_stream_checksum TEXT    CHECK (final_stream_checksum IS NULL OR
                                         (length(final_stream_checksum) = 64 AND
                                          final_stream_checksum NOT GLOB '*[^0-9a-f]*')),
    -- evidence.evaluationRunId, as a column so custody can check each evidence row's run.
    evaluation_run_id     TEXT,
    evidence              TEXT    NOT NULL CHECK (json_valid(evidence) AND json_type(evidence) = 'object'),
    reported_costs        TEXT    CHECK (reported_costs IS NULL OR json_valid(reported_costs)),
    -- As the runner sent it (hashed into completion_checksum).
    completed_at          TEXT    NOT NULL,
    -- The completion exactly as received (its checksum covers every field, unknown ones too),
    -- so the custody bundle can be re-verified offline.
    received              TEXT    CHECK (received IS NULL OR json_valid(received)),
    received_at           INTEGER NOT NULL,
    UNIQUE (id, job_id, organization_id),
    FOREIGN KEY (job_id, organization_id) REFERENCES jobs (id, organization_id),
    FOREIGN KEY (claim_id, job_id, dispatch_attempt, runner_id)
        REFERENCES job_claims (id, job_id, dispatch_attempt, runner_id),
    FOREIGN KEY (runner_id, organization_id) REFERENCES runners (id, organization_id)
);

INSERT INTO jobs (id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input, input_hash, requirements, execution_kind, runtime, external, problem_type, tags, state, dispatch_attempt, active_claim_id, lease_expires_at, cancel_reason, cancel_requested_at, created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum, last_unstored_decision, last_unstored_at)
    SELECT id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id, subject_version_id, subject_content_hash, subject_environment, input, input_hash, requirements, execution_kind, runtime, external, problem_type, tags, state, dispatch_attempt, active_claim_id, lease_expires_at, cancel_reason, cancel_requested_at, created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum, last_unstored_decision, last_unstored_at FROM kept_jobs;
INSERT INTO job_claims (id, job_id, organization_id, runner_id, dispatch_attempt, nonce, key_id, signed_job, state, issued_at, expires_at, lease_expires_at, started_at, ended_at, end_reason, last_heartbeat_at)
    SELECT id, job_id, organization_id, runner_id, dispatch_attempt, nonce, key_id, signed_job, state, issued_at, expires_at, lease_expires_at, started_at, ended_at, end_reason, last_heartbeat_at FROM kept_job_claims;
INSERT INTO job_events (id, organization_id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at)
    SELECT id, organization_id, job_id, runner_id, claim_id, actor, type, attempt, reason, detail, at FROM kept_job_events;
INSERT INTO job_completions (id, job_id, organization_id, claim_id, runner_id, dispatch_attempt, decision, rationale, completion_checksum, status, input_hash, result_hash, final_stream_checksum, evaluation_run_id, evidence, reported_costs, completed_at, received, received_at)
    SELECT id, job_id, organization_id, claim_id, runner_id, dispatch_attempt, decision, rationale, completion_checksum, status, input_hash, result_hash, final_stream_checksum, evaluation_run_id, evidence, reported_costs, completed_at, received, received_at FROM kept_job_completions;

DROP TABLE kept_jobs;
DROP TABLE kept_job_claims;
DROP TABLE kept_job_events;
DROP TABLE kept_job_completions;

CREATE INDEX jobs_queue
    ON jobs (organization_id, execution_kind, runtime, external, created_at, id)
    WHERE state = 'queued';

CREATE INDEX jobs_lease_expiry
    ON jobs (lease_expires_at)
    WHERE state IN ('claimed', 'running', 'cancel_requested');

CREATE INDEX jobs_lease_expiry_by_organization
    ON jobs (organization_id, lease_expires_at)
    WHERE state IN ('claimed', 'running', 'cancel_requested');

CREATE INDEX jobs_by_organization ON jobs (organization_id, created_at, id);

CREATE INDEX jobs_by_organization_state ON jobs (organization_id, state, created_at, id);

CREATE UNIQUE INDEX job_claims_one_active_per_job ON job_claims (job_id) WHERE state = 'active';

CREATE INDEX job_claims_by_runner ON job_claims (runner_id, state, issued_at);

CREATE INDEX job_claims_by_runner_issued ON job_claims (runner_id, issued_at, id);

CREATE INDEX job_events_by_job ON job_events (job_id, id);

CREATE INDEX job_events_by_runner ON job_events (runner_id, id);

CREATE INDEX job_events_by_organization ON job_events (organization_id, id);

CREATE UNIQUE INDEX job_completions_one_accepted_per_job
    ON job_completions (job_id) WHERE decision = 'accepted';

CREATE INDEX job_completions_by_job ON job_completions (job_id, received_at);

CREATE INDEX job_completions_accepted_by_run
    ON job_completions (evaluation_run_id) WHERE decision = 'accepted';

CREATE TRIGGER jobs_start_queued
BEFORE INSERT ON jobs
WHEN NEW.state IS NOT 'queued' OR NEW.dispatch_attempt IS NOT 0 OR NEW.released_attempts IS NOT 0
BEGIN
    SELECT RAISE(ABORT, 'job_must_start_queued');
END;

CREATE TRIGGER jobs_intent_is_immutable
BEFORE UPDATE OF organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
                 subject_version_id, subject_content_hash, subject_environment, input, input_hash,
                 requirements, execution_kind, runtime, external, problem_type, tags, created_at ON jobs
WHEN NEW.organization_id IS NOT OLD.organization_id
  OR NEW.idempotency_key IS NOT OLD.idempotency_key
  OR NEW.intent_hash IS NOT OLD.intent_hash
  OR NEW.subject_kind IS NOT OLD.subject_kind
  OR NEW.subject_artifact_id IS NOT OLD.subject_artifact_id
  OR NEW.subject_version_id IS NOT OLD.subject_version_id
  OR NEW.subject_content_hash IS NOT OLD.subject_content_hash
  OR NEW.subject_environment IS NOT OLD.subject_environment
  OR NEW.input IS NOT OLD.input
  OR NEW.input_hash IS NOT OLD.input_hash
  OR NEW.requirements IS NOT OLD.requirements
  OR NEW.execution_kind IS NOT OLD.execution_kind
  OR NEW.runtime IS NOT OLD.runtime
  OR NEW.external IS NOT OLD.external
  OR NEW.problem_type IS NOT OLD.problem_type
  OR NEW.tags IS NOT OLD.tags
  OR NEW.created_at IS NOT OLD.created_at
BEGIN
    SELECT RAISE(ABORT, 'job_intent_is_immutable');
END;

CREATE TRIGGER jobs_terminal_states_are_final
BEFORE UPDATE OF state ON jobs
WHEN OLD.state IN ('succeeded', 'failed', 'cancelled') AND NEW.state IS NOT OLD.state
BEGIN
    SELECT RAISE(ABORT, 'job_is_finished');
END;

CREATE TRIGGER jobs_dispatch_attempt_only_grows
BEFORE UPDATE OF dispatch_attempt, released_attempts ON jobs
WHEN NEW.dispatch_attempt < OLD.dispatch_attempt
  OR NEW.released_attempts < OLD.released_attempts
BEGIN
    SELECT RAISE(ABORT, 'job_dispatch_attempt_only_grows');
END;

CREATE TRIGGER jobs_hold_only_their_active_claim
BEFORE UPDATE OF state, active_claim_id, dispatch_attempt ON jobs
WHEN NEW.state IN ('claimed', 'running', 'cancel_requested')
 AND NOT EXISTS (SELECT 1 FROM job_claims AS c
                  WHERE c.id = NEW.active_claim_id
                    AND c.job_id = NEW.id
                    AND c.dispatch_attempt = NEW.dispatch_attempt
                    AND c.state = 'active')
BEGIN
    SELECT RAISE(ABORT, 'job_claim_mismatch');
END;

CREATE TRIGGER job_claims_require_queued_job
BEFORE INSERT ON job_claims
WHEN NOT EXISTS (SELECT 1 FROM jobs AS j
                  WHERE j.id = NEW.job_id
                    AND j.organization_id = NEW.organization_id
                    AND j.state = 'queued'
                    AND j.dispatch_attempt = NEW.dispatch_attempt - 1)
BEGIN
    SELECT RAISE(ABORT, 'claim_requires_queued_job');
END;

CREATE TRIGGER job_claims_require_active_runner
BEFORE INSERT ON job_claims
WHEN NEW.state IS NOT 'active'
  OR NOT EXISTS (SELECT 1 FROM runners AS r WHERE r.id = NEW.runner_id AND r.state = 'active')
BEGIN
    SELECT RAISE(ABORT, 'claim_requires_active_runner');
END;

CREATE TRIGGER job_claims_end_is_final
BEFORE UPDATE ON job_claims
WHEN (OLD.state IS NOT 'active' AND NEW.state IS NOT OLD.state)
  OR NEW.job_id IS NOT OLD.job_id
  OR NEW.organization_id IS NOT OLD.organization_id
  OR NEW.runner_id IS NOT OLD.runner_id
  OR NEW.dispatch_attempt IS NOT OLD.dispatch_attempt
  OR NEW.nonce IS NOT OLD.nonce
BEGIN
    SELECT RAISE(ABORT, 'claim_is_over');
END;

CREATE TRIGGER job_events_are_append_only_update
BEFORE UPDATE ON job_events
BEGIN
    SELECT RAISE(ABORT, 'job_events_are_append_only');
END;

CREATE TRIGGER job_events_are_append_only_delete
BEFORE DELETE ON job_events
BEGIN
    SELECT RAISE(ABORT, 'job_events_are_append_only');
END;

CREATE TRIGGER job_completions_accept_only_the_active_claim
BEFORE INSERT ON job_completions
WHEN NEW.decision = 'accepted'
 AND NOT EXISTS (SELECT 1 FROM jobs AS j
                   JOIN job_claims AS c ON c.id = j.active_claim_id
                  WHERE j.id = NEW.job_id
                    AND j.state IN ('claimed', 'running', 'cancel_requested')
                    AND j.active_claim_id = NEW.claim_id
                    AND j.dispatch_attempt = NEW.dispatch_attempt
                    AND c.state = 'active')
BEGIN
    SELECT RAISE(ABORT, 'completion_not_from_active_claim');
END;

CREATE TRIGGER job_completions_accept_only_the_job_input
BEFORE INSERT ON job_completions
WHEN NEW.decision = 'accepted'
 AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = NEW.job_id AND j.input_hash = NEW.input_hash)
BEGIN
    SELECT RAISE(ABORT, 'completion_input_hash_mismatch');
END;

CREATE TRIGGER job_completions_accept_only_the_stream_head
BEFORE INSERT ON job_completions
WHEN NEW.decision = 'accepted'
 AND CASE
       WHEN NEW.final_stream_checksum IS NULL THEN
         EXISTS (SELECT 1 FROM stream_chunks AS s
                  WHERE s.job_id = NEW.job_id AND s.dispatch_attempt = NEW.dispatch_attempt)
       ELSE
         NOT EXISTS (SELECT 1 FROM stream_chunks AS s
                      WHERE s.job_id = NEW.job_id
                        AND s.dispatch_attempt = NEW.dispatch_attempt
                        AND s.checksum = NEW.final_stream_checksum
                        AND NOT EXISTS (SELECT 1 FROM stream_chunks AS t
                                         WHERE t.job_id = s.job_id
                                           AND t.dispatch_attempt = s.dispatch_attempt
                                           AND t.sequence = s.sequence + 1))
     END
BEGIN
    SELECT RAISE(ABORT, 'completion_does_not_close_stream');
END;

CREATE TRIGGER job_completions_are_append_only_update
BEFORE UPDATE ON job_completions
BEGIN
    SELECT RAISE(ABORT, 'job_completions_are_append_only');
END;

CREATE TRIGGER job_completions_are_append_only_delete
BEFORE DELETE ON job_completions
BEGIN
    SELECT RAISE(ABORT, 'job_completions_are_append_only');
END;

CREATE TRIGGER job_completions_refusals_are_bounded
BEFORE INSERT ON job_completions
WHEN NEW.decision <> 'accepted'
 AND (SELECT count(*) FROM job_completions AS c
       WHERE c.job_id = NEW.job_id AND c.decision <> 'accepted') >= 20
BEGIN
    SELECT RAISE(ABORT, 'completion_decisions_at_cap');
END;

