-- Enrollment squatting (issue 29): an organization id is in every runner's configuration, so
-- a stranger who knows one could fill its pending enrollments. Each organization now says who
-- may enroll (its policy), admins issue enrollment tokens for the `token` policy, and one
-- network's share of the pending enrollments is capped.

-- `open`: any key-pair runner may enroll and wait for approval (the behaviour before, so it is
-- the default); `token`: an enrollment must present a live enrollment token of the
-- organization; `closed`: every enrollment is refused.
ALTER TABLE organizations ADD COLUMN enrollment_policy TEXT NOT NULL DEFAULT 'open'
    CHECK (enrollment_policy IN ('open', 'token', 'closed'));

-- At most this many token-less key-pair runners from one network (an IPv4 address or an IPv6
-- /64) wait for approval in an organization. The enroll batch sets it from the Worker's
-- MAX_PENDING_ENROLLMENTS_PER_NETWORK (default 5) before its insert, as it does the
-- organization-wide cap.
ALTER TABLE organizations ADD COLUMN max_pending_enrollments_per_network INTEGER NOT NULL DEFAULT 5
    CHECK (max_pending_enrollments_per_network >= 0);

-- An enrollment token is shown once; only its SHA-256 is kept. It admits at most max_uses
-- enrollments (1-1000) until it expires (at most 30 days after it was made) or is revoked.
CREATE TABLE enrollment_tokens (
    id              TEXT    PRIMARY KEY CHECK (id GLOB 'ent_*' AND length(id) BETWEEN 5 AND 64),
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    name            TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    token_prefix    TEXT    NOT NULL CHECK (length(token_prefix) = 12),
    token_hash      TEXT    NOT NULL UNIQUE CHECK (length(token_hash) = 64),
    max_uses        INTEGER NOT NULL CHECK (max_uses BETWEEN 1 AND 1000),
    uses            INTEGER NOT NULL DEFAULT 0 CHECK (uses >= 0 AND uses <= max_uses),
    created_at      INTEGER NOT NULL,
    created_by      TEXT    NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    expires_at      INTEGER NOT NULL
                    CHECK (expires_at > created_at AND expires_at - created_at <= 2592000000),
    revoked_at      INTEGER CHECK (revoked_at IS NULL OR revoked_at >= created_at),
    last_used_at    INTEGER CHECK (last_used_at IS NULL OR uses > 0),
    UNIQUE (id, organization_id)
);

CREATE INDEX enrollment_tokens_by_organization ON enrollment_tokens (organization_id, created_at);

-- At most 100 live (unrevoked, unexpired, not used up) tokens per organization.
CREATE TRIGGER enrollment_tokens_live_are_capped
BEFORE INSERT ON enrollment_tokens
WHEN (SELECT count(*) FROM enrollment_tokens AS t
       WHERE t.organization_id = NEW.organization_id AND t.revoked_at IS NULL
         AND t.uses < t.max_uses AND t.expires_at > NEW.created_at) >= 100
BEGIN
    SELECT RAISE(ABORT, 'enrollment_tokens_at_cap');
END;

-- What a token is never changes after it is made; its uses only grow, and a revocation stays.
CREATE TRIGGER enrollment_tokens_are_immutable
BEFORE UPDATE ON enrollment_tokens
WHEN NEW.id IS NOT OLD.id OR NEW.organization_id IS NOT OLD.organization_id
  OR NEW.token_hash IS NOT OLD.token_hash OR NEW.token_prefix IS NOT OLD.token_prefix
  OR NEW.max_uses IS NOT OLD.max_uses OR NEW.created_at IS NOT OLD.created_at
  OR NEW.expires_at IS NOT OLD.expires_at OR NEW.uses < OLD.uses
  OR (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS NOT OLD.revoked_at)
BEGIN
    SELECT RAISE(ABORT, 'enrollment_token_is_immutable');
END;

-- The network a key-pair runner enrolled from, and the token that admitted it (if any), of its
-- own organization (the composite foreign key).
ALTER TABLE runners ADD COLUMN enroll_network TEXT
    CHECK (enroll_network IS NULL OR (identity_model = 'keypair' AND length(enroll_network) BETWEEN 1 AND 64));
ALTER TABLE runners ADD COLUMN enrollment_token_id TEXT
    CHECK (enrollment_token_id IS NULL OR identity_model = 'keypair');

-- SQLite cannot add a table constraint to an existing table, so the composite foreign key is a
-- pair of triggers: a runner names only a token of its own organization, and that token is
-- live when the runner is inserted. The insert spends one of the token's uses in the same
-- statement, so two enrollments racing for a token's last use cannot both have it.
CREATE TRIGGER runners_enrollment_token_is_live
BEFORE INSERT ON runners
WHEN NEW.enrollment_token_id IS NOT NULL
 AND NOT EXISTS (SELECT 1 FROM enrollment_tokens AS t
                  WHERE t.id = NEW.enrollment_token_id AND t.organization_id = NEW.organization_id
                    AND t.revoked_at IS NULL AND t.uses < t.max_uses
                    AND t.expires_at > NEW.registered_at)
BEGIN
    SELECT RAISE(ABORT, 'enrollment_token_invalid');
END;

CREATE TRIGGER runners_enrollment_token_is_spent
AFTER INSERT ON runners
WHEN NEW.enrollment_token_id IS NOT NULL
BEGIN
    UPDATE enrollment_tokens SET uses = uses + 1, last_used_at = NEW.registered_at
     WHERE id = NEW.enrollment_token_id AND organization_id = NEW.organization_id;
END;

CREATE TRIGGER runners_enrollment_token_is_fixed
BEFORE UPDATE OF enrollment_token_id, enroll_network ON runners
WHEN NEW.enrollment_token_id IS NOT OLD.enrollment_token_id
  OR NEW.enroll_network IS NOT OLD.enroll_network
BEGIN
    SELECT RAISE(ABORT, 'runner_enrollment_is_fixed');
END;

CREATE INDEX runners_pending_by_network
    ON runners (organization_id, enroll_network)
    WHERE state = 'pending_approval' AND enrollment_token_id IS NULL;

-- A token-less enrollment counts against its network's share; one admitted by a token is
-- bounded by the token's uses instead (an admin said yes to it).
CREATE TRIGGER runners_pending_enrollments_per_network_are_capped
BEFORE INSERT ON runners
WHEN NEW.state = 'pending_approval' AND NEW.enroll_network IS NOT NULL
 AND NEW.enrollment_token_id IS NULL
 AND (SELECT count(*) FROM runners AS r
       WHERE r.organization_id = NEW.organization_id AND r.enroll_network = NEW.enroll_network
         AND r.state = 'pending_approval' AND r.enrollment_token_id IS NULL)
     >= (SELECT o.max_pending_enrollments_per_network FROM organizations AS o
          WHERE o.id = NEW.organization_id)
BEGIN
    SELECT RAISE(ABORT, 'pending_enrollments_from_network_at_cap');
END;
