-- How many of an organization's jobs are in each state: one pass over the organization's
-- entries of the covering indexes jobs_by_organization_state and archived_jobs_by_state,
-- never the tables.
SELECT state, sum(count) AS count FROM (
    SELECT state, COUNT(*) AS count FROM jobs WHERE organization_id = ?1 GROUP BY state
    UNION ALL
    SELECT state, COUNT(*) AS count FROM archived_jobs
     WHERE organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?1)
     GROUP BY state)
GROUP BY state
