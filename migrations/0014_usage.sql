-- Usage (issue 42): what each organization stores, read in one bounded read. The counts live
-- in organization_usage and are kept on the write path: each statement that moves a job
-- between the states below is followed, in its own batch, by one of queries/usage/*.sql,
-- which applies only when that statement changed its row (SQLite's changes()). Not by
-- triggers: D1 counts a trigger's writes in a statement's `changes`, which every guarded
-- write here checks. The usage view never counts the jobs table.
--
--   live      a job whose rows are all in D1 (not yet pruned by the archive)
--   archived  a pruned job: its summary row in D1, its bundle and record in R2
--   expiring  marked by the retention pass; deleted with its R2 objects next
--   held      an admin's hold, on a live or archived job (a subset of those two)
--   R2        two objects per stored archive (bundles/<sha256> and records/<sha256>); bytes
--             are the bundles' (a record is the job's small summary and is not counted)
--
-- And an admin's hold says why (held_reason, with held_at and held_by).

ALTER TABLE jobs ADD COLUMN held_reason TEXT
    CHECK (held_reason IS NULL OR length(held_reason) BETWEEN 1 AND 1000);

-- A reason only on a held job.
CREATE TRIGGER jobs_hold_reason_needs_a_hold
BEFORE UPDATE OF held_reason ON jobs
WHEN NEW.held_reason IS NOT NULL AND NEW.held_at IS NULL
BEGIN
    SELECT RAISE(ABORT, 'job_hold_reason_needs_a_hold');
END;

CREATE TABLE organization_usage (
    organization_id TEXT    PRIMARY KEY REFERENCES organizations (id),
    jobs_live       INTEGER NOT NULL DEFAULT 0 CHECK (jobs_live >= 0),
    jobs_archived   INTEGER NOT NULL DEFAULT 0 CHECK (jobs_archived >= 0),
    jobs_expiring   INTEGER NOT NULL DEFAULT 0 CHECK (jobs_expiring >= 0),
    jobs_held       INTEGER NOT NULL DEFAULT 0 CHECK (jobs_held >= 0),
    r2_objects      INTEGER NOT NULL DEFAULT 0 CHECK (r2_objects >= 0),
    r2_bytes        INTEGER NOT NULL DEFAULT 0 CHECK (r2_bytes >= 0)
) WITHOUT ROWID;

-- What every organization holds now (the one time the jobs table is counted).
INSERT INTO organization_usage (organization_id, jobs_live, jobs_archived, jobs_expiring,
                                jobs_held, r2_objects, r2_bytes)
SELECT o.id,
       (SELECT count(*) FROM jobs AS j WHERE j.organization_id = o.id
           AND j.archive_state IS NOT 'pruned' AND j.expiring_at IS NULL),
       (SELECT count(*) FROM jobs AS j WHERE j.organization_id = o.id
           AND j.archive_state = 'pruned' AND j.expiring_at IS NULL),
       (SELECT count(*) FROM jobs AS j WHERE j.organization_id = o.id AND j.expiring_at IS NOT NULL),
       (SELECT count(*) FROM jobs AS j WHERE j.organization_id = o.id AND j.held_at IS NOT NULL),
       (SELECT 2 * count(*) FROM jobs AS j WHERE j.organization_id = o.id AND j.archive_state IS NOT NULL),
       (SELECT coalesce(sum(j.bundle_bytes), 0) FROM jobs AS j WHERE j.organization_id = o.id
           AND j.archive_state IS NOT NULL)
  FROM organizations AS o;

-- A new organization starts at zero (organizations are made by scripts/bootstrap-admin, whose
-- insert checks no row count).
CREATE TRIGGER organization_usage_for_a_new_organization
AFTER INSERT ON organizations
BEGIN
    INSERT INTO organization_usage (organization_id) VALUES (NEW.id);
END;
