-- Which accepted completion already holds one of these evidence rows (the evaluation run
-- first: when it is taken, that is the whole story): the answer to a completion whose evidence
-- met another's. ?1 organization id, ?2 a JSON array of [kind, id] pairs (at most the
-- completion's 1,000 evidence ids and its run).
SELECT held.evidence_kind, held.evidence_id, held.job_id
  FROM json_each(?2) AS wanted
  JOIN completion_evidence AS held
    ON held.evidence_kind = json_extract(wanted.value, '$[0]')
   AND held.evidence_id = json_extract(wanted.value, '$[1]')
 WHERE held.organization_id = ?1
 ORDER BY held.evidence_kind = 'evaluation_run' DESC
 LIMIT 1
