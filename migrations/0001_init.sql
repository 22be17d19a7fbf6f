-- edgerunner schema, version 1.
--
-- D1 (SQLite) is the system of record. Conventions:
--   * ids are TEXT, except release_versions.id, an INTEGER because the wire's `versionId` is one;
--   * times are INTEGER Unix milliseconds (`*_at`), except timestamps a client hashed
--     (`emitted_at`, `completed_at`), which stay the opaque strings the client sent;
--   * JSON is TEXT and is checked with json_valid; snake_case here, camelCase on the wire;
--   * secrets never land here: only lowercase-hex SHA-256 of bootstrap tokens, API keys,
--     credentials and challenges (the `hex64` CHECKs below refuse a raw secret by shape);
--   * every row that a request can touch carries organization_id, and rows that point at
--     another org-owned row do so through a composite foreign key (child_id, organization_id),
--     so a row of one organization can never reference a row of another.
--
-- Guards that must abort a D1 batch are constraint failures (CHECK, UNIQUE, FOREIGN KEY, or a
-- trigger doing SELECT RAISE(ABORT, 'code')): a guarded UPDATE that matches nothing does *not*
-- fail a batch. Trigger messages are stable snake_case codes that the edge maps to errors;
-- D1 reports them as `<code>: SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_TRIGGER)`.
--
-- Statement order inside the batches is part of the contract (see the trigger comments):
--   grant:      INSERT job_claims → UPDATE jobs (queued→claimed) → UPDATE runners
--               (active_claims + 1) → INSERT job_events
--   complete:   INSERT job_completions → UPDATE jobs (finalize) → UPDATE job_claims (released)
--               → UPDATE runners (active_claims - 1) → INSERT job_events → INSERT completion_evidence…
--   stream:     INSERT stream_chunks (→ INSERT job_events, optional)
--   recover:    UPDATE job_claims (lost) → UPDATE jobs (queued | lost | cancelled) →
--               UPDATE runners → INSERT job_events   (either order of the first two works)


-- ===========================================================================================
-- Tenancy and API keys
-- ===========================================================================================

CREATE TABLE organizations (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at INTEGER NOT NULL
);

-- An API key is shown once; only its SHA-256 is kept, found by hash on every request.
CREATE TABLE api_keys (
    id              TEXT    PRIMARY KEY,
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    name            TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- The first characters of the key, for people to tell keys apart; too short to matter.
    key_prefix      TEXT    NOT NULL CHECK (length(key_prefix) BETWEEN 4 AND 16),
    key_hash        TEXT    NOT NULL UNIQUE
                            CHECK (length(key_hash) = 64 AND key_hash NOT GLOB '*[^0-9a-f]*'),
    role            TEXT    NOT NULL CHECK (role IN ('admin', 'member')),
    -- JSON array of scope strings, e.g. ["runs:read","runs:write","admin:org"].
    scopes          TEXT    NOT NULL CHECK (json_valid(scopes) AND json_type(scopes) = 'array'),
    created_at      INTEGER NOT NULL,
    last_used_at    INTEGER,
    revoked_at      INTEGER
);

CREATE INDEX api_keys_by_organization ON api_keys (organization_id, created_at);


-- ===========================================================================================
-- Runners: two identity models in one table.
--   bootstrap: an admin registers it (runner_key, one-time token stored as a hash); active at once.
--   keypair:   it self-registers its immutable ed25519 public key; an admin approves the
--              fingerprint; it authenticates by signing single-use challenges.
-- ===========================================================================================

