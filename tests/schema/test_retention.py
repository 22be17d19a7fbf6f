"""Retention, usage counters and quotas.

Run from the repository root: python3 -m unittest discover -s tests/schema
"""

import sqlite3
import unittest

from harness import *  # noqa: F401,F403 (the world and the statements every suite uses)


class RetentionTests(RetentionWorld):
    def test_an_organization_keeps_jobs_90_days_by_default_and_from_1_to_400(self):
        self.assertEqual(self.w.one("SELECT retention_days, retention_deleted_jobs FROM organizations"
                                    " WHERE id = ?", self.org), (90, 0))
        for days in (1, 400):
            self.execute("UPDATE organizations SET retention_days = ? WHERE id = ?", days, self.org)
        for days in (0, 401, None):
            with self.subTest(days=days):
                self.assertRefused(self.execute, "UPDATE organizations SET retention_days = ? WHERE id = ?",
                                   days, self.org)

    def test_only_a_finished_job_that_is_not_expiring_is_held_and_released(self):
        _, _, live, _ = self.claimed_job(org=self.org, runner=self.runner)
        self.assertEqual(self.hold(live), 0)
        self.assertRefused(self.execute, "UPDATE jobs SET held_at = ?, held_by = 'x' WHERE id = ?", NOW, live,
                           message="job_hold_needs_a_finished_job")
        # A finished job, not yet archived, is held where it is, and its hold moves with it.
        finished, head = self.finished_job()
        self.assertEqual(self.hold(finished), 1)
        self.assertEqual(self.store(finished, head), 1)
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.prune_batch(finished, 500)):
                break
        self.assertEqual(self.mark_pruned(finished), [1, 1, 1, 1, 1])
        self.assertEqual(self.job_row(finished, "held_at, held_by, held_reason"),
                         (NOW + 5, "admin:key_1", "an audit"))
        job = self.archived_job()
        self.assertRefused(self.execute, "UPDATE archived_jobs SET held_at = ? WHERE id = ?", NOW, job,
                           message="CHECK constraint failed")
        self.assertEqual(self.hold(job), 1)
        self.assertEqual(self.hold(job), 0)  # held already: nothing changes
        self.assertEqual(self.job_row(job, "held_at, held_by, held_reason"),
                         (NOW + 5, "admin:key_1", "an audit"))
        # A reason only with a hold.
        self.assertRefused(self.execute, "UPDATE jobs SET held_reason = 'x' WHERE id = ?", live,
                           message="job_hold_reason_needs_a_hold")
        # Held: never due, never expired, by the statement or by hand.
        self.assertEqual(self.execute(query("retention/due"), self.org, NOW + 1, 10).fetchall(), [])
        self.assertEqual(self.expire(job), 0)
        self.assertRefused(self.execute, "UPDATE archived_jobs SET expiring_at = ? WHERE id = ?", NOW, job,
                           message="CHECK constraint failed")
        self.assertEqual(self.release(job), 1)
        self.assertEqual(self.job_row(job, "held_at, held_by, held_reason"), (None, None, None))
        self.assertEqual(self.release(job), 0)
        # Another organization's admin holds nothing of this one, live or archived.
        other = self.w.org()
        self.assertEqual(self.hold(job, org=other), 0)
        self.assertEqual(self.hold(finished, org=other), 0)

    def test_only_an_archived_unheld_job_finished_before_the_cut_expires_and_for_good(self):
        unarchived, head = self.finished_job()
        self.assertEqual(self.expire(unarchived), 0)
        self.assertRefused(self.execute, "UPDATE jobs SET expiring_at = ? WHERE id = ?", NOW, unarchived,
                           message="job_expiry_needs_an_archived_unheld_job")
        job = self.archived_job()
        due = query("retention/due")
        # Finished at NOW: not before a cut at NOW, before one at NOW + 1.
        self.assertEqual(self.execute(due, self.org, NOW, 10).fetchall(), [])
        self.assertEqual(self.expire(job, cut=NOW), 0)
        self.assertEqual(self.execute(due, self.org, NOW + 1, 10).fetchall(), [(job, self.org, NOW + 1)])
        self.assertEqual(self.execute(due, self.w.org(), NOW + 1, 10).fetchall(), [])
        self.assertEqual(self.expire(job), 1)
        self.assertEqual(self.expire(job), 0)
        self.assertEqual(self.execute(due, self.org, NOW + 1, 10).fetchall(), [])
        bundle = self.job_row(job, "bundle_sha256")[0]
        self.assertEqual(self.execute(query("retention/expiring"), self.org, 10).fetchall(),
                         [(job, self.org, bundle)])
        self.assertEqual(self.execute(query("retention/expiring_all"), 10).fetchall(), [(job, self.org, bundle)])
        # Final: not moved, not cleared; an expiring job is not held.
        for value in (NOW + 99, None):
            self.assertRefused(self.execute, "UPDATE archived_jobs SET expiring_at = ? WHERE id = ?", value, job,
                               message="job_expiry_is_final")
        self.assertEqual(self.hold(job), 0)
        self.assertRefused(self.execute, "UPDATE archived_jobs SET held_at = ?, held_by = 'x' WHERE id = ?",
                           NOW, job, message="job_expiry_is_final")

    def test_nothing_of_a_job_is_deleted_before_it_expires(self):
        run = self.w.evaluation_run(self.org)
        job = self.archived_job(run=run)
        result = self.w.one("SELECT id FROM test_results WHERE evaluation_run_id = ?", run)[0]
        self.assertRefused(self.execute, "DELETE FROM test_results WHERE id = ?", result,
                           message="evidence_run_in_custody")
        self.assertRefused(self.execute, "DELETE FROM evaluation_runs WHERE id = ?", run,
                           message="evidence_run_in_custody")
        self.assertRefused(self.execute, "DELETE FROM completion_evidence WHERE job_id = ?", job,
                           message="evidence_custody_is_permanent")
        self.assertRefused(self.delete_evidence, job, 10, message="evidence_run_in_custody")
        self.assertRefused(self.delete_job, job, message="evidence_run_in_custody")
        self.assertEqual(self.w.one("SELECT retention_deleted_jobs FROM organizations WHERE id = ?", self.org)[0], 0)
        # A run in no custody is the organization's to keep or delete.
        free = self.w.evaluation_run(self.org)
        self.execute("DELETE FROM evaluation_runs WHERE id = ?", free)

    def test_an_expiring_job_goes_with_its_evidence_in_bounded_batches_and_is_counted_once(self):
        run = self.w.evaluation_run(self.org)
        for _ in range(4):
            self.w.test_result(self.org, run)
        job = self.archived_job(run=run)
        other_run = self.w.evaluation_run(self.org)
        other = self.archived_job(run=other_run)
        other_before = (self.counts(other), self.w.one("SELECT count(*) FROM test_results"
                                                        " WHERE evaluation_run_id = ?", other_run)[0])
        self.assertEqual(self.expire(job), 1)
        # The run's rows first, at most `limit` a batch; then the rest in one batch.
        batches = []
        for _ in range(10):  # bounded: 5 test results at 2 a batch
            deleted = self.delete_evidence(job, 2)
            batches.append(deleted)
            if all(n < 2 for n in deleted):
                break
        self.assertEqual([b[0] for b in batches], [2, 2, 1])
        # The other job names the same requirements document: it stays.
        self.assertEqual(self.delete_job(job), [1, 1, 1, 1, 1, 1, 0])
        for table, key in (("jobs", "id"), ("archived_jobs", "id"), ("completion_evidence", "job_id")):
            self.assertEqual(self.w.one(f"SELECT count(*) FROM {table} WHERE {key} = ?", job)[0], 0)
        self.assertEqual(self.w.one("SELECT count(*) FROM evaluation_runs WHERE id = ?", run)[0], 0)
        self.assertEqual(self.w.one("SELECT retention_deleted_jobs FROM organizations WHERE id = ?", self.org)[0], 1)
        # Run again (a pass that stopped after the batch): nothing changes, nothing is counted.
        self.assertEqual(self.delete_evidence(job, 2), [0, 0, 0, 0])
        self.assertEqual(self.delete_job(job), [0, 0, 0, 0, 0, 0, 0])
        self.assertEqual(self.w.one("SELECT retention_deleted_jobs FROM organizations WHERE id = ?", self.org)[0], 1)
        # The other job, its run and its custody are untouched; every key holds.
        self.assertEqual((self.counts(other), self.w.one("SELECT count(*) FROM test_results"
                                                         " WHERE evaluation_run_id = ?", other_run)[0]),
                         other_before)
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])

    def test_a_job_row_goes_only_after_its_custody(self):
        job = self.archived_job()
        self.assertEqual(self.expire(job), 1)
        self.assertRefused(self.execute, query("retention/delete_job"), job, self.org,
                           message="job_delete_needs_expiry")

    def test_the_cron_pass_finds_each_organizations_due_jobs_by_its_own_cut(self):
        kept_long = self.w.org()
        self.execute("UPDATE organizations SET retention_days = 400 WHERE id = ?", kept_long)
        job = self.archived_job()  # self.org keeps 90 days
        due_all = query("retention/due_all")
        day = 86_400_000
        self.assertEqual(self.execute(due_all, NOW + 90 * day, 10).fetchall(), [])
        self.assertEqual(self.execute(due_all, NOW + 90 * day + 1, 10).fetchall(),
                         [(job, self.org, NOW + 1)])
        # A held job is not due; the limit holds.
        self.assertEqual(self.hold(job), 1)
        self.assertEqual(self.execute(due_all, NOW + 400 * day, 10).fetchall(), [])
        self.assertEqual(self.release(job), 1)
        self.assertEqual(self.execute(due_all, NOW + 400 * day, 0).fetchall(), [])

    def test_the_retention_reads_go_through_their_indexes(self):
        for _ in range(3):
            self.archived_job()
        # Each walks or searches its index (the cron's walk of every organization's, one
        # organization at a time; the expiring ones, which are only those being deleted).
        for name, params, step in (
                ("due_all", (NOW, 10), "SEARCH a USING INDEX archived_jobs_to_expire"),
                ("expiring_all", (10,), "SCAN a USING INDEX archived_jobs_expiring"),
                ("due", (self.org, NOW + 1, 10), "SEARCH a USING INDEX archived_jobs_to_expire"),
                ("expiring", (self.org, 10), "SEARCH a USING INDEX archived_jobs_expiring"),
                ("expire", ("job_1", self.org, NOW, NOW), "SEARCH archived_jobs USING INDEX sqlite_autoindex_archived_jobs_1"),
                ("drop_requirements", (self.org,), "SEARCH requirement_documents USING INDEX requirement_documents_unused")):
            plan = " ".join(query_plan(self.conn, query(f"retention/{name}"), params))
            self.assertIn(step, plan, name)
            self.assertNotIn("SCAN archived_jobs", plan, name)


