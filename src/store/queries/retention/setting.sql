-- store::retention::setting: how many days the organization keeps its finished jobs, and how
-- many retention has deleted; no row for an unknown organization. ?1 organization id
SELECT retention_days, retention_deleted_jobs FROM organizations WHERE id = ?1
