-- store::api_keys::organization_name
SELECT name FROM organizations WHERE id = ?1
