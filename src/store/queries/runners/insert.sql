-- store::runners::insert
INSERT INTO runners (id, organization_id, identity_model, name, runner_key, bootstrap_token_hash,
    bootstrap_token_expires_at, public_key, fingerprint, product, version, machine, address, state,
    capabilities, capabilities_hash, protocol_version, problem_types, external, tags,
    max_concurrent_jobs, key_id, approved_at, registered_at, updated_at, enroll_network,
    enrollment_token_id, enroll_site, ephemeral)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?24, ?25, ?26, ?27, ?28)