CREATE TABLE runners (
    id                    TEXT    PRIMARY KEY,
    organization_id       TEXT    NOT NULL REFERENCES organizations (id),
    identity_model        TEXT    NOT NULL CHECK (identity_model IN ('bootstrap', 'keypair')),
    name                  TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),

    -- bootstrap identity
    runner_key            TEXT    CHECK (runner_key IS NULL OR length(runner_key) BETWEEN 1 AND 200),
    bootstrap_token_hash  TEXT    CHECK (bootstrap_token_hash IS NULL OR
                                         (length(bootstrap_token_hash) = 64 AND
                                          bootstrap_token_hash NOT GLOB '*[^0-9a-f]*')),
    -- Optional: an operator may give the bootstrap token a lifetime; NULL = until rotated.
    bootstrap_token_expires_at INTEGER,

    -- keypair identity (all self-reported except address)
    public_key            TEXT,
    -- Global, not per organization: one key is one identity, and the challenge flow looks a
    -- runner up by fingerprint before it knows the organization.
    fingerprint           TEXT    UNIQUE,
    product               TEXT,
    version               TEXT,
    machine               TEXT    CHECK (machine IS NULL OR json_valid(machine)),
    -- From CF-Connecting-IP, never from the runner's own report.
    address               TEXT,

    state                 TEXT    NOT NULL
                                  CHECK (state IN ('pending_approval', 'active', 'draining', 'lost', 'revoked')),
    state_reason          TEXT,

    -- What the runner declared, and H(document) so a change is visible.
    capabilities          TEXT    NOT NULL
                                  CHECK (json_valid(capabilities) AND json_type(capabilities) = 'object'),
    capabilities_hash     TEXT    NOT NULL
                                  CHECK (length(capabilities_hash) = 64 AND capabilities_hash NOT GLOB '*[^0-9a-f]*'),
    protocol_version      TEXT    NOT NULL,
    -- Columns, not only inside the document, because routing matches on them (by equality).
    problem_types         TEXT    NOT NULL DEFAULT '[]'
                                  CHECK (json_valid(problem_types) AND json_type(problem_types) = 'array'),
    external              INTEGER NOT NULL DEFAULT 0 CHECK (external IN (0, 1)),
    -- Operator-set, never runner-set.
    tags                  TEXT    NOT NULL DEFAULT '[]'
                                  CHECK (json_valid(tags) AND json_type(tags) = 'array'),

    -- Capacity is enforced here: the grant batch's `active_claims + 1` fails this CHECK at
    -- capacity and rolls the whole grant back; a double release fails `>= 0`.
    max_concurrent_jobs   INTEGER NOT NULL DEFAULT 1 CHECK (max_concurrent_jobs >= 1),
    active_claims         INTEGER NOT NULL DEFAULT 0,

    -- Every credential names the generation it was issued under; rotation (and revocation)
    -- bump this, so every older credential dies at once without listing them.
    credential_generation INTEGER NOT NULL DEFAULT 1 CHECK (credential_generation >= 1),
    -- The visible id of the job-signing key derived for this runner (NULL until it can claim).
    key_id                TEXT,

    registered_at         INTEGER NOT NULL,
    approved_at           INTEGER,
    revoked_at            INTEGER,
    last_seen_at          INTEGER,
    last_heartbeat_at     INTEGER,
    updated_at            INTEGER NOT NULL,
    completed_jobs        INTEGER NOT NULL DEFAULT 0 CHECK (completed_jobs >= 0),

    CHECK (active_claims >= 0 AND active_claims <= max_concurrent_jobs),
    -- An admin-registered runner is approved by being registered; it has a key and a token,
    -- and no key pair.
    CHECK (identity_model <> 'bootstrap' OR
           (runner_key IS NOT NULL AND bootstrap_token_hash IS NOT NULL AND
            public_key IS NULL AND fingerprint IS NULL AND state <> 'pending_approval')),
    -- A self-registered runner is its key pair and holds no bootstrap token.
    CHECK (identity_model <> 'keypair' OR
           (public_key IS NOT NULL AND fingerprint IS NOT NULL AND bootstrap_token_hash IS NULL)),
    -- "Nothing is evaluated before approval": a key-pair runner that can work was approved.
    CHECK (identity_model <> 'keypair' OR state IN ('pending_approval', 'revoked') OR approved_at IS NOT NULL),
    CHECK ((state = 'revoked') = (revoked_at IS NOT NULL)),

    UNIQUE (organization_id, runner_key),
    -- Parent keys for composite foreign keys (org consistency, challenge ↔ fingerprint).
    UNIQUE (id, organization_id),
    UNIQUE (id, organization_id, fingerprint)
);

CREATE INDEX runners_by_organization ON runners (organization_id, registered_at);

-- Revocation is permanent for an identity: a leaked key or token is replaced by registering
-- a new runner, never by reactivating this one. Other columns (active_claims released by the
-- reaper, last_seen_at) may still change.
CREATE TRIGGER runners_revocation_is_permanent
BEFORE UPDATE OF state ON runners
WHEN OLD.state = 'revoked' AND NEW.state IS NOT 'revoked'
BEGIN
    SELECT RAISE(ABORT, 'runner_revocation_is_permanent');