class UsageTests(RetentionWorld):
    """Migration 0014: the counters the usage view reads follow every job through its life,
    and always equal a count of the jobs table (what the view must never do per call)."""

    def assertCounted(self, **expected):
        counted = self.counters()
        self.assertEqual(counted, self.recount())
        for name, value in expected.items():
            self.assertEqual(counted[name], value, name)

    def test_migration_0014_counts_what_each_organization_held_before_it(self):
        self.rebuild_before("0014")
        self.w.job(self.org)  # queued
        self.finished_job()  # finished, not archived
        held = self.archived_job()
        self.execute("UPDATE jobs SET held_at = ?, held_by = 'admin:key_1' WHERE id = ?", NOW, held)
        self.archived_job()
        self.assertEqual(self.expire(self.archived_job()), 1)
        empty = self.w.org()
        self.apply_from()
        self.assertCounted(jobs_live=2, jobs_archived=2, jobs_expiring=1, jobs_held=1,
                           r2_objects=6, r2_bytes=3 * 4096)
        self.assertEqual(self.counters(empty), dict.fromkeys(self.COUNTERS, 0))

    def test_every_organization_has_its_counters_from_the_start(self):
        other = self.w.org()
        self.assertEqual(self.counters(other), dict.fromkeys(self.COUNTERS, 0))

    def test_the_counters_follow_a_job_from_enqueue_to_deletion(self):
        self.assertCounted(jobs_live=0)
        job, head = self.finished_job()
        self.assertCounted(jobs_live=1, r2_objects=0)
        self.assertEqual(self.store(job, head), 1)
        self.assertCounted(jobs_live=1, r2_objects=2, r2_bytes=4096)
        self.assertEqual(self.hold(job), 1)
        self.assertCounted(jobs_held=1)
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.prune_batch(job, 500)):
                break
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])
        self.assertCounted(jobs_live=0, jobs_archived=1, jobs_held=1)
        # Applied only after a statement that changed its row: marked again, nothing moves.
        self.assertEqual(self.mark_pruned(job), [0, 0, 0, 0, 0])
        self.assertCounted(jobs_live=0, jobs_archived=1)
        self.assertEqual(self.release(job), 1)
        self.assertCounted(jobs_held=0)
        self.assertEqual(self.expire(job), 1)
        self.assertCounted(jobs_archived=0, jobs_expiring=1, r2_objects=2)
        self.assertEqual(self.delete_expiring_job(job)[DELETES_THE_JOB], 1)
        self.assertCounted(jobs_live=0, jobs_archived=0, jobs_expiring=0, r2_objects=0, r2_bytes=0)
        # Another organization's counters never moved.
        self.assertEqual(self.counters(self.w.org()), dict.fromkeys(self.COUNTERS, 0))

    def test_the_usage_read_counts_due_jobs_to_its_bound_through_indexes(self):
        jobs = [self.archived_job() for _ in range(3)]
        self.assertEqual(self.hold(jobs[0]), 1)
        read = query("usage/read")
        day = 86_400_000
        columns = ("jobs_live", "jobs_archived", "jobs_expiring", "jobs_held", "r2_objects", "r2_bytes",
                   "d1_bytes", "d1_quota_override", "retention_days", "retention_deleted_jobs", "cut",
                   "oldest_job_at", "due_at_cut")
        row = dict(zip(columns, self.execute(read, self.org, NOW + 90 * day + 1, 10_000).fetchone()))
        oldest = self.w.one("SELECT min(created_at) FROM archived_job_rows WHERE organization_id = ?", self.org)[0]
        self.assertEqual(row, {"jobs_live": 0, "jobs_archived": 3, "jobs_expiring": 0, "jobs_held": 1,
                               "r2_objects": 6, "r2_bytes": 3 * 4096, "d1_bytes": self.recount()["d1_bytes"],
                               "d1_quota_override": None, "retention_days": 90,
                               "retention_deleted_jobs": 0, "cut": NOW + 1, "oldest_job_at": oldest,
                               "due_at_cut": 2})
        # Not yet due a millisecond earlier; counted to the bound and no further.
        self.assertEqual(self.execute(read, self.org, NOW + 90 * day, 10_000).fetchone()[-1], 0)
        self.assertEqual(self.execute(read, self.org, NOW + 90 * day + 1, 1).fetchone()[-1], 1)
        self.assertIsNone(self.execute(read, "org_unknown", NOW, 10).fetchone())
        plan = " ".join(query_plan(self.conn, read, (self.org, NOW, 10)))
        for index in ("archived_jobs_to_expire", "jobs_by_organization", "archived_jobs_by_organization"):
            self.assertIn(index, plan)
        self.assertNotIn("SCAN jobs", plan)
        self.assertNotIn("SCAN archived_jobs", plan)


