"""What the schema suites share: the database (db.py), the world they build in it (world.py),
the base test case and the statements and constants of the service the suites read."""

from db import *  # noqa: F401,F403
from world import World  # noqa: F401


class SchemaTest(unittest.TestCase):
    def setUp(self):
        self.conn = open_database()
        self.w = World(self.conn)

    def tearDown(self):
        self.conn.close()

    def assertRefused(self, fn, *args, message=None, **kwargs):
        """fn(*args, **kwargs) raises IntegrityError (whose text contains `message`, if given)."""
        with self.assertRaises(sqlite3.IntegrityError) as caught:
            fn(*args, **kwargs)
        if message is not None:
            self.assertIn(message, str(caught.exception))
        return caught.exception

    def execute(self, sql, *params):
        return self.conn.execute(sql, params)

    def claimed_job(self, org=None, runner=None, **job_overrides):
        org = org or self.w.org()
        runner = runner or self.w.runner(org)
        job = self.w.job(org, **job_overrides)
        claim = self.w.grant(job, runner)
        return org, runner, job, claim


# =============================================================================================
# CHECK constraints on every state and enum column
# =============================================================================================


def _update(table, column, key="id"):
    def mutate(test, row_id, value):
        test.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", value, row_id)

    return mutate


# =============================================================================================
# Query plans: every lookup the service makes goes through an index
# =============================================================================================


def query_plan(conn, sql, params):
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()]


# =============================================================================================
# Per-job storage limits (migrations/0004_job_bounds.sql)
# =============================================================================================


MAX_CHUNKS_PER_ATTEMPT = 10_000
MAX_STREAM_BYTES_PER_ATTEMPT = 64 * 1024 * 1024
MAX_STORED_REFUSALS = 20


# The protocol's runner machine as the worker binds it into the statements that decide from a
# runner's live state. src/store/runners.rs builds them from the protocol crate, and its unit
# tests check that this file binds exactly what it builds.
LEASE_LOST_MOVES = '{"active":"lost"}'
LEASE_LOST_RETIRING = '["active"]'
AUTHENTICATING_STATES = '["active","draining","lost"]'
CLAIMING_STATES = '["active"]'
# runners::rotate: where a bootstrap runner's token may be rotated (RunnerState::can_rotate).
ROTATABLE_STATES = '["pending_approval","active","draining","lost"]'
# The protocol's other sets as src/store/states.rs binds them (its tests check these lines).
HELD_JOB_STATES = '["claimed","running","cancel_requested"]'
ENVIRONMENT_ORDER = '["dev","staging","prod"]'
TERMINAL_JOB_STATES = '["succeeded","failed","cancelled"]'
# What store::archive binds beside a job and its organization: archive_store's stage and the
# terminal states, archive_mark_pruned's stages, and each step of the move's.
STORE_ARGS = ("stored", TERMINAL_JOB_STATES)
MARK_PRUNED_ARGS = ("pruned", "stored")
MOVE_ARGS = {"requirements": ("pruned",), "job": ("pruned", "evaluation_run"),
             "custody": ("evaluation_run",), "delete": ("pruned",), "legacy_job": ()}
# runners::take_capacity: what the grant of an ephemeral runner's job moves it to (migration 0020).
EPHEMERAL_DRAINED = "draining"
EPHEMERAL_DRAINED_REASON = "ephemeral: took its one job"
SESSION_PROVEN_MOVES = '{"lost":"active"}'
SESSION_REASON = "session exchanged after loss"

# Every admin move that changes the state, with what it stamps: (from, input, to, approved_at
# set, revoked_at set, credential retired). src/store/runners.rs derives the same table from
# the protocol crate and checks that this one is it, row for row.
ADMIN_MOVES = (
    ("pending_approval", "approve", "active", True, False, False),
    ("pending_approval", "revoke", "revoked", False, True, True),
    ("active", "drain", "draining", False, False, False),
    ("active", "revoke", "revoked", False, True, True),
    ("draining", "activate", "active", False, False, False),
    ("draining", "revoke", "revoked", False, True, True),
    ("lost", "activate", "active", False, False, False),
    ("lost", "drain", "draining", False, False, False),
    ("lost", "revoke", "revoked", False, True, True),
)
RUNNER_STATES = ("pending_approval", "active", "draining", "lost", "revoked")


