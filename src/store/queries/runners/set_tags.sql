-- store::runners::set_tags: ?1 organization, ?2 runner, ?3 tags (JSON), ?4 now, ?5 RunnerState::Revoked
UPDATE runners SET tags = ?3, updated_at = ?4 WHERE id = ?2 AND organization_id = ?1 AND state <> ?5