class QuotaTests(RetentionWorld):
    """Migration 0015: an organization's live D1 bytes are charged on the write path and bounded
    by its quota, to the byte; a refused charge leaves nothing of its batch behind."""

    def d1_bytes(self, org=None):
        return self.w.one("SELECT d1_bytes FROM organization_usage WHERE organization_id = ?",
                          org or self.org)[0]

    def enqueue_batch(self, release, job_input, quota):
        """A job's insert and its charge as one batch (the enqueue's); refused whole past the
        quota."""
        row = {"question": job_input}
        self.conn.execute("BEGIN")
        try:
            self.w.insert("jobs", {
                "id": self.w.uid("job"), "organization_id": self.org, "idempotency_key": self.w.uid("idem"),
                "intent_hash": H(row), "subject_kind": release["kind"],
                "subject_artifact_id": release["artifact_id"], "subject_version_id": release["version_id"],
                "subject_content_hash": release["content_hash"], "subject_environment": "prod",
                "input": stable_json(row), "input_hash": H(row), "requirements": "{}",
                "execution_kind": "agent", "runtime": "python3.12", "external": 0,
                "created_at": NOW, "updated_at": NOW})
            self.execute(query("usage/job_enqueued"), self.org, self.w.one("SELECT id FROM jobs WHERE rowid ="
                                                                          " last_insert_rowid()")[0],
                         JOB_ROW_BYTES, quota)
        except sqlite3.IntegrityError:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def test_a_charge_is_held_to_the_quota_to_the_byte_and_a_refused_batch_leaves_nothing(self):
        release = self.w.release(self.org)
        cost = JOB_ROW_BYTES + len(stable_json({"question": "q"}).encode()) + len(b"{}")
        at = self.d1_bytes()
        jobs = lambda: self.w.one("SELECT count(*) FROM jobs")[0]
        before = jobs()
        # One byte past the quota: refused, and nothing of the batch is left.
        self.assertRefused(self.enqueue_batch, release, "q", at + cost - 1, message="organization_quota_exceeded")
        self.assertEqual((self.d1_bytes(), jobs()), (at, before))
        # Exactly at it: taken, charged to the byte.
        self.enqueue_batch(release, "q", at + cost)
        self.assertEqual((self.d1_bytes(), jobs()), (at + cost, before + 1))
        self.assertEqual(self.d1_bytes(), self.recount()["d1_bytes"])
        # And the next is refused.
        self.assertRefused(self.enqueue_batch, release, "q", at + cost, message="organization_quota_exceeded")

    def test_the_organizations_own_quota_wins_and_freeing_is_never_refused(self):
        job, _ = self.finished_job()
        at = self.d1_bytes()
        charge = query("usage/charge")

        def touch():  # a write that changed one row, as every charge follows
            self.execute("UPDATE jobs SET updated_at = updated_at WHERE id = ?", job)

        # The organization's own quota, not the deployment's default, bounds it.
        self.execute("UPDATE organizations SET d1_quota_bytes = ? WHERE id = ?", at + 10, self.org)
        touch()
        self.assertEqual(self.execute(charge, self.org, 10, 1 << 40).rowcount, 1)
        touch()
        self.assertRefused(self.execute, charge, self.org, 1, 1 << 40, message="organization_quota_exceeded")
        # Lowered below what is held: every charge is refused, freeing goes on.
        self.execute("UPDATE organizations SET d1_quota_bytes = 1 WHERE id = ?", self.org)
        self.execute("UPDATE organization_usage SET d1_bytes = d1_bytes - 100 WHERE organization_id = ?", self.org)
        self.assertEqual(self.d1_bytes(), at - 90)
        # Without one of its own, the default the charge names holds.
        self.execute("UPDATE organizations SET d1_quota_bytes = NULL WHERE id = ?", self.org)
        touch()
        self.assertRefused(self.execute, charge, self.org, 1, at - 90, message="organization_quota_exceeded")
        touch()
        self.assertEqual(self.execute(charge, self.org, 1, at - 89).rowcount, 1)
        # After a write that changed nothing, a charge does nothing.
        self.execute("UPDATE jobs SET updated_at = updated_at WHERE id = 'job_none'")
        self.assertEqual(self.execute(charge, self.org, 5, 1 << 40).rowcount, 0)
        self.assertEqual(self.d1_bytes(), at - 89)

    def test_pruning_frees_a_jobs_chunks_and_deleting_frees_its_row(self):
        base = self.d1_bytes()
        job, head = self.finished_job(chunks=4)
        chunks = self.w.one("SELECT coalesce(sum(? + length(CAST(payload AS BLOB))), 0) FROM stream_chunks"
                            " WHERE job_id = ?", CHUNK_ROW_BYTES, job)[0]
        row = self.w.one("SELECT ? + length(CAST(input AS BLOB)) + length(CAST(requirements AS BLOB))"
                         " FROM jobs WHERE id = ?", JOB_ROW_BYTES, job)[0]
        grown = self.d1_bytes() - base
        self.assertGreaterEqual(grown, chunks + row)  # and its release
        self.assertEqual(self.store(job, head), 1)
        for _ in range(10):  # bounded
            if all(n == 0 for n in self.prune_batch(job, 500)):
                break
        before_prune = self.d1_bytes()
        job_input = self.w.one("SELECT length(CAST(input AS BLOB)) FROM jobs WHERE id = ?", job)[0]
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])
        # Its chunks, its input and its live row's excess over the archived row it moved to.
        self.assertEqual(self.d1_bytes(), before_prune - chunks - job_input - (JOB_ROW_BYTES - ARCHIVED_JOB_BYTES))
        archived_row = self.w.one("SELECT ? + length(CAST(requirements AS BLOB)) FROM archived_job_rows"
                                  " WHERE id = ?", ARCHIVED_JOB_BYTES, job)[0]
        self.assertEqual(self.expire(job), 1)
        for _ in range(10):
            if all(n == 0 for n in self.delete_evidence(job, 500)):
                break
        before_delete = self.d1_bytes()
        self.assertEqual(self.delete_job(job)[DELETES_THE_JOB], 1)
        self.assertEqual(self.d1_bytes(), before_delete - archived_row)

    def test_evidence_is_charged_by_its_text_and_freed_when_its_job_is_marked(self):
        run = self.w.evaluation_run(self.org, metadata='{"k":"v"}')
        at = self.d1_bytes()
        self.w.test_result(self.org, run, name="x" * 100)
        self.assertEqual(self.d1_bytes() - at, 256 + 100)
        self.w.trace(self.org, run, name="t", spans='[{"a":1}]')
        self.assertEqual(self.d1_bytes() - at, 256 + 100 + 256 + 1 + len('[{"a":1}]'))
        # Past the quota: refused whole.
        self.execute("UPDATE organizations SET d1_quota_bytes = ? WHERE id = ?", self.d1_bytes() + 256 + 9,
                     self.org)
        self.conn.execute("BEGIN")
        self.assertRefused(self.w.test_result, self.org, run, name="y" * 10, message="organization_quota_exceeded")
        self.conn.execute("ROLLBACK")
        self.w.test_result(self.org, run, name="y" * 9)
        self.execute("UPDATE organizations SET d1_quota_bytes = NULL WHERE id = ?", self.org)
        # Taken into a job's custody, then marked: freed whole.
        job = self.archived_job(run=run)
        before = self.d1_bytes()
        run_bytes = sum(self.w.one(f"SELECT coalesce(sum(bytes), 0) FROM {view} WHERE evaluation_run_id = ?", run)[0]
                        for view in ("evaluation_run_bytes", "test_result_bytes", "cost_record_bytes",
                                     "model_call_bytes", "trace_bytes"))
        self.assertEqual(self.expire(job), 1)
        self.assertEqual(self.d1_bytes(), before - run_bytes)
        self.assertEqual(self.d1_bytes(), self.recount()["d1_bytes"])

    def test_the_charges_read_through_indexes(self):
        run = self.w.evaluation_run(self.org)
        self.w.test_result(self.org, run)
        for statement, params in ((query("usage/evidence_added"), (self.org, "test_result", "tr_1", 1)),
                                  (query("usage/evidence_freed"), (self.org, "job_1"))):
            plan = " ".join(query_plan(self.conn, statement, params))
            for table in ("evaluation_runs", "test_results", "cost_records", "model_calls", "traces"):
                self.assertNotIn(f"SCAN {table}", plan, plan)

    def test_migration_0015_counts_what_each_organization_held_before_it(self):
        self.rebuild_before("0015")
        self.finished_job(chunks=3)
        self.w.job(self.org)
        self.apply_from()
        expected = self.recount()["d1_bytes"]
        self.assertGreater(expected, 0)
        self.assertEqual(self.d1_bytes(), expected)
