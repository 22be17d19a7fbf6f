-- store::queues::read, its runners: the organization's runners that may take work or were
-- taking it (the states that may authenticate: active, draining, lost), with what routing
-- matches on, at most ?2.
-- ?1 organization id, ?2 the most runners read, ?3 runners::authenticating_states() (JSON array)
SELECT state, capabilities, tags, max_concurrent_jobs, active_claims, last_seen_at
  FROM runners INDEXED BY runners_by_organization_state
 WHERE organization_id = ?1 AND state IN (SELECT value FROM json_each(?3))
 LIMIT ?2
