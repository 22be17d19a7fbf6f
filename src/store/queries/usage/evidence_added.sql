-- After an evidence row's insert, in its batch: its bytes (the migration 0015 view of its
-- table) charged to the organization's quota, when the insert made it.
-- ?1 organization id, ?2 its kind (evaluation_run, test_result, cost_record, model_call,
-- trace), ?3 its id, ?4 the default quota
UPDATE organization_usage
   SET d1_bytes = d1_bytes + coalesce(
           (SELECT bytes FROM evaluation_run_bytes WHERE ?2 = 'evaluation_run' AND id = ?3 AND organization_id = ?1),
           (SELECT bytes FROM test_result_bytes WHERE ?2 = 'test_result' AND id = ?3 AND organization_id = ?1),
           (SELECT bytes FROM cost_record_bytes WHERE ?2 = 'cost_record' AND id = ?3 AND organization_id = ?1),
           (SELECT bytes FROM model_call_bytes WHERE ?2 = 'model_call' AND id = ?3 AND organization_id = ?1),
           (SELECT bytes FROM trace_bytes WHERE ?2 = 'trace' AND id = ?3 AND organization_id = ?1),
           0),
       d1_quota_bytes = coalesce((SELECT d1_quota_bytes FROM organizations WHERE id = ?1), ?4)
 WHERE organization_id = ?1 AND changes() = 1