END;

-- Who a runner is never changes: the key pair is immutable (no rotation), the organization
-- and identity model are fixed, and the credential generation only moves forward (a step
-- back would resurrect credentials that rotation killed).
CREATE TRIGGER runners_identity_is_immutable
BEFORE UPDATE OF organization_id, identity_model, public_key, fingerprint, credential_generation ON runners
WHEN NEW.organization_id IS NOT OLD.organization_id
  OR NEW.identity_model IS NOT OLD.identity_model
  OR NEW.public_key IS NOT OLD.public_key
  OR NEW.fingerprint IS NOT OLD.fingerprint
  OR NEW.credential_generation < OLD.credential_generation
BEGIN
    SELECT RAISE(ABORT, 'runner_identity_is_immutable');
END;

-- What a runner uploaded about itself (runner.log, lscpu.txt, …): shown, never interpreted.
CREATE TABLE runner_files (
    runner_id       TEXT    NOT NULL,
    organization_id TEXT    NOT NULL,
    -- A plain file name: no path separators, no hidden files.
    name            TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 128
                                            AND name NOT GLOB '*[^A-Za-z0-9._-]*'
                                            AND name NOT GLOB '.*'),
    content         TEXT    NOT NULL CHECK (length(CAST(content AS BLOB)) <= 262144),
    content_hash    TEXT    NOT NULL
                            CHECK (length(content_hash) = 64 AND content_hash NOT GLOB '*[^0-9a-f]*'),
    uploaded_at     INTEGER NOT NULL,
    -- One current copy per name: an upload replaces (INSERT … ON CONFLICT DO UPDATE).
    PRIMARY KEY (runner_id, name),
    FOREIGN KEY (runner_id, organization_id) REFERENCES runners (id, organization_id)
);

-- Issued runner credentials, for audit and early revocation. The token itself may be a
-- stateless signed token; then token_hash is NULL and `id` is the token's id (jti).
CREATE TABLE runner_credentials (
    id                    TEXT    PRIMARY KEY,
    runner_id             TEXT    NOT NULL,
    organization_id       TEXT    NOT NULL,
    credential_generation INTEGER NOT NULL CHECK (credential_generation >= 1),
    token_hash            TEXT    UNIQUE
                                  CHECK (token_hash IS NULL OR
                                         (length(token_hash) = 64 AND token_hash NOT GLOB '*[^0-9a-f]*')),
    -- How the runner proved itself when this was issued.
    issued_via            TEXT    NOT NULL CHECK (issued_via IN ('bootstrap', 'keypair')),
    scopes                TEXT    NOT NULL CHECK (json_valid(scopes) AND json_type(scopes) = 'array'),
    issued_at             INTEGER NOT NULL,
    expires_at            INTEGER NOT NULL,
    revoked_at            INTEGER,
    -- Short-lived by contract: at most ten minutes.
    CHECK (expires_at > issued_at AND expires_at - issued_at <= 600000),
    FOREIGN KEY (runner_id, organization_id) REFERENCES runners (id, organization_id)
);

CREATE INDEX runner_credentials_by_runner ON runner_credentials (runner_id, credential_generation);
CREATE INDEX runner_credentials_by_expiry ON runner_credentials (expires_at);

-- Single-use, expiring challenges for key-pair runners. Only the hash is kept: the runner
-- sends the challenge back with its signature, and the server looks it up by hash.
CREATE TABLE runner_challenges (
    id              TEXT    PRIMARY KEY,
    runner_id       TEXT    NOT NULL,
    organization_id TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    challenge_hash  TEXT    NOT NULL UNIQUE
                            CHECK (length(challenge_hash) = 64 AND challenge_hash NOT GLOB '*[^0-9a-f]*'),
    issued_at       INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    consumed_at     INTEGER,
    CHECK (expires_at > issued_at),
    CHECK (consumed_at IS NULL OR consumed_at >= issued_at),
    -- The fingerprint challenged is that runner's, in that organization.
    FOREIGN KEY (runner_id, organization_id, fingerprint)
        REFERENCES runners (id, organization_id, fingerprint)
);

CREATE INDEX runner_challenges_by_runner ON runner_challenges (runner_id, issued_at);
CREATE INDEX runner_challenges_by_expiry ON runner_challenges (expires_at);

