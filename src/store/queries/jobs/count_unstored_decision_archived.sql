-- store::jobs::count_unstored_decision_archived: a decision arriving after the job's archive
-- was pruned, counted on its archived row as count_unstored_decision.sql counts one on a job
-- row. ?1 job id, ?2 decision, ?3 completion checksum (hex), ?4 now
UPDATE archived_jobs SET unstored_decisions = unstored_decisions + 1,
    last_unstored_checksum = unhex(?3), last_unstored_decision = ?2, last_unstored_at = ?4
    WHERE id = ?1
