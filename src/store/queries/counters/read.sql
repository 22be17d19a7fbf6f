-- store::queues::read, its counters: the organization's, then the deployment's.
-- ?1 organization id
SELECT name, value FROM organization_counters WHERE organization_id = ?1
UNION ALL
SELECT name, value FROM deployment_counters