-- Single use: once consumed, a challenge row never changes again. Consume it with
-- `UPDATE runner_challenges SET consumed_at = ? WHERE challenge_hash = ?` (no `consumed_at IS
-- NULL` guard) inside the session batch, and a replay aborts the batch here instead of
-- matching nothing; or keep the guard and check the row count.
CREATE TRIGGER runner_challenges_single_use
BEFORE UPDATE ON runner_challenges
WHEN OLD.consumed_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'challenge_already_consumed');
END;


-- ===========================================================================================
-- Release registry: the immutable things jobs run.
-- ===========================================================================================

CREATE TABLE release_artifacts (
    id              TEXT    PRIMARY KEY,
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    kind            TEXT    NOT NULL CHECK (kind IN ('prompt', 'scorer', 'tool', 'workflow', 'agent')),
    name            TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at      INTEGER NOT NULL,
    UNIQUE (organization_id, kind, name),
    UNIQUE (id, organization_id),
    -- Parent key for jobs: a job's subject kind is its artifact's kind.
    UNIQUE (id, organization_id, kind)
);

-- AUTOINCREMENT: a version id is published in signed envelopes and served-target lists, so it
-- must never be reused, even if the highest row were ever removed.
CREATE TABLE release_versions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    artifact_id     TEXT    NOT NULL,
    organization_id TEXT    NOT NULL,
    content         TEXT    NOT NULL CHECK (json_valid(content)),
    -- H(content), computed once at creation.
    content_hash    TEXT    NOT NULL
                            CHECK (length(content_hash) = 64 AND content_hash NOT GLOB '*[^0-9a-f]*'),
    created_at      INTEGER NOT NULL,
    FOREIGN KEY (artifact_id, organization_id) REFERENCES release_artifacts (id, organization_id),
    UNIQUE (id, organization_id),
    -- Parent key for jobs: the subject's artifact, organization and content hash are the
    -- version's own, so a job cannot bind a hash the version does not have.
    UNIQUE (id, organization_id, artifact_id, content_hash)
);

CREATE INDEX release_versions_by_artifact ON release_versions (artifact_id, id);

-- A version is immutable: jobs and signed envelopes name it by (id, content hash), and a
-- runner serving (versionId, contentHash) must get what was signed. No column may change.
CREATE TRIGGER release_versions_are_immutable
BEFORE UPDATE ON release_versions
BEGIN
    SELECT RAISE(ABORT, 'release_version_is_immutable');
END;

CREATE TABLE release_promotions (
    version_id      INTEGER NOT NULL,
    organization_id TEXT    NOT NULL,
    environment     TEXT    NOT NULL CHECK (environment IN ('dev', 'staging', 'prod')),
    promoted_at     INTEGER NOT NULL,
    -- The key (or other actor) that promoted it, for audit.
    promoted_by     TEXT,
    -- Promoting twice is one promotion; also the parent key that lets jobs bind only a
    -- version promoted to the job's environment.
    PRIMARY KEY (version_id, environment),
    FOREIGN KEY (version_id, organization_id) REFERENCES release_versions (id, organization_id)
);

-- What runners can execute, registered by operators (POST /api/remote-runners/targets).
CREATE TABLE executable_targets (
    id              TEXT    PRIMARY KEY,
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    -- The wire's `key` (a reserved-looking word in SQL, hence the prefix).
    target_key      TEXT    NOT NULL CHECK (length(target_key) BETWEEN 1 AND 200),
    repository      TEXT    NOT NULL,
    entrypoint      TEXT    NOT NULL,
    requirements    TEXT    NOT NULL CHECK (json_valid(requirements) AND json_type(requirements) = 'object'),
    evaluation_id   TEXT,
    -- Optional binding to one release version (and its hash, so it cannot drift).
    version_id      INTEGER,
    content_hash    TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    CHECK ((version_id IS NULL) = (content_hash IS NULL)),
    UNIQUE (organization_id, target_key),
    FOREIGN KEY (version_id, organization_id) REFERENCES release_versions (id, organization_id)
);

CREATE INDEX executable_targets_by_evaluation
    ON executable_targets (organization_id, evaluation_id, created_at);