# =============================================================================================
# Archive on finish (migration 0010): a finished job's rows go only once its archive is
# stored, in bounded batches, down to the job row and its evidence custody
# =============================================================================================

TERMINAL = ("succeeded", "failed", "cancelled")
# A prune batch, in its order (store::archive::prune_batch).
# usage/job_pruned.sql before migration 0018, when a pruned job's row stayed in jobs whole.
LEGACY_JOB_PRUNED = """
UPDATE organization_usage
   SET jobs_live = jobs_live - 1, jobs_archived = jobs_archived + 1,
       d1_bytes = max(0, d1_bytes - (SELECT coalesce(stream_bytes, 0) + coalesce(stream_chunks, 0) * ?3
                                       FROM jobs WHERE id = ?2 AND organization_id = ?1))
 WHERE organization_id = ?1 AND changes() = 1
"""
# usage/evidence_freed.sql before migration 0019, when an archived job's run was held in
# completion_evidence as a live job's is.
LEGACY_EVIDENCE_FREED = """
UPDATE organization_usage
   SET d1_bytes = max(0, d1_bytes - (
           WITH runs AS (SELECT evidence_id AS id FROM completion_evidence
                          WHERE job_id = ?2 AND organization_id = ?1 AND evidence_kind = 'evaluation_run')
           SELECT (SELECT coalesce(sum(bytes), 0) FROM evaluation_run_bytes WHERE id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM test_result_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM cost_record_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM model_call_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM trace_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))))
 WHERE organization_id = ?1 AND changes() = 1
"""
# archive/move_job.sql before migration 0019, when the run's custody row stayed behind.
LEGACY_MOVE_JOB = """
INSERT INTO archived_jobs (id, organization_number, idempotency_key, intent_hash,
    subject_version_id, subject_environment, requirements_id, input_hash, state,
    dispatch_attempt, released_attempts, cancel_reason, created_at, updated_at, finished_at,
    archived_at, bundle_sha256, bundle_bytes, stream_chunks, stream_bytes, stream_head,
    unstored_decisions, last_unstored_checksum, last_unstored_decision, last_unstored_at,
    held_at, held_by, held_reason, expiring_at)
SELECT j.id, n.number, j.idempotency_key, unhex(j.intent_hash), j.subject_version_id,
       j.subject_environment, d.id, unhex(j.input_hash), j.state, j.dispatch_attempt,
       j.released_attempts, j.cancel_reason, j.created_at, j.updated_at, j.finished_at,
       j.archived_at, unhex(j.bundle_sha256), j.bundle_bytes, j.stream_chunks, j.stream_bytes,
       unhex(j.stream_head), j.unstored_decisions, unhex(j.last_unstored_checksum),
       j.last_unstored_decision, j.last_unstored_at, j.held_at, j.held_by, j.held_reason,
       j.expiring_at
  FROM jobs AS j
  JOIN organization_numbers AS n ON n.organization_id = j.organization_id
  JOIN requirement_documents AS d ON d.organization_number = n.number AND d.document = j.requirements
 WHERE j.id = ?1 AND j.organization_id = ?2 AND j.archive_state = 'pruned'
"""
PRUNE_STATEMENTS = (query("archive_prune_chunks"), query("archive_prune_completions"),
                    query("archive_prune_events"), query("archive_prune_claims"))


