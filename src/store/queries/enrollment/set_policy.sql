-- store::enrollment::set_policy: Sets the policy; 1 row for a known organization.
UPDATE organizations SET enrollment_policy = ?2 WHERE id = ?1