-- ===========================================================================================
-- Jobs
-- ===========================================================================================

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
    -- Attempts dispatched so far. A claim for attempt n is granted only while this is n - 1;
    -- three attempts at most (the bounded retry).
    dispatch_attempt     INTEGER NOT NULL DEFAULT 0 CHECK (dispatch_attempt BETWEEN 0 AND 3),
    active_claim_id      TEXT    REFERENCES job_claims (id),
    -- Authoritative lease expiry: the reaper reads this (jobs_lease_expiry), heartbeats extend it.
    lease_expires_at     INTEGER,
    cancel_reason        TEXT,
    cancel_requested_at  INTEGER,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    finished_at          INTEGER,

    -- A job holds a claim and a lease exactly while it is claimed, running or being cancelled.
    CHECK ((state IN ('claimed', 'running', 'cancel_requested')) = (active_claim_id IS NOT NULL)),
    CHECK ((state IN ('claimed', 'running', 'cancel_requested')) = (lease_expires_at IS NOT NULL)),
    -- Bounded retry: a job that used its third attempt is never queued again.
    CHECK (state <> 'queued' OR dispatch_attempt < 3),
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

-- The claim's matching query, run once per (execution kind, runtime) the runner supports:
--
--   SELECT id, requirements, problem_type, tags, subject_version_id, subject_content_hash
--     FROM jobs
--    WHERE organization_id = ?1 AND state = 'queued'
--      AND execution_kind = ?2 AND runtime = ?3 AND external = ?4
--    ORDER BY created_at, id
--    LIMIT ?5
--
-- is a range of this index in queue order (no table scan, no sort), and the index holds
-- queued jobs only, so it stays as small as the queue. `state = 'queued'` must be written as
-- a literal in the query: SQLite uses a partial index only when it can prove the query's WHERE
-- implies the index's, and a bound parameter proves nothing. `id` breaks created_at ties so
-- that candidates come in a stable order.
CREATE INDEX jobs_queue
    ON jobs (organization_id, execution_kind, runtime, external, created_at, id)
    WHERE state = 'queued';

-- The reaper's sweep (cron, across organizations):
--   SELECT id, organization_id, dispatch_attempt, active_claim_id FROM jobs
--    WHERE state IN ('claimed', 'running', 'cancel_requested') AND lease_expires_at <= ?1
--    ORDER BY lease_expires_at LIMIT ?2
-- The IN list must be spelled exactly like this, for the same reason as above.
CREATE INDEX jobs_lease_expiry
    ON jobs (lease_expires_at)
    WHERE state IN ('claimed', 'running', 'cancel_requested');

