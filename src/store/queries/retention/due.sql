-- The retention pass's candidates in one organization (archived_jobs_to_expire): archived
-- jobs, neither held nor expiring, that finished before the cut; oldest finish first.
-- ?1 organization id, ?2 the cut (finished before it), ?3 at most
SELECT a.id, ?1 AS organization_id, ?2 AS cut FROM archived_jobs AS a INDEXED BY archived_jobs_to_expire
    WHERE a.organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?1)
      AND a.held_at IS NULL AND a.expiring_at IS NULL AND a.finished_at < ?2
    ORDER BY a.finished_at LIMIT ?3
