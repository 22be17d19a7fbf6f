-- store::releases::insert_target: Inserts a target. The guard re-checks that a bound version is the
-- organization's and has that content hash, so a target never records a hash its version does not
-- have; zero rows changed means it did not hold. A taken key fails `UNIQUE (organization_id,
-- target_key)`, naming `executable_targets.target_key`.
INSERT INTO executable_targets (id, organization_id, target_key, repository, entrypoint,
    requirements, evaluation_id, version_id, content_hash,
    created_at, updated_at)
    SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10
    WHERE ?8 IS NULL
    OR EXISTS (SELECT 1 FROM release_versions
    WHERE id = ?8 AND organization_id = ?2 AND content_hash = ?9)
