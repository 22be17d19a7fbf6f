-- What operators read: how a lease lapsed, and the release list.

-- Each claim remembers when its last heartbeat was accepted, so that a lapsed lease can say
-- what happened ("no heartbeat since …", or "never heartbeated") instead of guessing. Written
-- by the heartbeat's own guarded batch; NULL until the first one (claims made before this
-- migration stay NULL and read as "no heartbeat recorded").
ALTER TABLE job_claims ADD COLUMN last_heartbeat_at INTEGER;

-- The artifact list (GET /api/releases/artifacts) pages newest first by (created_at, id):
-- a range of this index, not a sort of the organization's artifacts.
CREATE INDEX release_artifacts_page_order ON release_artifacts (organization_id, created_at, id);