-- The same sweep for one organization (the admin's POST /api/remote-runners/jobs/reap).
CREATE INDEX jobs_lease_expiry_by_organization
    ON jobs (organization_id, lease_expires_at)
    WHERE state IN ('claimed', 'running', 'cancel_requested');

-- GET /api/remote-runners/jobs?limit= (newest first).
CREATE INDEX jobs_by_organization ON jobs (organization_id, created_at, id);

-- A job is born queued, at attempt 0, holding nothing.
CREATE TRIGGER jobs_start_queued
BEFORE INSERT ON jobs
WHEN NEW.state IS NOT 'queued' OR NEW.dispatch_attempt IS NOT 0
BEGIN
    SELECT RAISE(ABORT, 'job_must_start_queued');
END;

-- What a job is (what was asked for, and what the signed envelope commits to) never changes
-- after enqueue; idempotent replays compare against it.
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

-- Succeeded, failed and cancelled are final: no late completion, reaper or cancel may move a
-- finished job.
CREATE TRIGGER jobs_terminal_states_are_final
BEFORE UPDATE OF state ON jobs
WHEN OLD.state IN ('succeeded', 'failed', 'cancelled') AND NEW.state IS NOT OLD.state
BEGIN
    SELECT RAISE(ABORT, 'job_is_finished');
END;

-- Attempts only count up: a stale writer cannot take a job back to an attempt it left, so a
-- write guarded by `dispatch_attempt = n` never lands on a job now at n + 1.
CREATE TRIGGER jobs_dispatch_attempt_only_grows
BEFORE UPDATE OF dispatch_attempt ON jobs
WHEN NEW.dispatch_attempt < OLD.dispatch_attempt
BEGIN
    SELECT RAISE(ABORT, 'job_dispatch_attempt_only_grows');
END;

-- A job that holds a claim points at an *active* claim of its own, at its current attempt.
-- With job_claims_require_queued_job this pins the grant batch order: the claim row is
-- inserted first (while the job is still queued at n - 1), then the job is moved to
-- `claimed` at attempt n pointing at it. A job-first order fails here, loudly.
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


-- ===========================================================================================
-- Claims: one row per dispatch attempt.
-- ===========================================================================================

CREATE TABLE job_claims (
    id               TEXT    PRIMARY KEY,
    job_id           TEXT    NOT NULL,
    organization_id  TEXT    NOT NULL,
    runner_id        TEXT    NOT NULL,
    dispatch_attempt INTEGER NOT NULL CHECK (dispatch_attempt BETWEEN 1 AND 3),
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

-- At most one active claim per job, whatever else went wrong.
CREATE UNIQUE INDEX job_claims_one_active_per_job ON job_claims (job_id) WHERE state = 'active';
-- A runner's claims (its active ones for capacity recounts and revocation, and history).
CREATE INDEX job_claims_by_runner ON job_claims (runner_id, state, issued_at);

-- The grant's guard. ORDER: this INSERT is the *first* statement of the grant batch, before
-- `UPDATE jobs SET state = 'claimed', dispatch_attempt = n, active_claim_id = <this id>, …`.
-- It therefore sees the job as it was before the grant and requires exactly the grant's
-- precondition: the job is queued, in the claim's organization, having dispatched n - 1
-- attempts. If the job went elsewhere (claimed, cancelled, or requeued at another attempt)
-- the whole batch aborts instead of the job UPDATE quietly matching no row. The UPDATE that
-- follows is then checked by jobs_hold_only_their_active_claim.
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

-- Only an active runner is granted work (not pending, draining, lost or revoked), and a
-- claim is born active.
CREATE TRIGGER job_claims_require_active_runner
BEFORE INSERT ON job_claims
WHEN NEW.state IS NOT 'active'
  OR NOT EXISTS (SELECT 1 FROM runners AS r WHERE r.id = NEW.runner_id AND r.state = 'active')
BEGIN
    SELECT RAISE(ABORT, 'claim_requires_active_runner');
END;

-- A released or lost claim is over for good, and a claim never changes hands: a late
-- heartbeat, chunk or completion from that attempt cannot bring it back.
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


-- ===========================================================================================
-- Timeline and audit: append-only.
-- ===========================================================================================

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
    attempt         INTEGER CHECK (attempt IS NULL OR attempt BETWEEN 0 AND 3),
    reason          TEXT,
    detail          TEXT    CHECK (detail IS NULL OR json_valid(detail)),
    at              INTEGER NOT NULL,
    FOREIGN KEY (job_id, organization_id) REFERENCES jobs (id, organization_id),
    FOREIGN KEY (runner_id, organization_id) REFERENCES runners (id, organization_id)
);

CREATE INDEX job_events_by_job ON job_events (job_id, id);
CREATE INDEX job_events_by_runner ON job_events (runner_id, id);
CREATE INDEX job_events_by_organization ON job_events (organization_id, id);

-- An audit trail that can be edited is not one. (Retention, if ever needed, is a migration.)
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


-- ===========================================================================================
-- Stream custody: a gap-free checksum chain per (job, attempt).
-- ===========================================================================================

CREATE TABLE stream_chunks (
    job_id            TEXT    NOT NULL,
    organization_id   TEXT    NOT NULL,
    claim_id          TEXT    NOT NULL,
    dispatch_attempt  INTEGER NOT NULL,
    sequence          INTEGER NOT NULL CHECK (sequence >= 0),
    kind              TEXT    NOT NULL CHECK (kind IN ('log', 'trajectory')),
    -- NULL exactly at sequence 0; otherwise the checksum of chunk n - 1 (trigger below).
    previous_checksum TEXT    CHECK (previous_checksum IS NULL OR
                                     (length(previous_checksum) = 64 AND previous_checksum NOT GLOB '*[^0-9a-f]*')),
    payload           TEXT    NOT NULL CHECK (json_valid(payload) AND length(CAST(payload AS BLOB)) <= 262144),
    payload_hash      TEXT    NOT NULL
                              CHECK (length(payload_hash) = 64 AND payload_hash NOT GLOB '*[^0-9a-f]*'),
    checksum          TEXT    NOT NULL
                              CHECK (length(checksum) = 64 AND checksum NOT GLOB '*[^0-9a-f]*'),
    -- As the runner sent it: it is hashed into the checksum, so it is never re-rendered.
    emitted_at        TEXT    NOT NULL,
    received_at       INTEGER NOT NULL,
    CHECK ((sequence = 0) = (previous_checksum IS NULL)),
    -- No duplicate sequence numbers (and the head lookup, by job and attempt, is this key).
    PRIMARY KEY (job_id, dispatch_attempt, sequence),
    -- No checksum twice within a job: a replayed chunk cannot be re-linked elsewhere.
    UNIQUE (job_id, checksum),
    -- The chunk's claim is the claim of that job at that attempt.
    FOREIGN KEY (claim_id, job_id, dispatch_attempt) REFERENCES job_claims (id, job_id, dispatch_attempt),
    FOREIGN KEY (job_id, organization_id) REFERENCES jobs (id, organization_id)
);

-- Gap-free chain: chunk n > 0 links to the stored chunk n - 1 of the same job and attempt by
-- its checksum. With the primary key this makes every stored stream a single chain 0..head,
-- so "the last checksum" is well defined for the completion to close.
CREATE TRIGGER stream_chunks_extend_the_chain
BEFORE INSERT ON stream_chunks
WHEN NEW.sequence > 0
 AND NOT EXISTS (SELECT 1 FROM stream_chunks AS p
                  WHERE p.job_id = NEW.job_id
                    AND p.dispatch_attempt = NEW.dispatch_attempt
                    AND p.sequence = NEW.sequence - 1
                    AND p.checksum = NEW.previous_checksum)
BEGIN
    SELECT RAISE(ABORT, 'stream_chunk_breaks_chain');
END;

-- Appends only under a live claim: a released or lost attempt's stream is closed. (Lease
-- *time* is checked by the JobObject, which owns the clock.)
CREATE TRIGGER stream_chunks_need_active_claim
BEFORE INSERT ON stream_chunks
WHEN NOT EXISTS (SELECT 1 FROM job_claims AS c WHERE c.id = NEW.claim_id AND c.state = 'active')
BEGIN
    SELECT RAISE(ABORT, 'stream_claim_not_active');
