-- store::runners::issue_challenge: Stores a challenge for a runner, in one transaction with the
-- deletion of its unconsumed challenges beyond the newest [`MAX_LIVE_CHALLENGES`] − 1 (and of its
-- expired ones): the runner never holds more than the cap, and the newest always works. Answers the
-- insert's row count.
INSERT INTO runner_challenges (id, runner_id, organization_id, fingerprint, challenge_hash, issued_at, expires_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
