-- An organization's release artifacts, newest first, after the cursor (?3, ?4), of one kind
-- (?2) or all: a walk of release_artifacts_page_order, never a sort.
SELECT a.id, a.kind, a.name, a.created_at,
       (SELECT MAX(v.id) FROM release_versions AS v
         WHERE v.artifact_id = a.id AND v.organization_id = a.organization_id) AS latest_version_id
  FROM release_artifacts AS a
 WHERE a.organization_id = ?1
   AND (?2 IS NULL OR a.kind = ?2)
   AND (?3 IS NULL OR (a.created_at, a.id) < (?3, ?4))
 ORDER BY a.created_at DESC, a.id DESC
 LIMIT ?5
