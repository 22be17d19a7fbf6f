-- store::enrollment::purge: Deletes tokens that expired before `cutoff` and admitted no runner (a
-- used one stays, as the runners it admitted name it), at most `limit` of them.
DELETE FROM enrollment_tokens WHERE rowid IN (SELECT rowid FROM enrollment_tokens
    WHERE expires_at < ?1 AND uses = 0 LIMIT ?2)
