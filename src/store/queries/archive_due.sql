-- The archive pass (store::archive::due): finished jobs not yet pruned whose grace period is
-- over, oldest finish first, through the partial index jobs_to_archive (its terms are written
-- literally so that the planner can use it). A stored job is among them until it is pruned.
-- ?1 finished at or before (now - archive::ARCHIVE_GRACE_MILLIS), ?2 at most (archive::JOBS_PER_PASS)
SELECT id, organization_id, state, finished_at, archive_state FROM jobs
    WHERE state IN ('succeeded', 'failed', 'cancelled') AND archive_state IS NOT 'pruned'
    AND finished_at <= ?1
    ORDER BY finished_at, id LIMIT ?2
