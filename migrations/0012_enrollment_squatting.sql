-- Enrollment squatting, the second pass (issue 41). Strangers from 20 IPv6 /64s (one free /48)
-- could fill the organization-wide cap of pending enrollments, and that cap counted enrollments
-- an admin's token admitted too, so the admin's own runners were turned away for a day; and an
-- enrollment nobody approved stayed forever (revoked), its fingerprint taken.
--
-- Now: the organization-wide cap counts token-less enrollments only (a token's enrollments are
-- bounded by its uses: an admin said yes to them); one site (an IPv6 /48, or an IPv4 address)
-- has its own share of the token-less ones, as one network (a /64) has; and the cron pass
-- deletes an enrollment nobody approved in time, with its files and events.

-- The site a key-pair runner enrolled from: the /48 its IPv6 address is in, or its IPv4
-- address (src/http.rs `site_of`). NULL for rows enrolled before this migration.
ALTER TABLE runners ADD COLUMN enroll_site TEXT
    CHECK (enroll_site IS NULL OR (identity_model = 'keypair' AND length(enroll_site) BETWEEN 1 AND 64));

CREATE TRIGGER runners_enroll_site_is_fixed
BEFORE UPDATE OF enroll_site ON runners
WHEN NEW.enroll_site IS NOT OLD.enroll_site
BEGIN
    SELECT RAISE(ABORT, 'runner_enrollment_is_fixed');
END;

-- At most this many token-less key-pair runners from one site wait for approval in an
-- organization. The enroll batch sets it from the Worker's MAX_PENDING_ENROLLMENTS_PER_SITE
-- (default 20) before its insert, as it does the other two caps.
ALTER TABLE organizations ADD COLUMN max_pending_enrollments_per_site INTEGER NOT NULL DEFAULT 20
    CHECK (max_pending_enrollments_per_site >= 0);

CREATE INDEX runners_pending_by_site
    ON runners (organization_id, enroll_site)
    WHERE state = 'pending_approval' AND enrollment_token_id IS NULL;

CREATE TRIGGER runners_pending_enrollments_per_site_are_capped
BEFORE INSERT ON runners
WHEN NEW.state = 'pending_approval' AND NEW.enroll_site IS NOT NULL
 AND NEW.enrollment_token_id IS NULL
 AND (SELECT count(*) FROM runners AS r
       WHERE r.organization_id = NEW.organization_id AND r.enroll_site = NEW.enroll_site
         AND r.state = 'pending_approval' AND r.enrollment_token_id IS NULL)
     >= (SELECT o.max_pending_enrollments_per_site FROM organizations AS o
          WHERE o.id = NEW.organization_id)
BEGIN
    SELECT RAISE(ABORT, 'pending_enrollments_from_site_at_cap');
END;

-- The organization-wide cap (migration 0003) now counts, and applies to, token-less
-- enrollments only.
DROP TRIGGER runners_pending_enrollments_are_capped;
CREATE TRIGGER runners_pending_enrollments_are_capped
BEFORE INSERT ON runners
WHEN NEW.state = 'pending_approval' AND NEW.enrollment_token_id IS NULL
 AND (SELECT count(*) FROM runners AS r
       WHERE r.organization_id = NEW.organization_id AND r.state = 'pending_approval'
         AND r.enrollment_token_id IS NULL)
     >= (SELECT o.max_pending_enrollments FROM organizations AS o WHERE o.id = NEW.organization_id)
BEGIN
    SELECT RAISE(ABORT, 'pending_enrollments_at_cap');
END;

-- Events stay append-only (migration 0010), with one more exception: the events of a key-pair
-- runner that was never approved (it never held a job; its events tell only of its enrollment)
-- go with it when the cron pass deletes its expired enrollment.
DROP TRIGGER job_events_are_append_only_delete;
CREATE TRIGGER job_events_are_append_only_delete
BEFORE DELETE ON job_events
WHEN NOT (
      (OLD.job_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id AND archive_state IS NOT NULL))
   OR (OLD.job_id IS NULL AND OLD.runner_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM runners AS r
                    WHERE r.id = OLD.runner_id AND r.organization_id = OLD.organization_id
                      AND r.identity_model = 'keypair' AND r.approved_at IS NULL)))
BEGIN
    SELECT RAISE(ABORT, 'job_events_are_append_only');
END;

-- The enrollments the cron pass revoked before this migration (never approved, revoked as
-- expired) are deleted once here, as it now deletes them: their events, files and challenges
-- first (foreign keys), then the runners. A runner never approved holds no claim, completion or
-- credential.
DELETE FROM job_events
 WHERE job_id IS NULL AND runner_id IN (
       SELECT id FROM runners
        WHERE identity_model = 'keypair' AND approved_at IS NULL AND state = 'revoked'
          AND state_reason = 'enrollment expired before approval');
DELETE FROM runner_files
 WHERE runner_id IN (
       SELECT id FROM runners
        WHERE identity_model = 'keypair' AND approved_at IS NULL AND state = 'revoked'
          AND state_reason = 'enrollment expired before approval');
DELETE FROM runner_challenges
 WHERE runner_id IN (
       SELECT id FROM runners
        WHERE identity_model = 'keypair' AND approved_at IS NULL AND state = 'revoked'
          AND state_reason = 'enrollment expired before approval');
DELETE FROM runners
 WHERE identity_model = 'keypair' AND approved_at IS NULL AND state = 'revoked'
   AND state_reason = 'enrollment expired before approval';
