-- store::runners::issue_challenge: Stores a challenge for a runner, in one transaction with the
-- deletion of its unconsumed challenges beyond the newest [`MAX_LIVE_CHALLENGES`] − 1 (and of its
-- expired ones): the runner never holds more than the cap, and the newest always works. Answers the
-- insert's row count.
DELETE FROM runner_challenges WHERE runner_id = ?1 AND consumed_at IS NULL
    AND id NOT IN (SELECT id FROM runner_challenges
    WHERE runner_id = ?1 AND consumed_at IS NULL AND expires_at > ?2
    ORDER BY issued_at DESC, id DESC LIMIT ?3)
