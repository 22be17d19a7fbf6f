-- store::counters::add_deployment: one more of the deployment's counter ?1.
INSERT INTO deployment_counters (name, value) VALUES (?1, 1)
ON CONFLICT (name) DO UPDATE SET value = value + 1
