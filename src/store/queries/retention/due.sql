-- The retention pass's candidates in one organization (jobs_to_expire): archived jobs,
-- neither held nor expiring, that finished before the cut; oldest finish first.
-- ?1 organization id, ?2 the cut (finished before it), ?3 at most
SELECT id, organization_id, ?2 AS cut FROM jobs INDEXED BY jobs_to_expire
    WHERE organization_id = ?1 AND archive_state = 'pruned' AND held_at IS NULL
      AND expiring_at IS NULL AND finished_at < ?2
    ORDER BY finished_at, id LIMIT ?3
