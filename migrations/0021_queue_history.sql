-- Queue history (issue 45): what each organization's queues did over the last day, for the
-- panel's charts. The cron pass samples each organization once a minute (store::history,
-- queries/history/sample.sql) into its five-minute bucket, so the hot path pays nothing.
--
-- Per bucket: how many samples it took; the most jobs queued and the most held by runners
-- (claimed, running, cancel_requested) any sample saw; the sums of the busy and total job slots
-- of the runners online at each sample (utilization = busy_slots / slots); and the jobs
-- finished in it, as the difference of the organization's finished-job counter (its runners'
-- completions and its jobs failed out of attempts, organization_counters) from the bucket's
-- first sample's base (the previous bucket's last total) to its last sample.
CREATE TABLE queue_history (
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    -- The bucket's start, Unix milliseconds, a multiple of five minutes.
    bucket_at       INTEGER NOT NULL CHECK (bucket_at >= 0 AND bucket_at % 300000 = 0),
    samples         INTEGER NOT NULL CHECK (samples >= 1),
    queued          INTEGER NOT NULL CHECK (queued >= 0),
    running         INTEGER NOT NULL CHECK (running >= 0),
    busy_slots      INTEGER NOT NULL CHECK (busy_slots >= 0),
    slots           INTEGER NOT NULL CHECK (slots >= 0),
    finished_base   INTEGER NOT NULL CHECK (finished_base >= 0),
    finished_total  INTEGER NOT NULL CHECK (finished_total >= finished_base),
    PRIMARY KEY (organization_id, bucket_at)
) WITHOUT ROWID;

-- At most a day per organization: a new bucket deletes the organization's buckets a day older
-- (a range of the primary key), so no organization keeps more than 288 rows.
CREATE TRIGGER queue_history_keeps_a_day
AFTER INSERT ON queue_history
BEGIN
    DELETE FROM queue_history
     WHERE organization_id = NEW.organization_id AND bucket_at <= NEW.bucket_at - 86400000;
END;
