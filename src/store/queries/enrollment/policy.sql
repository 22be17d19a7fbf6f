-- store::enrollment::policy: The organization's policy as stored, `None` for an unknown
-- organization.
SELECT enrollment_policy FROM organizations WHERE id = ?1
