-- store::jobs::select_found: Whether the organization has the job, and its state and attempt: one
-- row ([`Found`]) or none. Read in the same batch as a stream page, it is the state as of that
-- page. A job the retention pass marked expiring is not found.
SELECT state, dispatch_attempt FROM jobs WHERE id = ?2 AND organization_id = ?1 AND expiring_at IS NULL
UNION ALL
SELECT state, dispatch_attempt FROM archived_job_rows
    WHERE id = ?2 AND organization_id = ?1 AND expiring_at IS NULL
