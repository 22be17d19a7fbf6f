-- Which accepted completion already holds one of these evidence rows (the evaluation run
-- first: when it is taken, that is the whole story): the answer to a completion whose evidence
-- met another's. A live job holds its run in completion_evidence, an archived one in its row
-- (migration 0019). ?1 organization id, ?2 a JSON array of [kind, id] pairs (at most the
-- completion's 1,000 evidence ids and its run).
SELECT evidence_kind, evidence_id, job_id FROM (
    SELECT held.evidence_kind, held.evidence_id, held.job_id
      FROM json_each(?2) AS wanted
      JOIN completion_evidence AS held
        ON held.evidence_kind = json_extract(wanted.value, '$[0]')
       AND held.evidence_id = json_extract(wanted.value, '$[1]')
     WHERE held.organization_id = ?1
    UNION ALL
    -- (CROSS JOIN: each wanted run by the index of runs held, never the organization's jobs.)
    SELECT 'evaluation_run', a.custody_run_id, a.id
      FROM json_each(?2) AS wanted
     CROSS JOIN archived_jobs AS a
     CROSS JOIN organization_numbers AS n
     WHERE json_extract(wanted.value, '$[0]') = 'evaluation_run'
       AND a.custody_run_id = json_extract(wanted.value, '$[1]')
       AND n.number = a.organization_number AND n.organization_id = ?1)
 ORDER BY evidence_kind = 'evaluation_run' DESC
 LIMIT 1
