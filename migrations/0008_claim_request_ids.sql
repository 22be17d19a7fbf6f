-- A claim may carry the runner's own idempotency key (`requestId` in POST
-- /api/remote-runners/claim). The grant stores it on the claim; the same runner asking again
-- with the same key while that claim is active gets the same answer (the stored signed job,
-- the same attempt and nonce), never a second grant. So a claim whose answer was lost on its
-- way back (a dropped connection, a crash of the client) is recovered by retrying it, instead
-- of lapsing, marking the runner lost and using up one of the job's attempts.
--
-- The key is the runner's: unique among its *active* claims only, so a key reused after its
-- claim ended asks for a new job like any other claim.
ALTER TABLE job_claims ADD COLUMN request_id TEXT
    CHECK (request_id IS NULL OR (length(request_id) BETWEEN 1 AND 64 AND request_id NOT GLOB '*[^A-Za-z0-9._:-]*'));

CREATE UNIQUE INDEX job_claims_active_request
    ON job_claims (runner_id, request_id)
    WHERE request_id IS NOT NULL AND state = 'active';
