-- A quota per organization (issue 42): every organization shares the one D1 database, so
-- each one's live bytes are bounded. organization_usage.d1_bytes counts what the
-- organization's unbounded writes hold in D1, estimated as each row's variable bytes plus a
-- fixed allowance for the rest of the row and its index entries (the allowances are the
-- worker's, src/store/usage.rs, passed to every statement that charges or frees):
--
--   a job          its input and requirements (as stored) + JOB_ROW_BYTES; freed when the
--                  retention pass deletes it
--   a chunk        its payload + CHUNK_ROW_BYTES; freed when the archive prunes it (from the
--                  job's summary: stream bytes + chunks x CHUNK_ROW_BYTES)
--   a version      its content + VERSION_ROW_BYTES (versions are immutable and never deleted)
--   evidence       an evaluation run, test result, cost record, model call or trace: its text
--                  columns + 256 (the *_bytes views below say which); freed when the retention
--                  pass marks the job whose custody holds its run
--
-- Each charge is the statement right after the write it charges, in its batch, and applies only
-- when that write changed its row; the trigger below refuses a charge past the quota, which
-- aborts the whole batch: nothing is half-written. A freeing statement never goes below zero.
--
-- The quota is the organization's own (organizations.d1_quota_bytes, set by an operator) or
-- the deployment's default (ORGANIZATION_D1_QUOTA_BYTES in wrangler.toml), written onto the
-- usage row by each charge so that the trigger can read it.

ALTER TABLE organizations ADD COLUMN d1_quota_bytes INTEGER CHECK (d1_quota_bytes IS NULL OR d1_quota_bytes > 0);

ALTER TABLE organization_usage ADD COLUMN d1_bytes INTEGER NOT NULL DEFAULT 0 CHECK (d1_bytes >= 0);
-- The quota the last charge was held to (NULL before the first).
ALTER TABLE organization_usage ADD COLUMN d1_quota_bytes INTEGER CHECK (d1_quota_bytes IS NULL OR d1_quota_bytes > 0);

CREATE TRIGGER organization_usage_within_quota
BEFORE UPDATE OF d1_bytes ON organization_usage
WHEN NEW.d1_bytes > OLD.d1_bytes AND NEW.d1_quota_bytes IS NOT NULL
 AND NEW.d1_bytes > NEW.d1_quota_bytes
BEGIN
    SELECT RAISE(ABORT, 'organization_quota_exceeded');
END;

-- What an evidence row costs, one view a table (each a plain view over its table, so that
-- reads through it use the table's indexes).
CREATE VIEW evaluation_run_bytes AS
    SELECT id, organization_id, id AS evaluation_run_id,
           256 + length(CAST(coalesce(evaluation_id, '') AS BLOB)) + length(CAST(coalesce(metadata, '') AS BLOB)) AS bytes
      FROM evaluation_runs;
CREATE VIEW test_result_bytes AS
    SELECT id, organization_id, evaluation_run_id,
           256 + length(CAST(name AS BLOB)) + length(CAST(coalesce(detail, '') AS BLOB)) AS bytes
      FROM test_results;
CREATE VIEW cost_record_bytes AS
    SELECT id, organization_id, evaluation_run_id,
           256 + length(CAST(coalesce(description, '') AS BLOB)) AS bytes
      FROM cost_records;
CREATE VIEW model_call_bytes AS
    SELECT id, organization_id, evaluation_run_id,
           256 + length(CAST(provider AS BLOB)) + length(CAST(model AS BLOB)) AS bytes
      FROM model_calls;
CREATE VIEW trace_bytes AS
    SELECT id, organization_id, evaluation_run_id,
           256 + length(CAST(coalesce(name, '') AS BLOB)) + length(CAST(coalesce(spans, '') AS BLOB)) AS bytes
      FROM traces;

-- What every organization holds now, by the same estimate (the allowances as the worker has
-- them at this migration: a job 1024, a chunk 256, a version 512), its evidence included
-- but for the runs in the custody of a job retention marked (freed when it was marked).
UPDATE organization_usage SET d1_bytes =
    (SELECT coalesce(sum(1024 + length(CAST(j.input AS BLOB)) + length(CAST(j.requirements AS BLOB))), 0)
       FROM jobs AS j WHERE j.organization_id = organization_usage.organization_id)
  + (SELECT coalesce(sum(256 + length(CAST(c.payload AS BLOB))), 0)
       FROM stream_chunks AS c WHERE c.organization_id = organization_usage.organization_id)
  + (SELECT coalesce(sum(512 + length(CAST(v.content AS BLOB))), 0)
       FROM release_versions AS v WHERE v.organization_id = organization_usage.organization_id)
  + (SELECT coalesce(sum(b.bytes), 0) FROM evaluation_run_bytes AS b
      WHERE b.organization_id = organization_usage.organization_id
        AND b.evaluation_run_id NOT IN (SELECT ce.evidence_id FROM completion_evidence AS ce
                                       JOIN jobs AS j ON j.id = ce.job_id
                                      WHERE ce.evidence_kind = 'evaluation_run' AND j.expiring_at IS NOT NULL))
  + (SELECT coalesce(sum(b.bytes), 0) FROM test_result_bytes AS b
      WHERE b.organization_id = organization_usage.organization_id
        AND b.evaluation_run_id NOT IN (SELECT ce.evidence_id FROM completion_evidence AS ce
                                       JOIN jobs AS j ON j.id = ce.job_id
                                      WHERE ce.evidence_kind = 'evaluation_run' AND j.expiring_at IS NOT NULL))
  + (SELECT coalesce(sum(b.bytes), 0) FROM cost_record_bytes AS b
      WHERE b.organization_id = organization_usage.organization_id
        AND b.evaluation_run_id NOT IN (SELECT ce.evidence_id FROM completion_evidence AS ce
                                       JOIN jobs AS j ON j.id = ce.job_id
                                      WHERE ce.evidence_kind = 'evaluation_run' AND j.expiring_at IS NOT NULL))
  + (SELECT coalesce(sum(b.bytes), 0) FROM model_call_bytes AS b
      WHERE b.organization_id = organization_usage.organization_id
        AND b.evaluation_run_id NOT IN (SELECT ce.evidence_id FROM completion_evidence AS ce
                                       JOIN jobs AS j ON j.id = ce.job_id
                                      WHERE ce.evidence_kind = 'evaluation_run' AND j.expiring_at IS NOT NULL))
  + (SELECT coalesce(sum(b.bytes), 0) FROM trace_bytes AS b
      WHERE b.organization_id = organization_usage.organization_id
        AND b.evaluation_run_id NOT IN (SELECT ce.evidence_id FROM completion_evidence AS ce
                                       JOIN jobs AS j ON j.id = ce.job_id
                                      WHERE ce.evidence_kind = 'evaluation_run' AND j.expiring_at IS NOT NULL));
