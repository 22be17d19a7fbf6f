-- An organization's runners by state, with the capacity each state holds and uses: one range of
-- runners_page_order (the organization's entries), never the other organizations' rows.
SELECT state, COUNT(*) AS count, SUM(active_claims) AS in_use, SUM(max_concurrent_jobs) AS maximum
  FROM runners WHERE organization_id = ?1 GROUP BY state
