-- store::runners::by_fingerprint
SELECT id, organization_id, identity_model, name, runner_key, bootstrap_token_hash,
    bootstrap_token_expires_at, public_key, fingerprint, product, version, machine, address, state,
    state_reason, capabilities, capabilities_hash, protocol_version, problem_types, external, tags,
    max_concurrent_jobs, active_claims, credential_generation, key_id, registered_at, approved_at,
    revoked_at, last_seen_at, last_heartbeat_at, completed_jobs, ephemeral FROM runners WHERE fingerprint = ?1
