-- Counters (issue 43): what each organization's jobs did, kept on the write path in the batch
-- that did it, so that they count each event exactly once and never fall (a restart, a
-- redeploy or the archive pruning the job's rows leaves them as they are). /metrics reads them.
CREATE TABLE organization_counters (
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    name            TEXT    NOT NULL CHECK (name IN (
        'claims_granted',
        'completions_succeeded', 'completions_failed', 'completions_cancelled',
        'completions_duplicate', 'completions_conflict', 'completions_stale',
        'leases_lost', 'requeues', 'attempts_exhausted', 'stream_bytes')),
    value           INTEGER NOT NULL CHECK (value >= 0),
    PRIMARY KEY (organization_id, name)
) WITHOUT ROWID;

-- What the deployment's own passes did (every organization's scrape shows them).
CREATE TABLE deployment_counters (
    name  TEXT    PRIMARY KEY CHECK (name IN ('reaper_passes')),
    value INTEGER NOT NULL CHECK (value >= 0)
) WITHOUT ROWID;
