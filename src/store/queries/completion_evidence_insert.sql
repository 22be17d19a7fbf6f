-- Evidence custody: one row per evidence id; its key makes a second attachment abort everything.
-- ?1 (*kind), ?2 id, ?3 completion_id, ?4 job.id, ?5 job.organization_id, ?6 ctx.now
INSERT INTO completion_evidence (evidence_kind, evidence_id, completion_id, job_id, organization_id, attached_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)
