-- store::releases::insert_artifact: Rows inserted (1); a second artifact of the same kind and name
-- in the organization fails `UNIQUE (organization_id, kind, name)`, naming
-- `release_artifacts.name`.
INSERT INTO release_artifacts (id, organization_id, kind, name, created_at)
    VALUES (?1, ?2, ?3, ?4, ?5)