class ArchiveWorld(SchemaTest):
    """Finished jobs and the archive statements, for the archive and retention tests."""
    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.runner = self.w.runner(self.org, max_concurrent_jobs=5)
        self.run = self.w.evaluation_run(self.org)

    def finished_job(self, chunks=3, lost_attempt=True, run=None, **job_overrides):
        """A job as the service leaves it: a first attempt lost with a stream, a second that
        streamed and completed with its evaluation run (`run`, or a new one) and a test result
        of it, and a duplicate completion after."""
        w = self.w
        run = run or w.evaluation_run(self.org)
        job = w.job(self.org, **job_overrides)
        if lost_attempt:
            first = w.grant(job, self.runner)
            w.stream(job, first, 1, 2)
            w.reap(job, self.runner)
        claim = w.grant(job, self.runner)
        attempt = 2 if lost_attempt else 1
        head = w.stream(job, claim, attempt, chunks)
        result = w.test_result(self.org, run)
        w.complete(job, claim, self.runner, attempt, final_stream_checksum=head,
                   evaluation_run_id=run, evidence=[("test_result", result)])
        w.complete(job, claim, self.runner, attempt, decision="duplicate", final_stream_checksum=head)
        return job, head

    def counts(self, job):
        return {t: self.w.one(f"SELECT count(*) FROM {t} WHERE job_id = ?", job)[0]
                for t in ("stream_chunks", "job_completions", "job_events", "job_claims", "completion_evidence")}

    def store(self, job, head, completions=None, unstored=0, **overrides):
        chunks, stream_bytes = self.w.one(
            "SELECT count(*), coalesce(sum(length(CAST(payload AS BLOB))), 0) FROM stream_chunks WHERE job_id = ?", job)
        if completions is None:
            completions = self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job)[0]
        params = {"bundle": sha("bundle " + job), "bytes": 4096,
                  "chunks": chunks, "stream_bytes": stream_bytes, "head": head, "at": NOW + 1}
        params.update(overrides)
        stored = self.execute(query("archive_store"), job, self.org, params["bundle"], params["bytes"],
                              params["chunks"], params["stream_bytes"], params["head"],
                              params["at"], completions, unstored, *STORE_ARGS).rowcount
        self.w.usage("archive_stored", self.org, params["bytes"])
        return stored

    def counted_batch(self, statements, params):
        """The statements as one D1 batch, each with `params`: the rows each changed."""
        self.conn.execute("BEGIN")
        try:
            changed = [self.conn.execute(sql, params).rowcount for sql in statements]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return changed

    def prune_batch(self, job, limit):
        return self.counted_batch(PRUNE_STATEMENTS, (job, self.org, limit))

    def rebuild_before(self, migration):
        """This test's world again, on the schema as it was before `migration` (its
        organization and a runner in it): the migrations from there on are the test's to apply
        ([`apply_from`]). What the service wrote before that migration is built with the
        statements of its time where they differ ([`mark_pruned`], [`expire`])."""
        self.pending = [m for m in MIGRATIONS if os.path.basename(m) >= migration]
        self.conn.close()
        self.conn = open_database([m for m in MIGRATIONS if m not in self.pending])
        self.w = World(self.conn)
        self.org = self.w.org()
        self.runner = self.w.runner(self.org, max_concurrent_jobs=5)

    def apply_from(self):
        """The migrations [`rebuild_before`] left out, in order."""
        for path in self.pending:
            apply_migration(self.conn, path)

    def has_archived_jobs(self):
        """Whether migration 0018 (archived_jobs) is applied: the tests of earlier migrations
        build their worlds before it."""
        return self.w.one("SELECT count(*) FROM sqlite_schema WHERE name = 'archived_jobs'")[0] == 1

    def mark_pruned(self, job):
        """store::archive::mark_pruned's batch: stage pruned and its counters, then (from
        migration 0018) the row's move to archived_jobs. The rows each statement changed."""
        self.conn.execute("BEGIN")
        try:
            changed = [self.execute(query("archive_mark_pruned"), job, self.org, *MARK_PRUNED_ARGS).rowcount]
            if self.has_archived_jobs():
                self.w.usage("job_pruned", self.org, job, CHUNK_ROW_BYTES, JOB_ROW_BYTES - ARCHIVED_JOB_BYTES)
            else:
                self.w.usage_sql(LEGACY_JOB_PRUNED, self.org, job, CHUNK_ROW_BYTES)
            if self.has_archived_jobs():
                changed += [self.execute(LEGACY_MOVE_JOB if step == "legacy_job" else query(f"archive/move_{step}"),
                                         job, self.org, *MOVE_ARGS[step]).rowcount
                            for step in self.move_steps()]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return changed

    def has_archived_custody(self):
        """Whether migration 0019 is applied: an archived job holds its run in its row."""
        return self.w.one("SELECT count(*) FROM sqlite_schema"
                          " WHERE name = 'archived_jobs_by_custody_run'")[0] == 1

    def move_steps(self):
        """The move's statements (archive/move_*), as the migrations applied have them: from
        0019 the run's custody row goes to the archived row."""
        if self.has_archived_custody():
            return ("requirements", "job", "custody", "delete")
        return ("requirements", "legacy_job", "delete")

    def job_row(self, job, columns):
        """`columns` of the job's row, wherever it is (jobs, or archived_job_rows)."""
        tables = ("jobs", "archived_job_rows") if self.has_archived_jobs() else ("jobs",)
        rows = [row for table in tables
                for row in self.conn.execute(f"SELECT {columns} FROM {table} WHERE id = ?", (job,))]
        self.assertLessEqual(len(rows), 1)
        return rows[0] if rows else None


