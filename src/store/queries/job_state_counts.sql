-- How many of an organization's jobs are in each state: one pass over the organization's
-- entries of the covering index jobs_by_organization_state, never the table.
SELECT state, COUNT(*) AS count FROM jobs WHERE organization_id = ?1 GROUP BY state