END;

CREATE TRIGGER stream_chunks_are_immutable
BEFORE UPDATE ON stream_chunks
BEGIN
    SELECT RAISE(ABORT, 'stream_chunks_are_immutable');
END;


-- ===========================================================================================
-- Evidence (the normal EvalGate records a completion points at).
-- ===========================================================================================

CREATE TABLE evaluation_runs (
    id              TEXT    PRIMARY KEY,
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    evaluation_id   TEXT,
    status          TEXT    NOT NULL DEFAULT 'running'
                            CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    metadata        TEXT    CHECK (metadata IS NULL OR json_valid(metadata)),
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    UNIQUE (id, organization_id)
);

CREATE INDEX evaluation_runs_by_organization ON evaluation_runs (organization_id, created_at);

CREATE TABLE test_results (
    id                TEXT    PRIMARY KEY,
    organization_id   TEXT    NOT NULL,
    evaluation_run_id TEXT    NOT NULL,
    name              TEXT    NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('passed', 'failed', 'error', 'skipped')),
    score             REAL,
    detail            TEXT    CHECK (detail IS NULL OR json_valid(detail)),
    created_at        INTEGER NOT NULL,
    FOREIGN KEY (evaluation_run_id, organization_id) REFERENCES evaluation_runs (id, organization_id)
);

CREATE INDEX test_results_by_run ON test_results (evaluation_run_id, created_at);

-- Money as integer micro-units of `currency`: sums stay exact.
CREATE TABLE cost_records (
    id                TEXT    PRIMARY KEY,
    organization_id   TEXT    NOT NULL,
    evaluation_run_id TEXT    NOT NULL,
    category          TEXT    NOT NULL CHECK (category IN ('model', 'sandbox', 'tool', 'other')),
    amount_micros     INTEGER NOT NULL CHECK (amount_micros >= 0),
    currency          TEXT    NOT NULL DEFAULT 'USD' CHECK (length(currency) = 3 AND currency NOT GLOB '*[^A-Z]*'),
    description       TEXT,
    created_at        INTEGER NOT NULL,
    FOREIGN KEY (evaluation_run_id, organization_id) REFERENCES evaluation_runs (id, organization_id)
);