# =============================================================================================
# Retention (migration 0011): hold, expiry, and deletion with the job's evidence
# =============================================================================================

# The protocol's terminal states as the worker binds them into the hold statement.
TERMINAL_STATES = '["succeeded","failed","cancelled"]'
RETENTION_EVIDENCE_DELETES = tuple(query(f"retention/delete_{table}")
                                   for table in ("test_results", "cost_records", "model_calls", "traces"))
# The deletion batch (store::retention::delete_job), each statement with its parameters from
# (job, organization): from migration 0018 the archived row goes, with its requirements document
# when no other archived job names it.
RETENTION_JOB_DELETE = tuple((query(name), params) for name, params in (
    ("retention/count_deleted", lambda job, org: (job, org)),
    ("usage/job_deleted", lambda job, org: (job, org, ARCHIVED_JOB_BYTES)),
    ("retention/delete_runs", lambda job, org: (job, org)),
    ("retention/delete_custody", lambda job, org: (job, org)),
    ("retention/release_requirements", lambda job, org: (job, org)),
    ("retention/delete_job", lambda job, org: (job, org)),
    ("retention/drop_requirements", lambda job, org: (org,))))
# Its statement that deletes the job's row.
DELETES_THE_JOB = 5


class RetentionWorld(ArchiveWorld):
    """Archived jobs and the retention statements, for the retention and usage tests."""
    def archived_job(self, run=None, **job_overrides):
        """A finished job, stored and pruned, with its run and a test result in custody."""
        job, head = self.finished_job(run=run, **job_overrides)
        self.assertEqual(self.store(job, head), 1)
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.prune_batch(job, 500)):
                break
        self.assertEqual(self.mark_pruned(job)[0], 1)
        return job

    def hold(self, job, by="admin:key_1", reason="an audit", org=None):
        """store::retention::hold's writes: of jobs, then (from 0018) of archived_jobs, each
        with its counter; the rows they changed together."""
        org = org or self.org
        held = 0
        for name in ("hold", "hold_archived") if self.has_archived_jobs() else ("hold",):
            held += self.execute(query(f"retention/{name}"), job, org, NOW + 5, by, TERMINAL_STATES,
                                 reason).rowcount
            self.w.usage("job_held", org, 1)
        return held

    def release(self, job, org=None):
        org = org or self.org
        released = 0
        for name in ("release", "release_archived") if self.has_archived_jobs() else ("release",):
            released += self.execute(query(f"retention/{name}"), job, org).rowcount
            self.w.usage("job_held", org, -1)
        return released

    def expire(self, job, cut=NOW + 1):
        """1 when the job was marked (its row returned as the deletion needs it), else 0."""
        expire = query("retention/expire") if self.has_archived_jobs() else (
            # What the pass ran before migration 0018, when archived jobs stayed in jobs.
            "UPDATE jobs SET expiring_at = ?3 WHERE id = ?1 AND organization_id = ?2"
            " AND archive_state = 'pruned' AND held_at IS NULL AND expiring_at IS NULL"
            " AND finished_at < ?4 RETURNING id, organization_id, bundle_sha256")
        returned = self.execute(expire, job, self.org, NOW + 10, cut).fetchall()
        self.w.usage("job_expiring", self.org)
        if self.has_archived_custody():
            self.w.usage("evidence_freed", self.org, job)
        else:
            self.w.usage_sql(LEGACY_EVIDENCE_FREED, self.org, job)
        if returned:
            bundle = self.job_row(job, "bundle_sha256")[0]
            self.assertEqual(returned, [(job, self.org, bundle)])
        return len(returned)

    def delete_evidence(self, job, limit):
        return self.counted_batch(RETENTION_EVIDENCE_DELETES, (job, self.org, limit))

    def delete_expiring_job(self, job):
        """An expiring job's evidence in bounded batches, then its deletion batch: the rows
        that batch changed."""
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.delete_evidence(job, 500)):
                break
        return self.delete_job(job)

    def delete_job(self, job):
        self.conn.execute("BEGIN")
        try:
            changed = [self.conn.execute(sql, params(job, self.org)).rowcount
                       for sql, params in RETENTION_JOB_DELETE]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return changed

    COUNTERS = ("jobs_live", "jobs_archived", "jobs_expiring", "jobs_held", "r2_objects", "r2_bytes",
                "d1_bytes")

    def counters(self, org=None):
        return dict(zip(self.COUNTERS, self.w.one(
            f"SELECT {', '.join(self.COUNTERS)} FROM organization_usage WHERE organization_id = ?",
            org or self.org)))

    def recount(self, org=None):
        org = org or self.org
        # Every job of the organization, live or archived, with what migration 0015's estimate
        # charges for its row: a live row, or (migration 0018) an archived one and its document.
        everywhere = (
            "SELECT archive_state, expiring_at, held_at, bundle_bytes,"
            "       ? + length(CAST(input AS BLOB)) + length(CAST(requirements AS BLOB)) AS charge"
            "  FROM jobs WHERE organization_id = ?")
        params = [JOB_ROW_BYTES, org]
        if self.has_archived_jobs():
            everywhere += (
                " UNION ALL SELECT archive_state, expiring_at, held_at, bundle_bytes,"
                "       ? + length(CAST(requirements AS BLOB))"
                "  FROM archived_job_rows WHERE organization_id = ?")
            params += [ARCHIVED_JOB_BYTES, org]
        one = lambda column, where: self.w.one(
            f"SELECT coalesce({column}, 0) FROM ({everywhere}) WHERE {where}", *params)[0]
        expiring = ("SELECT id FROM archived_jobs WHERE expiring_at IS NOT NULL" if self.has_archived_jobs()
                    else "SELECT id FROM jobs WHERE expiring_at IS NOT NULL")
        # From migration 0019 an archived job holds its run in its row.
        held_by_expiring = ("SELECT custody_run_id FROM archived_jobs WHERE expiring_at IS NOT NULL"
                            " AND custody_run_id IS NOT NULL" if self.has_archived_custody() else
                            "SELECT NULL WHERE 0")
        return {
            "jobs_live": one("count(*)", "archive_state IS NOT 'pruned' AND expiring_at IS NULL"),
            "jobs_archived": one("count(*)", "archive_state = 'pruned' AND expiring_at IS NULL"),
            "jobs_expiring": one("count(*)", "expiring_at IS NOT NULL"),
            "jobs_held": one("count(*)", "held_at IS NOT NULL"),
            "r2_objects": 2 * one("count(*)", "archive_state IS NOT NULL"),
            "r2_bytes": one("sum(bundle_bytes)", "archive_state IS NOT NULL"),
            # Migration 0015's estimate of what the organization's unbounded writes hold.
            "d1_bytes": one("sum(charge)", "1")
            + self.w.one(
                "SELECT (SELECT coalesce(sum(? + length(CAST(payload AS BLOB))), 0)"
                "          FROM stream_chunks WHERE organization_id = ?2)"
                "     + (SELECT coalesce(sum(? + length(CAST(content AS BLOB))), 0)"
                "          FROM release_versions WHERE organization_id = ?2)",
                CHUNK_ROW_BYTES, org, VERSION_ROW_BYTES)[0]
            # Its evidence, but for what an expiring job's custody holds (freed when marked).
            + sum(self.w.one(
                f"SELECT coalesce(sum(bytes), 0) FROM {view} WHERE organization_id = ?"
                f" AND evaluation_run_id NOT IN (SELECT ce.evidence_id FROM completion_evidence AS ce"
                f"   WHERE ce.evidence_kind = 'evaluation_run' AND ce.job_id IN ({expiring}))"
                f" AND evaluation_run_id NOT IN ({held_by_expiring})", org)[0]
                  for view in ("evaluation_run_bytes", "test_result_bytes", "cost_record_bytes",
                               "model_call_bytes", "trace_bytes")),
        }


# =============================================================================================
# Migration 0018: archived jobs, compact
# =============================================================================================


JOB_ROW = ("id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id, "
           "subject_version_id, subject_content_hash, subject_environment, input_hash, requirements, "
           "state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason, "
           "created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum, "
           "last_unstored_decision, last_unstored_at, held_at, held_by, held_reason")
ARCHIVE_SUMMARY = ("organization_id, state, finished_at, archive_state, bundle_sha256, bundle_bytes, "
                   "stream_chunks, stream_bytes, stream_head, archived_at")

