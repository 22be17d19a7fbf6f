-- store::runners::consume_challenge: Consumes a live, unconsumed challenge of this fingerprint.
-- Exactly one caller can win: the guard and the single-use trigger make a replay change zero rows
-- (or abort).
UPDATE runner_challenges SET consumed_at = ?3
    WHERE challenge_hash = ?2 AND fingerprint = ?1 AND consumed_at IS NULL AND expires_at > ?3