CREATE INDEX cost_records_by_run ON cost_records (evaluation_run_id, created_at);

CREATE TABLE model_calls (
    id                TEXT    PRIMARY KEY,
    organization_id   TEXT    NOT NULL,
    evaluation_run_id TEXT    NOT NULL,
    provider          TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    status            TEXT    NOT NULL DEFAULT 'succeeded' CHECK (status IN ('succeeded', 'failed')),
    input_tokens      INTEGER CHECK (input_tokens IS NULL OR input_tokens >= 0),
    output_tokens     INTEGER CHECK (output_tokens IS NULL OR output_tokens >= 0),
    latency_ms        INTEGER CHECK (latency_ms IS NULL OR latency_ms >= 0),
    created_at        INTEGER NOT NULL,
    FOREIGN KEY (evaluation_run_id, organization_id) REFERENCES evaluation_runs (id, organization_id)
);

CREATE INDEX model_calls_by_run ON model_calls (evaluation_run_id, created_at);

CREATE TABLE traces (
    id                TEXT    PRIMARY KEY,
    organization_id   TEXT    NOT NULL,
    evaluation_run_id TEXT    NOT NULL,
    name              TEXT,
    spans             TEXT    CHECK (spans IS NULL OR json_valid(spans)),
    created_at        INTEGER NOT NULL,
    FOREIGN KEY (evaluation_run_id, organization_id) REFERENCES evaluation_runs (id, organization_id)
);

CREATE INDEX traces_by_run ON traces (evaluation_run_id, created_at);


-- ===========================================================================================
-- Completions and custody.
-- ===========================================================================================

-- Every completion received is stored with its decision: the accepted one, and each
-- duplicate, conflict and stale one (never discarded). Every row names a real claim of that
-- job, at that attempt, held by that runner.
CREATE TABLE job_completions (
    id                    TEXT    PRIMARY KEY,
    job_id                TEXT    NOT NULL,
    organization_id       TEXT    NOT NULL,
    claim_id              TEXT    NOT NULL,
    runner_id             TEXT    NOT NULL,
    dispatch_attempt      INTEGER NOT NULL CHECK (dispatch_attempt BETWEEN 1 AND 3),
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

-- One accepted completion per job; duplicates, conflicts and stales may repeat.
CREATE UNIQUE INDEX job_completions_one_accepted_per_job
    ON job_completions (job_id) WHERE decision = 'accepted';
CREATE INDEX job_completions_by_job ON job_completions (job_id, received_at);

-- The completion batch's guard. ORDER: this INSERT is the *first* statement of the completion
-- batch, before the job is finalized and the claim released, so it sees the job still holding
-- the claim. An accepted completion must come from the job's active claim at the job's
-- current attempt: a completion from attempt n can be stored as `stale`, never accepted, once
-- the job is at n + 1.
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

-- An accepted completion is about the job's input.
CREATE TRIGGER job_completions_accept_only_the_job_input
BEFORE INSERT ON job_completions
WHEN NEW.decision = 'accepted'
 AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = NEW.job_id AND j.input_hash = NEW.input_hash)
BEGIN
    SELECT RAISE(ABORT, 'completion_input_hash_mismatch');
END;

-- An accepted completion closes the stream exactly: its final checksum is the checksum of
-- the attempt's last stored chunk (the one no chunk follows), or NULL when nothing was streamed.
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

-- Custody: the primary key is the evidence row's identity, so an evidence row is attached to
-- at most one accepted completion, across all jobs and without a lock. A second completion
-- naming the same row violates this key and its whole batch (job finalization included)
-- rolls back. Written last in the completion batch, after the completion row it names.
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
    FOREIGN KEY (completion_id, job_id, organization_id)
        REFERENCES job_completions (id, job_id, organization_id)
);

CREATE INDEX completion_evidence_by_completion ON completion_evidence (completion_id);
CREATE INDEX completion_evidence_by_job ON completion_evidence (job_id);

-- Only an accepted completion takes custody.
CREATE TRIGGER completion_evidence_needs_accepted_completion
BEFORE INSERT ON completion_evidence
WHEN NOT EXISTS (SELECT 1 FROM job_completions AS c
                  WHERE c.id = NEW.completion_id AND c.decision = 'accepted')
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
