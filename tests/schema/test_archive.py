"""Archive on finish, archived jobs (migration 0018) and their run's custody (migration 0019).

Run from the repository root: python3 -m unittest discover -s tests/schema
"""

import sqlite3
import unittest

from harness import *  # noqa: F401,F403 (the world and the statements every suite uses)


class ArchiveTests(ArchiveWorld):
    def test_no_row_of_a_job_goes_before_its_archive_is_stored(self):
        _, _, live, live_claim = self.claimed_job(org=self.org, runner=self.runner)
        self.w.stream(live, live_claim, 1, 2)
        finished, _ = self.finished_job()
        for job in (live, finished):
            for table, message in (("stream_chunks", "stream_chunks_are_immutable"),
                                   ("job_completions", "job_completions_are_append_only"),
                                   ("job_events", "job_events_are_append_only"),
                                   ("job_claims", "claim_is_over")):
                if not self.w.one(f"SELECT count(*) FROM {table} WHERE job_id = ?", job)[0]:
                    continue
                with self.subTest(job=job, table=table):
                    self.assertRefused(self.execute, f"DELETE FROM {table} WHERE job_id = ?", job, message=message)
            with self.subTest(job=job, batch="prune"):
                self.assertRefused(self.prune_batch, job, 500)
        # Custody never goes, archived or not.
        self.assertRefused(self.execute, "DELETE FROM completion_evidence WHERE job_id = ?", finished,
                           message="evidence_custody_is_permanent")

    def test_only_a_finished_job_is_stored_and_only_with_its_whole_summary(self):
        _, _, live, claim = self.claimed_job(org=self.org, runner=self.runner)
        self.assertEqual(self.store(live, None), 0)  # the statement's guard: not finished
        self.assertRefused(self.execute, "UPDATE jobs SET archive_state = 'stored', bundle_sha256 = ?,"
                           " bundle_bytes = 1, stream_chunks = 0, stream_bytes = 0,"
                           " archived_at = ? WHERE id = ?", sha("b"), NOW, live,
                           message="job_archive_incomplete")
        job, head = self.finished_job()
        for missing in ("bundle_sha256", "bundle_bytes", "stream_chunks", "stream_bytes", "archived_at"):
            with self.subTest(missing=missing):
                self.assertRefused(self.execute, f"UPDATE jobs SET archive_state = 'stored', {missing} = NULL"
                                   " WHERE id = ?", job, message="job_archive_incomplete")
        # A stream head exactly when the stream has chunks.
        self.assertRefused(self.store, job, None, message="job_archive_incomplete")
        self.assertRefused(self.store, job, head, chunks=0, message="job_archive_incomplete")
        # A summary without its stage is refused too; a stage the schema does not know is.
        self.assertRefused(self.execute, "UPDATE jobs SET bundle_sha256 = ? WHERE id = ?", sha("b"), job,
                           message="job_archive_is_final")
        self.assertRefused(self.execute, "UPDATE jobs SET archive_state = 'archived', bundle_sha256 = ?,"
                           " bundle_bytes = 1, stream_chunks = 5, stream_bytes = 1,"
                           " stream_head = ?, archived_at = ? WHERE id = ?", sha("b"), head, NOW, job,
                           message="CHECK constraint failed")
        for column, bad, stream_head in (("bundle", "ABC", head), ("bundle", sha("b").upper(), head),
                                         ("bytes", 0, head), ("chunks", -1, None), ("stream_bytes", -1, head)):
            with self.subTest(column=column):
                self.assertRefused(self.store, job, stream_head, **{column: bad}, message="CHECK constraint failed")
        self.assertRefused(self.store, job, "x" * 64, message="CHECK constraint failed")
        self.assertEqual(self.store(job, head), 1)
        self.assertEqual(self.w.one("SELECT archive_state, stream_head FROM jobs WHERE id = ?", job),
                         ("stored", head))

    def test_the_store_is_guarded_by_the_decisions_its_bundle_was_read_with(self):
        job, head = self.finished_job()
        stored = self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job)[0]
        # A decision recorded after the bundle was read (stored, or counted on the row).
        self.assertEqual(self.store(job, head, completions=stored - 1), 0)
        self.assertEqual(self.store(job, head, unstored=1), 0)
        self.assertEqual(self.w.one("SELECT archive_state FROM jobs WHERE id = ?", job)[0], None)
        self.assertEqual(self.store(job, head), 1)
        # Storing again changes nothing (the stage guard), and the summary is final.
        self.assertEqual(self.store(job, head), 0)
        self.assertRefused(self.execute, "UPDATE jobs SET bundle_bytes = 1 WHERE id = ?", job,
                           message="job_archive_is_final")
        self.assertRefused(self.execute, "UPDATE jobs SET archive_state = NULL WHERE id = ?", job,
                           message="job_archive_is_final")

    def test_a_stored_job_is_pruned_in_bounded_batches_down_to_its_row_and_custody(self):
        job, head = self.finished_job(chunks=7)
        other, _ = self.finished_job()
        other_before = self.counts(other)
        before = self.counts(job)
        self.assertEqual(before, {"stream_chunks": 9, "job_completions": 2, "job_events": before["job_events"],
                                  "job_claims": 2, "completion_evidence": 2})
        self.assertGreater(before["job_events"], 3)
        self.assertEqual(self.store(job, head), 1)
        # Not pruned while anything is left.
        self.assertRefused(self.execute, query("archive_mark_pruned"), job, self.org, *MARK_PRUNED_ARGS, message="job_rows_remain")
        limit = 3
        batches = []
        for _ in range(20):  # bounded: 9 chunks at 3 a batch need 3 full batches and a short one
            deleted = self.prune_batch(job, limit)
            batches.append(deleted)
            if all(n < limit for n in deleted):  # archive::after_prune_batch
                break
        self.assertTrue(all(n <= limit for b in batches for n in b), batches)
        self.assertEqual(batches[0], [3, 2, 3, 0])  # claims wait for what names them
        self.assertEqual(sum(b[0] for b in batches), 9)
        self.assertEqual(sum(b[3] for b in batches), 2)
        self.assertEqual(self.execute(query("archive_mark_pruned"), job, self.org, *MARK_PRUNED_ARGS).rowcount, 1)
        self.assertEqual(self.counts(job), {"stream_chunks": 0, "job_completions": 0, "job_events": 0,
                                            "job_claims": 0, "completion_evidence": 2})
        # Running a step twice changes nothing: a batch finds nothing, the stage is pruned.
        self.assertEqual(self.prune_batch(job, limit), [0, 0, 0, 0])
        self.assertEqual(self.execute(query("archive_mark_pruned"), job, self.org, *MARK_PRUNED_ARGS).rowcount, 0)
        self.assertEqual(self.store(job, head, completions=0), 0)
        self.assertEqual(self.w.one("SELECT archive_state FROM jobs WHERE id = ?", job)[0], "pruned")
        self.assertRefused(self.execute, "UPDATE jobs SET archive_state = 'stored' WHERE id = ?", job,
                           message="job_archive_is_final")
        # Another job of the organization is untouched, and every key still holds.
        self.assertEqual(self.counts(other), other_before)
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])

    def test_statements_are_scoped_to_the_jobs_organization(self):
        job, head = self.finished_job()
        stranger = self.w.org()
        completions = self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job)[0]
        self.assertEqual(self.execute(query("archive_store"), job, stranger, sha("b"), 1, 5,
                                      10, head, NOW, completions, 0, *STORE_ARGS).rowcount, 0)
        self.assertEqual(self.store(job, head), 1)
        for sql in PRUNE_STATEMENTS:
            with self.subTest(sql=sql):
                self.assertEqual(self.execute(sql, job, stranger, 500).rowcount, 0)
        self.assertEqual(self.execute(query("archive_mark_pruned"), job, stranger, *MARK_PRUNED_ARGS).rowcount, 0)

    def test_an_archived_job_takes_no_new_rows_but_counts_late_decisions(self):
        job, head = self.finished_job()
        claim = self.w.one("SELECT id FROM job_claims WHERE job_id = ? AND dispatch_attempt = 2", job)[0]
        self.assertEqual(self.store(job, head), 1)
        late = self.w.completion_row(job, claim, self.runner, 2, decision="duplicate", final_stream_checksum=head)
        self.assertRefused(self.w.insert, "job_completions", late, message="job_is_archived")
        self.assertRefused(self.w.insert, "job_events", {
            "organization_id": self.org, "job_id": job, "actor": "runner:" + self.runner,
            "type": "job.completion_duplicate", "at": NOW}, message="job_is_archived")
        # The row's counters still move: that is how a late decision is recorded.
        self.execute("UPDATE jobs SET unstored_decisions = unstored_decisions + 1, last_unstored_checksum = ?,"
                     " last_unstored_decision = 'duplicate', last_unstored_at = ? WHERE id = ?",
                     late["completion_checksum"], NOW + 5, job)
        self.assertEqual(self.w.one("SELECT unstored_decisions, archive_state FROM jobs WHERE id = ?", job),
                         (1, "stored"))
        # Events without a job (the audit trail) are still written.
        self.w.insert("job_events", {"organization_id": self.org, "runner_id": self.runner,
                                     "actor": "system:reaper", "type": "runner.drained", "at": NOW})

    def test_custody_outlives_the_completion_row(self):
        job, head = self.finished_job(run=self.run)
        self.assertEqual(self.store(job, head), 1)
        for _ in range(10):
            if all(n < 500 for n in self.prune_batch(job, 500)):
                break
        self.assertEqual(self.execute(query("archive_mark_pruned"), job, self.org, *MARK_PRUNED_ARGS).rowcount, 1)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_completions WHERE evaluation_run_id = ?",
                                    self.run)[0], 0)
        # The run is still in custody: no row joins it, and no other completion takes it.
        for add in (self.w.test_result, self.w.cost_record, self.w.model_call, self.w.trace):
            with self.subTest(add=add.__name__):
                self.assertRefused(add, self.org, self.run, message="evidence_run_in_custody")
        _, _, other, other_claim = self.claimed_job(org=self.org, runner=self.runner)
        self.assertRefused(self.w.complete, other, other_claim, self.runner, 1, evaluation_run_id=self.run,
                           message="UNIQUE constraint failed: completion_evidence")
        held = self.conn.execute(query("evidence_holder"),
                                 (self.org, json.dumps([["evaluation_run", self.run]]))).fetchall()
        self.assertEqual(held, [("evaluation_run", self.run, job)])

    def test_the_archive_pass_finds_due_jobs_oldest_first_through_its_index(self):
        first, head_first = self.finished_job(lost_attempt=False)
        second, _ = self.finished_job(lost_attempt=False)
        self.execute("UPDATE jobs SET finished_at = ? WHERE id = ?", NOW - 10, second)
        _, _, live, _ = self.claimed_job(org=self.org, runner=self.runner)
        due = self.execute(query("archive_due"), NOW, 10).fetchall()
        self.assertEqual([row[0] for row in due], [second, first])
        self.assertEqual(due[0][1:], (self.org, "succeeded", NOW - 10, None))
        self.assertEqual([r[0] for r in self.execute(query("archive_due"), NOW - 1, 10).fetchall()], [second])
        self.assertEqual(len(self.execute(query("archive_due"), NOW, 1).fetchall()), 1)
        # A stored job stays due until it is pruned.
        self.assertEqual(self.store(first, head_first), 1)
        self.assertEqual([r[4] for r in self.execute(query("archive_due"), NOW, 10).fetchall()],
                         [None, "stored"])
        plan = " ".join(query_plan(self.conn, query("archive_due"), (NOW, 10)))
        self.assertIn("jobs_to_archive", plan)
        self.assertNotIn("TEMP B-TREE", plan)

    def test_deleting_a_claim_looks_up_what_names_it_by_index(self):
        # SQLite checks each foreign key naming a deleted claim with these lookups.
        for sql, index in (("SELECT 1 FROM job_events WHERE claim_id = ?", "job_events_by_claim"),
                           ("SELECT 1 FROM jobs WHERE active_claim_id = ?", "jobs_by_active_claim"),
                           ("SELECT 1 FROM stream_chunks WHERE claim_id = ? AND job_id = ? AND dispatch_attempt = ?",
                            "sqlite_autoindex_stream_chunks_1"),
                           # By its job, or (migration 0020) by its runner: a few rows either way,
                           # both pruned with the job's archive.
                           ("SELECT 1 FROM job_completions WHERE claim_id = ? AND job_id = ? AND dispatch_attempt = ?"
                            " AND runner_id = ?", ("job_completions_by_job", "job_completions_by_runner"))):
            with self.subTest(index=index):
                params = (None,) * sql.count("?")
                plan = " ".join(query_plan(self.conn, sql, params))
                self.assertTrue(any(name in plan for name in ((index,) if isinstance(index, str) else index)),
                                plan)
                self.assertNotIn("SCAN", plan)
        for sql in PRUNE_STATEMENTS:
            with self.subTest(statement=sql):
                self.assertNotIn("SCAN", " ".join(query_plan(self.conn, sql, ("j", "o", 500))))

    def test_migration_0010_keeps_every_custody_row_and_the_runs_in_custody(self):
        before = [p for p in MIGRATIONS if os.path.basename(p) < "0010"]
        archive = next(p for p in MIGRATIONS if os.path.basename(p).startswith("0010"))
        conn = open_database(before)
        w = World(conn)
        org = w.org()
        runner = w.runner(org, max_concurrent_jobs=5)
        run = w.evaluation_run(org)
        job = w.job(org)
        claim = w.grant(job, runner)
        head = w.stream(job, claim, 1, 2)
        w.complete(job, claim, runner, 1, final_stream_checksum=head, evaluation_run_id=run,
                   evidence=[("test_result", w.test_result(org, run)), ("cost_record", w.cost_record(org, run))])
        custody = conn.execute("SELECT * FROM completion_evidence ORDER BY rowid").fetchall()
        self.assertEqual(len(custody), 3)

        apply_migration(conn, archive)

        self.assertEqual(conn.execute("SELECT * FROM completion_evidence ORDER BY rowid").fetchall(), custody)
        self.assertEqual(conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        self.assertEqual(conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'kept_%'").fetchall(), [])
        self.assertRaises(sqlite3.IntegrityError, w.test_result, org, run)
        self.assertEqual(conn.execute("SELECT archive_state FROM jobs WHERE id = ?", (job,)).fetchone(), (None,))
        conn.close()


class ArchivedJobTests(RetentionWorld):
    """A pruned job's row moves to archived_jobs in its prune's last batch, and every read of a
    job (by id, by key, by page, by state) finds it there as it was."""


    def pruned_in_jobs(self, **job_overrides):
        """A finished job stored and pruned down to its row, not yet marked: its row as the
        reads gave it before the move."""
        job, head = self.finished_job(**job_overrides)
        self.assertEqual(self.store(job, head), 1)
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.prune_batch(job, 500)):
                break
        return job

    def test_a_pruned_job_moves_whole_and_reads_as_it_was(self):
        job = self.pruned_in_jobs()
        # A late decision counted on the row before the move, and an admin's hold, move with it.
        self.execute(query("jobs/count_unstored_decision"), job, "duplicate", sha("late"), NOW + 3)
        self.assertEqual(self.hold(job), 1)
        before = self.w.one(f"SELECT {JOB_ROW} FROM jobs WHERE id = ?", job)
        summary = self.w.one(f"SELECT {ARCHIVE_SUMMARY} FROM jobs WHERE id = ?", job)
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])
        self.assertEqual(self.w.one("SELECT count(*) FROM jobs WHERE id = ?", job)[0], 0)
        reads = {
            "jobs/select_job": (job,),
            "jobs/by_idempotency_key": (self.org, before[2]),
        }
        for name, params in reads.items():
            self.assertEqual(self.execute(query(name), *params).fetchall(), [before], name)
        # The admin's read adds the artifact's name (last), from the artifact's row.
        name = self.w.one("SELECT name FROM release_artifacts WHERE id = ?", before[5])[0]
        self.assertEqual(self.execute(query("jobs/get"), self.org, job).fetchall(), [before + (name,)])
        self.assertEqual(self.execute(query("archive/row"), job).fetchall(),
                         [summary[:3] + ("pruned",) + summary[4:]])
        self.assertEqual(self.execute(query("archive/row_in_org"), self.org, job).fetchall(),
                         [summary[:3] + ("pruned",) + summary[4:]])
        self.assertEqual(self.execute(query("jobs/select_found"), self.org, job).fetchall(),
                         [(before[11], before[12])])
        # Another organization finds nothing of it.
        other = self.w.org()
        for name, params in (("jobs/get", (other, job)), ("jobs/by_idempotency_key", (other, before[2])),
                             ("archive/row_in_org", (other, job)), ("jobs/select_found", (other, job))):
            self.assertEqual(self.execute(query(name), *params).fetchall(), [], name)
        # An archived job holds no claim and no lease: the commit's assertion knows it so.
        self.execute(query("assert_job_as_known"), job, before[11], before[12], None, None)
        for args in ((job, before[11], before[12] + 1, None, None), (job, before[11], before[12], None, NOW),
                     (job, "running", before[12], None, None)):
            self.assertRefused(self.execute, query("assert_job_as_known"), *args, message="job_moved")

    def test_late_decisions_count_on_the_archived_row(self):
        job = self.archived_job()
        self.assertEqual(self.execute(query("jobs/count_unstored_decision_archived"), job, "stale",
                                      sha("late"), NOW + 9).rowcount, 1)
        self.assertEqual(self.job_row(job, "unstored_decisions, last_unstored_checksum,"
                                           " last_unstored_decision, last_unstored_at"),
                         (1, sha("late"), "stale", NOW + 9))
        # Nothing else of it changes, by the statements or by hand.
        for column, value in (("state", "failed"), ("bundle_bytes", 1), ("idempotency_key", "other"),
                              ("created_at", 1), ("requirements_id", 99)):
            with self.subTest(column=column):
                self.assertRefused(self.execute, f"UPDATE archived_jobs SET {column} = ? WHERE id = ?", value, job,
                                   message="archived_job_is_final")

    def test_only_a_pruned_job_moves_and_its_key_stays_taken(self):
        live = self.w.job(self.org)
        number = self.w.one("SELECT number FROM organization_numbers WHERE organization_id = ?", self.org)[0]
        # Not pruned: the move does nothing, and a hand-made archived row is refused.
        self.assertEqual(self.mark_pruned(live), [0, 0, 0, 0, 0])
        by_hand = lambda name: query(f"archive/move_{name}").replace("j.archive_state = ?3", "?3 = ?3")
        self.execute(by_hand("requirements"), live, self.org, *MOVE_ARGS["requirements"])
        self.assertRefused(self.execute, by_hand("job"), live, self.org, *MOVE_ARGS["job"],
                           message="archived_job_needs_a_pruned_job")
        self.assertRefused(self.execute, "DELETE FROM jobs WHERE id = ?", live,
                           message="job_delete_needs_the_archived_row")
        job = self.archived_job()
        key = self.job_row(job, "idempotency_key")[0]
        # Its key and id name no new job.
        self.assertRefused(self.w.job, self.org, idempotency_key=key, message="job_idempotency_key_taken")
        self.assertRefused(self.w.job, self.org, id=job, message="job_id_taken")
        self.w.job(self.w.org(), idempotency_key=key)  # another organization's own key
        # Not deleted before it expires; its document not while it is named.
        self.assertRefused(self.execute, "DELETE FROM archived_jobs WHERE id = ?", job,
                           message="job_delete_needs_expiry")
        self.assertRefused(self.execute, "DELETE FROM requirement_documents WHERE organization_number = ?",
                           number, message="requirement_document_is_named")

    def test_requirements_are_kept_once_per_document_of_an_organization(self):
        plain = self.archived_job()
        same = self.archived_job()
        tagged = self.archived_job(requirements=stable_json({"executionKind": "agent", "runtime": "python3.12",
                                                             "tags": ["gpu"]}))
        documents = lambda: self.conn.execute(
            "SELECT document, jobs FROM requirement_documents ORDER BY jobs DESC").fetchall()
        self.assertEqual(documents(), [('{"executionKind":"agent","runtime":"python3.12"}', 2),
                                       ('{"executionKind":"agent","runtime":"python3.12","tags":["gpu"]}', 1)])
        self.assertEqual(self.job_row(tagged, "requirements")[0],
                         '{"executionKind":"agent","runtime":"python3.12","tags":["gpu"]}')
        # Deleted with the last job that names it.
        for job, left in ((plain, [1, 1]), (tagged, [1]), (same, [])):  # counts, most first
            self.assertEqual(self.expire(job), 1)
            self.assertEqual(self.delete_expiring_job(job)[DELETES_THE_JOB], 1)
            self.assertEqual([n for _, n in documents()], left, job)

    def test_pages_and_counts_read_both_tables_in_order_without_overlap(self):
        archived = [self.archived_job() for _ in range(3)]
        live = [self.w.job(self.org, created_at=NOW + n) for n in range(3)]
        self.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, cancel_reason = 'x' WHERE id = ?",
                     NOW, live[0])
        everything = [r[0] for r in self.execute(
            f"SELECT id, created_at FROM jobs WHERE organization_id = ?1 UNION ALL"
            f" SELECT id, created_at FROM archived_job_rows WHERE organization_id = ?1"
            f" ORDER BY created_at DESC, id DESC", self.org)]
        self.assertEqual(sorted(everything), sorted(archived + live))
        seen, cursor = [], (2**53, "~")
        for _ in range(10):  # bounded: 6 jobs in pages of 4
            rows = self.execute(query("jobs_page"), self.org, *cursor, 4).fetchall()
            if not rows:
                break
            seen += [r[0] for r in rows]
            cursor = (rows[-1][17], rows[-1][0])
        self.assertEqual(seen, everything)
        in_state = self.execute(query("jobs_page_in_state"), self.org, 2**53, "~", "succeeded", 10).fetchall()
        self.assertEqual(sorted(r[0] for r in in_state), sorted(archived))
        self.assertEqual(dict(self.execute(query("job_state_counts"), self.org).fetchall()),
                         {"succeeded": 3, "cancelled": 1, "queued": 2})

    def test_migration_0018_moves_every_pruned_job_and_keeps_the_counts(self):
        self.rebuild_before("0018")
        self.w.job(self.org)  # queued
        self.finished_job()  # finished, not archived
        held = self.archived_job()
        self.assertEqual(self.hold(held), 1)
        rows = {job: self.w.one(f"SELECT {JOB_ROW} FROM jobs WHERE id = ?", job)
                for job in (held, self.archived_job())}
        expiring = self.archived_job()
        self.assertEqual(self.expire(expiring), 1)
        self.apply_from()
        self.assertEqual(self.w.one("SELECT count(*) FROM jobs WHERE archive_state = 'pruned'")[0], 0)
        self.assertEqual(self.w.one("SELECT count(*) FROM archived_jobs")[0], 3)
        for job, row in rows.items():
            self.assertEqual(self.execute(query("jobs/get"), self.org, job).fetchall()[0][:-1], row)
        self.assertEqual(self.execute(query("jobs/get"), self.org, expiring).fetchall(), [])
        self.assertEqual(self.counters(), self.recount())
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        # And the expiring one goes on to its deletion.
        self.assertEqual(self.delete_expiring_job(expiring)[DELETES_THE_JOB], 1)


