-- store::jobs::count_unstored_decision: Counts a non-accepted decision past [`MAX_STORED_REFUSALS`]
-- on the job row.
UPDATE jobs SET unstored_decisions = unstored_decisions + 1, last_unstored_checksum = ?3,
    last_unstored_decision = ?2, last_unstored_at = ?4 WHERE id = ?1
