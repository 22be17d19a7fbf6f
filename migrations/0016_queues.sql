-- Queues (issue 43): each job is counted in the queue its routing requirements name
-- (edgerunner_protocol::queue: kind, runtime, external flag, problem type, tags), at most 100
-- per organization, past which a job is counted in the overflow queue `q_overflow`.

-- An organization's queues, each named once, the first time a job of it is enqueued. Its
-- routing parts (`canonical`, the JSON array the id hashes) let the queues view match runners
-- against it. Never deleted: a queue's name stays what an autoscaler selects by.
CREATE TABLE queues (
    organization_id TEXT    NOT NULL REFERENCES organizations (id),
    id              TEXT    NOT NULL
                            CHECK (length(id) = 18 AND substr(id, 1, 2) = 'q_' AND substr(id, 3) NOT GLOB '*[^0-9a-f]*'),
    name            TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 3000),
    canonical       TEXT    NOT NULL CHECK (json_valid(canonical) AND json_type(canonical) = 'array'),
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (organization_id, id)
) WITHOUT ROWID;

-- The job's queue: one of its organization's, or `q_overflow`. NULL for a job enqueued before
-- this migration (the queues view counts those apart, as enqueued before queues existed).
ALTER TABLE jobs ADD COLUMN queue_id TEXT
    CHECK (queue_id IS NULL OR queue_id = 'q_overflow' OR
           (length(queue_id) = 18 AND substr(queue_id, 1, 2) = 'q_' AND substr(queue_id, 3) NOT GLOB '*[^0-9a-f]*'));

-- The queues view's one read of jobs: the organization's live jobs, by queue and state, with
-- their creation times (the oldest queued job per queue is the first entry of its range).
-- Only live jobs are in it, so the read is as long as the organization's live jobs, never
-- its history.
CREATE INDEX jobs_live_by_queue ON jobs (organization_id, queue_id, state, created_at)
    WHERE state IN ('queued', 'claimed', 'running', 'cancel_requested');