class ArchivedCustodyTests(RetentionWorld):
    """Migration 0019: an archived job holds the run its completion took into custody in its
    own row, and every check and read of that custody finds it there as it found the custody
    row before."""

    pruned_in_jobs = ArchivedJobTests.pruned_in_jobs

    def custody_reads(self, job, run):
        """What the service reads of a job's custody: the job's evidence, the holder of its
        run, the run with its holder."""
        wanted = json.dumps([["evaluation_run", run], ["test_result", "tr_none"]])
        return {
            "jobs/evidence": self.execute(query("jobs/evidence"), self.org, job).fetchall(),
            "evidence_holder": self.execute(query("evidence_holder"), self.org, wanted).fetchall(),
            "evidence/get_run": self.execute(query("evidence/get_run"), self.org, run).fetchall(),
        }

    def test_the_move_carries_the_runs_custody_into_the_archived_row_and_reads_as_before(self):
        run = self.w.evaluation_run(self.org)
        job = self.pruned_in_jobs(run=run)
        custody = self.w.one("SELECT evidence_id, completion_id, attached_at FROM completion_evidence"
                             " WHERE job_id = ? AND evidence_kind = 'evaluation_run'", job)
        self.assertEqual(custody[0], run)
        before = self.custody_reads(job, run)
        self.assertEqual(before["evidence_holder"], [("evaluation_run", run, job)])
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])
        self.assertEqual(self.w.one("SELECT custody_run_id, custody_completion_id, custody_attached_at"
                                    " FROM archived_jobs WHERE id = ?", job), custody)
        # The run's custody row went; the test result's (evidence named besides the run) stays.
        self.assertEqual(self.execute("SELECT evidence_kind FROM completion_evidence WHERE job_id = ?",
                                      job).fetchall(), [("test_result",)])
        self.assertEqual(self.custody_reads(job, run), before)
        # Another organization reads none of it.
        other = self.w.org()
        self.assertEqual(self.execute(query("jobs/evidence"), other, job).fetchall(), [])
        self.assertEqual(self.execute(query("evidence_holder"), other,
                                      json.dumps([["evaluation_run", run]])).fetchall(), [])

    def test_a_run_an_archived_job_holds_is_final_and_taken(self):
        run = self.w.evaluation_run(self.org)
        job = self.archived_job(run=run)
        result = self.w.one("SELECT id FROM test_results WHERE evaluation_run_id = ?", run)[0]
        # Nothing of the run changes: no new rows, none deleted, the run stays.
        self.assertRefused(self.w.test_result, self.org, run, message="evidence_run_in_custody")
        self.assertRefused(self.execute, "DELETE FROM test_results WHERE id = ?", result,
                           message="evidence_run_in_custody")
        self.assertRefused(self.execute, "DELETE FROM evaluation_runs WHERE id = ?", run,
                           message="evidence_run_in_custody")
        # The hold is final.
        for change in ("custody_run_id = NULL, custody_completion_id = NULL, custody_attached_at = NULL",
                       "custody_attached_at = custody_attached_at + 1"):
            self.assertRefused(self.execute, f"UPDATE archived_jobs SET {change} WHERE id = ?", job,
                               message="archived_job_is_final")
        # Another job's completion naming the run is refused: its batch leaves nothing behind.
        other = self.w.job(self.org)
        claim = self.w.grant(other, self.runner)
        head = self.w.stream(other, claim, 1, 1)
        rows_before = self.counts(other)
        self.assertRefused(self.w.complete, other, claim, self.runner, 1, final_stream_checksum=head,
                           evaluation_run_id=run, message="evidence_run_held_by_archived_job")
        self.assertEqual(self.counts(other), rows_before)
        # Once expiring, its evidence goes; the archived row last, and only once the run went.
        self.assertEqual(self.expire(job), 1)
        for _ in range(10):  # bounded: one test result at 500 a batch
            if all(n == 0 for n in self.delete_evidence(job, 500)):
                break
        self.execute(query("retention/delete_custody"), job, self.org)
        self.assertRefused(self.execute, "DELETE FROM archived_jobs WHERE id = ?", job,
                           message="job_delete_needs_expiry")
        self.assertEqual(self.delete_job(job)[DELETES_THE_JOB], 1)
        self.assertEqual(self.w.one("SELECT count(*) FROM evaluation_runs WHERE id = ?", run)[0], 0)

    def test_a_moving_job_takes_exactly_the_custody_its_completion_took(self):
        job = self.pruned_in_jobs()
        move = query("archive/move_job")
        taken = "ce.evidence_id, ce.completion_id, ce.attached_at"
        self.assertIn(taken, move)
        stranger = self.w.evaluation_run(self.org)
        for wrong in ("NULL, NULL, NULL", f"'{stranger}', ce.completion_id, ce.attached_at",
                      "ce.evidence_id, ce.completion_id, ce.attached_at + 1"):
            self.conn.execute("BEGIN")
            try:
                self.execute(query("archive_mark_pruned"), job, self.org, *MARK_PRUNED_ARGS)
                self.execute(query("archive/move_requirements"), job, self.org, *MOVE_ARGS["requirements"])
                self.assertRefused(self.execute, move.replace(taken, wrong), job, self.org, *MOVE_ARGS["job"],
                                   message="archived_job_takes_its_runs_custody")
            finally:
                self.conn.execute("ROLLBACK")
        # A custody row goes only with the move that carries it.
        self.assertRefused(self.execute, "DELETE FROM completion_evidence WHERE job_id = ?"
                           " AND evidence_kind = 'evaluation_run'", job,
                           message="evidence_custody_is_permanent")
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])

    def test_the_reads_by_run_ask_the_index_of_runs_held(self):
        for name, params in (("evidence_holder", ("o", '[["evaluation_run", "r"]]')),
                             ("evidence/get_run", ("o", "r"))):
            plan = query_plan(self.conn, query(name), params)
            held = [d for d in plan if d.startswith(("SEARCH a ", "SCAN a"))]
            self.assertEqual(held, ["SEARCH a USING INDEX archived_jobs_by_custody_run (custody_run_id=?)"]
                             if name == "evidence_holder" else
                             ["SEARCH a USING INDEX archived_jobs_by_custody_run (custody_run_id=?) LEFT-JOIN"],
                             " | ".join(plan))

    def test_a_job_whose_completion_took_no_run_moves_holding_none(self):
        job = self.pruned_in_jobs()
        # As a job archived before custody was taken would be (written past its guards).
        self.execute("DROP TRIGGER completion_evidence_is_permanent_delete")
        self.execute("DELETE FROM completion_evidence WHERE job_id = ?", job)
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 0, 1])
        self.assertEqual(self.w.one("SELECT custody_run_id, custody_completion_id, custody_attached_at"
                                    " FROM archived_jobs WHERE id = ?", job), (None, None, None))
        self.assertEqual(self.execute(query("jobs/evidence"), self.org, job).fetchall(), [])

    def test_migration_0019_moves_the_runs_archived_jobs_hold(self):
        self.rebuild_before("0019")
        runs = [self.w.evaluation_run(self.org) for _ in range(3)]
        live, _ = self.finished_job(run=runs[0])
        archived = self.archived_job(run=runs[1])
        expiring = self.archived_job(run=runs[2])
        self.assertEqual(self.expire(expiring), 1)
        custody = {job: self.w.one("SELECT evidence_id, completion_id, attached_at FROM completion_evidence"
                                   " WHERE job_id = ? AND evidence_kind = 'evaluation_run'", job)
                   for job in (live, archived, expiring)}
        self.apply_from()
        self.assertEqual(self.w.one("SELECT count(*) FROM completion_evidence"
                                    " WHERE evidence_kind = 'evaluation_run'")[0], 1)
        for job in (archived, expiring):
            self.assertEqual(self.w.one("SELECT custody_run_id, custody_completion_id, custody_attached_at"
                                        " FROM archived_jobs WHERE id = ?", job), custody[job])
        for job, run in ((live, runs[0]), (archived, runs[1]), (expiring, runs[2])):
            reads = self.custody_reads(job, run)
            self.assertEqual(reads["evidence_holder"], [("evaluation_run", run, job)])
            self.assertEqual(reads["evidence/get_run"][0][6:], (custody[job][1], job, custody[job][2]))
            self.assertIn(("evaluation_run", run, custody[job][1]), reads["jobs/evidence"])
        self.assertEqual(self.counters(), self.recount())
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        # The expiring one goes on to its deletion, run and all; the other's run stays held.
        self.assertEqual(self.delete_expiring_job(expiring)[DELETES_THE_JOB], 1)
        self.assertEqual(self.w.one("SELECT count(*) FROM evaluation_runs WHERE id = ?", runs[2])[0], 0)
        self.assertRefused(self.execute, "DELETE FROM evaluation_runs WHERE id = ?", runs[1],
                           message="evidence_run_in_custody")
