-- A page of an organization's runners in registration order, after a keyset cursor
-- (?2 registered_at, ?3 id). A range of runners_page_order, no sort.
SELECT id, organization_id, identity_model, name, runner_key, bootstrap_token_hash,
       bootstrap_token_expires_at, public_key, fingerprint, product, version, machine, address, state,
       state_reason, capabilities, capabilities_hash, protocol_version, problem_types, external, tags,
       max_concurrent_jobs, active_claims, credential_generation, key_id, registered_at, approved_at,
       revoked_at, last_seen_at, last_heartbeat_at, completed_jobs, ephemeral
  FROM runners
 WHERE organization_id = ?1 AND (registered_at, id) > (?2, ?3)
 ORDER BY registered_at, id
 LIMIT ?4
