-- store::runners::purge_challenges: used or expired challenges, at most ?2 of them.
-- ?1 now, ?2 at most this many
DELETE FROM runner_challenges WHERE rowid IN (SELECT rowid FROM runner_challenges
   WHERE expires_at <= ?1 OR consumed_at IS NOT NULL LIMIT ?2)
