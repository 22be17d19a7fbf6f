-- The move's fourth step: the custody row of the run the archived row now holds goes (none
-- when the job's completion took no run). ?1 job id, ?2 organization id,
-- ?3 EvidenceKind::EvaluationRun
DELETE FROM completion_evidence
 WHERE evidence_kind = ?3 AND job_id = ?1 AND organization_id = ?2
   AND evidence_id = (SELECT custody_run_id FROM archived_jobs WHERE id = ?1)
