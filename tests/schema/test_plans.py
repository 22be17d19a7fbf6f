"""Query plans of the service's statements, per-job bounds, batch assertions, claim request ids.

Run from the repository root: python3 -m unittest discover -s tests/schema
"""

import sqlite3
import unittest

from harness import *  # noqa: F401,F403 (the world and the statements every suite uses)


class QueryPlanTests(SchemaTest):
    # The service's own statements, read from the files the worker compiles in, so that the
    # plans checked here are the plans that run.
    CLAIM_QUERY = (QUERIES / "claim_candidates.sql").read_text()
    REAPER_QUERY = (QUERIES / "expired_leases.sql").read_text()
    ORG_REAPER_QUERY = (QUERIES / "expired_leases_in_org.sql").read_text()

    def populate(self):
        # Some rows in every state, so that the plans are not about an empty table.
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=50)
        for _ in range(5):
            self.w.job(org)
        for _ in range(3):
            self.claimed_job(org=org, runner=runner)
        return org

    def index_on(self, table, columns):
        """The name of the index on exactly `columns` (SQLite names UNIQUE constraints' itself)."""
        for _, name, *_ in self.conn.execute(f"PRAGMA index_list({table})").fetchall():
            cols = tuple(r[2] for r in self.conn.execute(f"PRAGMA index_info({name})").fetchall())
            if cols == tuple(columns):
                return name
        self.fail(f"no index on {table}{tuple(columns)}")

    def assertUsesIndex(self, sql, params, index):
        if isinstance(index, tuple):
            index = self.index_on(*index)
        plan = query_plan(self.conn, sql, params)
        text = " | ".join(plan)
        self.assertTrue(any(f"USING INDEX {index} " in d or f"USING COVERING INDEX {index} " in d
                            or d.endswith(f"INDEX {index}") for d in plan), text)
        self.assertFalse(any(d.startswith("SCAN") for d in plan), text)
        self.assertFalse(any("TEMP B-TREE" in d for d in plan), text)

    def assertMergesRanges(self, sql, params, indexes):
        """A read of jobs and archived_jobs (migration 0018): a range of each of `indexes`, and
        nothing scanned or sorted but what those bounded ranges gave (each arm's page, at most
        its LIMIT; the jobs made in one millisecond, whose ids order them; a GROUP BY's states)."""
        plan = query_plan(self.conn, sql, params)
        text = " | ".join(plan)
        for index in indexes:
            self.assertTrue(any(f"INDEX {index} (" in d for d in plan), (index, text))
        for d in plan:
            if d.startswith("SCAN"):
                self.assertTrue(d.startswith("SCAN (subquery-"), text)
            if "TEMP B-TREE" in d:
                self.assertIn(d, ("USE TEMP B-TREE FOR ORDER BY", "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY",
                                  "USE TEMP B-TREE FOR GROUP BY"), text)

    def test_claim_matching_query_uses_the_queue_index_without_scan_or_sort(self):
        org = self.populate()
        first_page = (org, "agent", "python3.12", 0, -(2**62), "", 8)
        self.assertUsesIndex(self.CLAIM_QUERY, first_page, "jobs_queue")
        cursor = self.conn.execute(self.CLAIM_QUERY, first_page)
        created_at = [d[0] for d in cursor.description].index("created_at")
        rows = cursor.fetchall()
        self.assertEqual(len(rows), 5)  # the queued ones, not the claimed ones
        # The next page starts after the cursor (keyset pagination), still on the index.
        cursor = (org, "agent", "python3.12", 0, rows[1][created_at], rows[1][0], 8)
        self.assertUsesIndex(self.CLAIM_QUERY, cursor, "jobs_queue")
        self.assertEqual([r[0] for r in self.conn.execute(self.CLAIM_QUERY, cursor)], [r[0] for r in rows[2:]])

    def test_reaper_expired_lease_query_uses_the_lease_index(self):
        self.populate()
        self.assertUsesIndex(self.REAPER_QUERY, (NOW + LEASE_MS, 100), "jobs_lease_expiry")
        self.assertEqual(len(self.conn.execute(self.REAPER_QUERY, (NOW + LEASE_MS, 100)).fetchall()), 3)

    def test_organization_reaper_query_uses_its_lease_index(self):
        org = self.populate()
        self.assertUsesIndex(self.ORG_REAPER_QUERY, (org, NOW + LEASE_MS, 100), "jobs_lease_expiry_by_organization")

    # The panel's lists (migrations/0002_panel_reads.sql): keyset pages, never scan and sort.
    JOBS_PAGE = (QUERIES / "jobs_page.sql").read_text()
    JOBS_PAGE_IN_STATE = (QUERIES / "jobs_page_in_state.sql").read_text()
    JOB_STATE_COUNTS = (QUERIES / "job_state_counts.sql").read_text()
    RUNNERS_PAGE = (QUERIES / "runners_page.sql").read_text()
    RUNNER_CLAIMS = (QUERIES / "runner_claims.sql").read_text()
    RUNNER_STATE_COUNTS = (QUERIES / "runner_state_counts.sql").read_text()
    STREAM_PAGE = (QUERIES / "stream_page.sql").read_text()
    PAST_EVERY_JOB = (2**53 - 1, "~")

    def test_jobs_pages_walk_newest_first_on_the_index_without_overlap(self):
        org = self.populate()
        for n in range(4):
            self.w.job(org, created_at=NOW + 1000 + n)
        expected = [r[0] for r in self.execute(
            "SELECT id FROM jobs WHERE organization_id = ? ORDER BY created_at DESC, id DESC", org)]
        self.assertEqual(len(expected), 12)
        seen, cursor = [], self.PAST_EVERY_JOB
        for _ in range(10):  # bounded: 12 jobs in pages of 5
            params = (org, *cursor, 5)
            self.assertMergesRanges(self.JOBS_PAGE, params, ("jobs_by_organization", "archived_jobs_by_organization"))
            rows = self.execute(self.JOBS_PAGE, *params).fetchall()
            if not rows:
                break
            seen += [r[0] for r in rows]
            cursor = (rows[-1][17], rows[-1][0])  # created_at, id
        self.assertEqual(seen, expected)

    def test_jobs_page_of_one_state_uses_the_state_index(self):
        org = self.populate()
        params = (org, *self.PAST_EVERY_JOB, "queued", 50)
        self.assertMergesRanges(self.JOBS_PAGE_IN_STATE, params, ("jobs_by_organization_state", "archived_jobs_by_state"))
        rows = self.execute(self.JOBS_PAGE_IN_STATE, *params).fetchall()
        self.assertEqual(len(rows), 5)
        self.assertTrue(all(r[11] == "queued" for r in rows))

    def test_job_state_counts_read_only_the_covering_index(self):
        org = self.populate()
        self.assertMergesRanges(self.JOB_STATE_COUNTS, (org,), ("jobs_by_organization_state", "archived_jobs_by_state"))
        plan = " | ".join(query_plan(self.conn, self.JOB_STATE_COUNTS, (org,)))
        self.assertIn("COVERING INDEX jobs_by_organization_state", plan)
        self.assertIn("COVERING INDEX archived_jobs_by_state", plan)
        counts = dict(self.execute(self.JOB_STATE_COUNTS, org).fetchall())
        self.assertEqual(counts, {"queued": 5, "claimed": 3})

    def test_runners_pages_walk_registration_order_on_the_index(self):
        org = self.w.org()
        ids = [self.w.runner(org, registered_at=NOW + n // 2) for n in range(5)]  # ties on time
        expected = [r[0] for r in self.execute(
            "SELECT id FROM runners WHERE organization_id = ? ORDER BY registered_at, id", org)]
        self.assertEqual(sorted(expected), sorted(ids))
        seen, cursor = [], (-(2**62), "")
        for _ in range(10):
            params = (org, *cursor, 2)
            self.assertUsesIndex(self.RUNNERS_PAGE, params, "runners_page_order")
            rows = self.execute(self.RUNNERS_PAGE, *params).fetchall()
            if not rows:
                break
            seen += [r[0] for r in rows]
            cursor = (rows[-1][25], rows[-1][0])  # registered_at, id
        self.assertEqual(seen, expected)

    ARTIFACTS_PAGE = (QUERIES / "artifacts_page.sql").read_text()
    RUNNER_ACTIVE_CLAIMS = (QUERIES / "runner_active_claims.sql").read_text()

    def test_artifact_pages_walk_newest_first_on_the_index(self):
        org = self.w.org()
        for n in range(3):
            self.w.insert("release_artifacts", {"id": f"art_{n}", "organization_id": org,
                                                "kind": "prompt", "name": f"a{n}", "created_at": NOW + n})
        for params in [(org, None, None, None, 2), (org, "prompt", NOW + 2, "art_2", 2)]:
            plan = " | ".join(query_plan(self.conn, self.ARTIFACTS_PAGE, params))
            self.assertIn("release_artifacts_page_order", plan)
            self.assertNotIn("TEMP B-TREE", plan, "a page is a walk of the index, not a sort")
        first = [r[0] for r in self.execute(self.ARTIFACTS_PAGE, org, None, None, None, 2)]
        rest = [r[0] for r in self.execute(self.ARTIFACTS_PAGE, org, None, NOW + 1, "art_1", 2)]
        self.assertEqual((first, rest), (["art_2", "art_1"], ["art_0"]))

    def test_a_runners_held_claims_are_a_range_of_its_claim_index(self):
        org = self.populate()
        runner = self.execute("SELECT runner_id FROM job_claims WHERE state = 'active' LIMIT 1").fetchone()[0]
        params = (org, runner, 1000, "active")
        self.assertUsesIndex(self.RUNNER_ACTIVE_CLAIMS, params, "job_claims_by_runner")
        rows = self.execute(self.RUNNER_ACTIVE_CLAIMS, *params).fetchall()
        self.assertTrue(rows and all(r[3] == "active" for r in rows), rows)

    def test_runner_counts_read_one_organizations_range(self):
        org, other = self.w.org(), self.w.org()
        self.w.runner(org, max_concurrent_jobs=3)
        self.w.runner(org, max_concurrent_jobs=2)
        self.w.runner(other, max_concurrent_jobs=7)
        # A range of the organization's entries; grouping its few states needs a small temp
        # b-tree (at most five groups), which is fine: what must never happen is a scan.
        # (organization_id, state) serves the range and the grouping: no scan, no temp b-tree.
        plan = query_plan(self.conn, self.RUNNER_STATE_COUNTS, (org,))
        self.assertTrue(any(d.startswith("SEARCH runners USING INDEX runners_by_organization_state") for d in plan), plan)
        self.assertFalse(any(d.startswith("SCAN") or "TEMP B-TREE" in d for d in plan), plan)
        rows = self.execute(self.RUNNER_STATE_COUNTS, org).fetchall()
        self.assertEqual(rows, [("active", 2, 0, 5)])

    def test_runner_claims_come_newest_first_from_their_index(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=50)
        for _ in range(3):
            self.claimed_job(org=org, runner=runner)
        params = (org, runner, 50)
        self.assertUsesIndex(self.RUNNER_CLAIMS, params, "job_claims_by_runner_issued")
        self.assertEqual(len(self.execute(self.RUNNER_CLAIMS, *params).fetchall()), 3)

    def test_stream_page_reads_the_key_range_and_stops_at_its_byte_budget(self):
        org, _, job, claim = self.claimed_job()
        previous = None
        for sequence in range(6):
            payload = {"lines": [{"stream": "stdout", "line": "x" * 1000}]}
            previous = self.w.append(self.w.chunk(job, claim, 1, sequence, previous, payload=payload))
        plan = " | ".join(query_plan(self.conn, self.STREAM_PAGE, (org, job, 0, -1, 1, 3, 100, 10**6)))
        self.assertIn("SEARCH stream_chunks USING INDEX sqlite_autoindex_stream_chunks_1", plan)
        self.assertNotIn("SCAN stream_chunks", plan)

        def page(after, limit, budget):
            return self.execute(self.STREAM_PAGE, org, job, *after, 1, 3, limit, budget).fetchall()

        everything = page((0, -1), 100, 10**6)
        self.assertEqual([r[1] for r in everything], list(range(6)))
        self.assertEqual({r[10] for r in everything}, {6})  # page_rows: the range held six
        # After a cursor, only what follows it.
        self.assertEqual([r[1] for r in page((1, 3), 100, 10**6)], [4, 5])
        # A budget of 2.5 chunks' bytes: chunks start while the bytes before them are under it,
        # so three come back, and page_rows says the range held more.
        size = len(everything[0][5].encode())
        cut = page((0, -1), 100, int(size * 2.5))
        self.assertEqual([r[1] for r in cut], [0, 1, 2])
        self.assertEqual(cut[0][10], 6)
        # The first chunk always comes, whatever the budget, so a reader always moves forward.
        self.assertEqual([r[1] for r in page((0, -1), 100, 1)], [0])
        # And the limit bounds the range read.
        self.assertEqual([r[1] for r in page((0, -1), 2, 10**6)], [0, 1])

    def test_service_lookups_use_an_index(self):
        self.populate()
        lookups = [
            ("api key by hash", "SELECT id, organization_id, role, scopes FROM api_keys"
             " WHERE key_hash = ? AND revoked_at IS NULL", ("h",), ("api_keys", ("key_hash",))),
            ("runner by fingerprint", "SELECT id, state FROM runners WHERE fingerprint = ?", ("fp",),
             ("runners", ("fingerprint",))),
            ("runner by key", "SELECT id FROM runners WHERE organization_id = ? AND runner_key = ?",
             ("o", "k"), ("runners", ("organization_id", "runner_key"))),
            ("runners of an organization", "SELECT id FROM runners WHERE organization_id = ?"
             " ORDER BY registered_at LIMIT 50", ("o",), "runners_page_order"),
            ("challenge by hash", "SELECT id, runner_id, expires_at, consumed_at FROM runner_challenges"
             " WHERE challenge_hash = ?", ("h",), ("runner_challenges", ("challenge_hash",))),
            ("credentials of a runner", "SELECT id FROM runner_credentials WHERE runner_id = ?"
             " AND credential_generation < ?", ("r", 3), "runner_credentials_by_runner"),
            ("job by idempotency key", "SELECT id, intent_hash FROM jobs WHERE organization_id = ?"
             " AND idempotency_key = ?", ("o", "k"), ("jobs", ("organization_id", "idempotency_key"))),
            ("jobs of an organization", "SELECT id FROM jobs WHERE organization_id = ?"
             " ORDER BY created_at DESC, id DESC LIMIT 50", ("o",), "jobs_by_organization"),
            ("active claims of a runner", "SELECT id, job_id FROM job_claims WHERE runner_id = ?"
             " AND state = 'active'", ("r",), "job_claims_by_runner"),
            ("claims of a runner", "SELECT id FROM job_claims WHERE runner_id = ? ORDER BY state, issued_at",
             ("r",), "job_claims_by_runner"),
            ("claims of a job", "SELECT id FROM job_claims WHERE job_id = ? ORDER BY dispatch_attempt",
             ("j",), ("job_claims", ("job_id", "dispatch_attempt"))),
            ("active claim of a job", "SELECT id FROM job_claims WHERE job_id = ? AND state = 'active'",
             ("j",), "job_claims_one_active_per_job"),
            ("events of a job", "SELECT * FROM job_events WHERE job_id = ? ORDER BY id", ("j",),
             "job_events_by_job"),
            ("events of a runner", "SELECT * FROM job_events WHERE runner_id = ? AND organization_id = ?"
             " ORDER BY id", ("r", "o"), "job_events_by_runner"),
            ("audit of an organization", "SELECT * FROM job_events WHERE organization_id = ?"
             " ORDER BY id DESC LIMIT 100", ("o",), "job_events_by_organization"),
            ("stream head", "SELECT sequence, checksum FROM stream_chunks WHERE job_id = ?"
             " AND dispatch_attempt = ? ORDER BY sequence DESC LIMIT 1", ("j", 1),
             ("stream_chunks", ("job_id", "dispatch_attempt", "sequence"))),
            ("chunks of a job", "SELECT * FROM stream_chunks WHERE job_id = ? ORDER BY dispatch_attempt, sequence",
             ("j",), ("stream_chunks", ("job_id", "dispatch_attempt", "sequence"))),
            ("completions of a job", "SELECT * FROM job_completions WHERE job_id = ? ORDER BY received_at",
             ("j",), "job_completions_by_job"),
            ("accepted completion of a job", "SELECT * FROM job_completions WHERE job_id = ?"
             " AND decision = 'accepted'", ("j",), "job_completions_one_accepted_per_job"),
            ("custody of a job", "SELECT * FROM completion_evidence WHERE job_id = ?", ("j",),
             "completion_evidence_by_job"),
            ("targets of an evaluation", "SELECT * FROM executable_targets WHERE organization_id = ?"
             " AND evaluation_id = ? ORDER BY created_at LIMIT 50", ("o", "e"),
             "executable_targets_by_evaluation"),
            ("versions of an artifact", "SELECT id FROM release_versions WHERE artifact_id = ? ORDER BY id",
             ("a",), "release_versions_by_artifact"),
            ("test results of a run", "SELECT id FROM test_results WHERE evaluation_run_id = ?", ("r",),
             "test_results_by_run"),
            ("cost records of a run", "SELECT id FROM cost_records WHERE evaluation_run_id = ?", ("r",),
             "cost_records_by_run"),
            ("model calls of a run", "SELECT id FROM model_calls WHERE evaluation_run_id = ?", ("r",),
             "model_calls_by_run"),
            ("traces of a run", "SELECT id FROM traces WHERE evaluation_run_id = ?", ("r",), "traces_by_run"),
            ("runs of an organization", "SELECT id FROM evaluation_runs WHERE organization_id = ?"
             " ORDER BY created_at DESC LIMIT 50", ("o",), "evaluation_runs_by_organization"),
            ("evidence of a job", "SELECT * FROM completion_evidence WHERE job_id = ?", ("j",),
             "completion_evidence_by_job"),
            # Migration 0019: an archived job holds its run in its row; the guards ask by run.
            ("archived holder of a run", "SELECT 1 FROM archived_jobs WHERE custody_run_id = ?"
             " AND expiring_at IS NULL", ("r",), "archived_jobs_by_custody_run"),
            ("api keys of an organization", "SELECT id, name, key_prefix FROM api_keys WHERE organization_id = ?"
             " ORDER BY created_at", ("o",), "api_keys_by_organization"),
            ("challenges of a runner", "SELECT id FROM runner_challenges WHERE runner_id = ?"
             " ORDER BY issued_at DESC LIMIT 5", ("r",), "runner_challenges_by_runner"),
            ("expired challenges to purge", "SELECT id FROM runner_challenges WHERE expires_at < ? LIMIT 500",
             (NOW,), "runner_challenges_by_expiry"),
            ("expired credentials to purge", "SELECT id FROM runner_credentials WHERE expires_at < ? LIMIT 500",
             (NOW,), "runner_credentials_by_expiry"),
        ]
        for name, sql, params, index in lookups:
            with self.subTest(name):
                self.assertUsesIndex(sql, params, index)


class JobBoundsTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org, self.runner, self.job, self.claim = self.claimed_job()

    def fake_stream(self, count, payload_bytes=2):
        """`count` chained chunks of one attempt written in one statement (fake checksums, exact
        running totals), as a head to append after; returns the last checksum."""
        self.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)"
            " INSERT INTO stream_chunks (job_id, organization_id, claim_id, dispatch_attempt, sequence, kind,"
            "   previous_checksum, payload, payload_hash, checksum, emitted_at, received_at, stream_bytes)"
            " SELECT ?, ?, ?, 1, i, 'log', CASE WHEN i = 0 THEN NULL ELSE printf('%064x', i) END,"
            "   '\"' || substr(hex(zeroblob(?)), 1, ? - 2) || '\"', printf('%064x', 0), printf('%064x', i + 1),"
            "   '2026-05-28T07:00:00Z', ?, (i + 1) * ? FROM n",
            count, self.job, self.org, self.claim, payload_bytes, payload_bytes, NOW, payload_bytes,
        )
        return "%064x" % count

    def test_each_chunk_carries_its_attempts_exact_running_byte_total(self):
        c0 = self.w.append(self.chunk(0, None))
        wrong = self.w.chunk(self.job, self.claim, 1, 1, c0)
        wrong["stream_bytes"] += 1
        self.assertRefused(self.w.append, wrong, message="stream_bytes_miscounted")
        row = self.w.chunk(self.job, self.claim, 1, 1, c0)
        self.w.append(row)
        first = len(stable_json({"message": "line 0"}).encode())
        self.assertEqual(row["stream_bytes"], first + len(row["payload"].encode()))

    def chunk(self, sequence, previous, **kw):
        return self.w.chunk(self.job, self.claim, 1, sequence, previous, **kw)

    def test_an_attempt_holds_at_most_ten_thousand_chunks(self):
        last = self.fake_stream(MAX_CHUNKS_PER_ATTEMPT - 1)
        last = self.w.append(self.chunk(MAX_CHUNKS_PER_ATTEMPT - 1, last))
        self.assertRefused(self.w.append, self.chunk(MAX_CHUNKS_PER_ATTEMPT, last), message="stream_chunk_limit")

    def test_an_attempt_holds_at_most_64_mib_of_payload(self):
        chunk_bytes = 256 * 1024
        last = self.fake_stream(MAX_STREAM_BYTES_PER_ATTEMPT // chunk_bytes, payload_bytes=chunk_bytes)
        total = self.w.one("SELECT max(stream_bytes) FROM stream_chunks WHERE job_id = ?", self.job)[0]
        self.assertEqual(total, MAX_STREAM_BYTES_PER_ATTEMPT)
        self.assertRefused(self.w.append, self.chunk(MAX_STREAM_BYTES_PER_ATTEMPT // chunk_bytes, last,
                                                      payload={}), message="stream_bytes_limit")

    def test_refused_decisions_are_stored_up_to_twenty_per_job_then_counted_on_the_job(self):
        self.w.complete(self.job, self.claim, self.runner, 1)
        for n in range(MAX_STORED_REFUSALS):
            self.w.insert("job_completions", self.w.completion_row(
                self.job, self.claim, self.runner, 1, decision="conflict", status="failed",
                completed_at=f"2026-05-28T07:01:{n:02d}Z"))
        extra = self.w.completion_row(self.job, self.claim, self.runner, 1, decision="duplicate")
        self.assertRefused(self.w.insert, "job_completions", extra, message="completion_decisions_at_cap")
        self.execute("UPDATE jobs SET unstored_decisions = unstored_decisions + 1, last_unstored_checksum = ?,"
                     " last_unstored_decision = 'duplicate', last_unstored_at = ? WHERE id = ?",
                     extra["completion_checksum"], NOW, self.job)
        self.assertEqual(self.w.one("SELECT unstored_decisions, last_unstored_checksum FROM jobs WHERE id = ?",
                                    self.job), (1, extra["completion_checksum"]))
        self.assertRefused(self.execute, "UPDATE jobs SET last_unstored_decision = 'accepted' WHERE id = ?",
                           self.job, message="CHECK constraint failed")


# =============================================================================================
# Batch assertions (migration 0007): what a warm job object's one write asserts
# =============================================================================================


class BatchAssertionTests(SchemaTest):
    # The statements the job object sends, read from the files the worker compiles in.
    CREDENTIAL = (QUERIES / "assert_credential_current.sql").read_text()
    CREDENTIAL_READ = (QUERIES / "credential_current.sql").read_text()
    JOB_AS_KNOWN = (QUERIES / "assert_job_as_known.sql").read_text()

    def heartbeat(self, job, claim, runner, generation, state="claimed", now=NOW + 1_000, lease_check=True):
        """A warm heartbeat's batch: both assertions, then the write they guard."""
        return [
            (self.CREDENTIAL, (runner, self.w.one("SELECT organization_id FROM runners WHERE id = ?", runner)[0],
                               generation, AUTHENTICATING_STATES)),
            (self.JOB_AS_KNOWN, (job, state, 1, claim, now if lease_check else None)),
            ("UPDATE jobs SET lease_expires_at = ?, updated_at = ? WHERE id = ?", (now + LEASE_MS, now, job)),
        ]

    def lease(self, job):
        return self.w.job_row(job)[3]

    def test_a_batch_whose_assertions_hold_commits_and_stores_nothing_for_them(self):
        org, runner, job, claim = self.claimed_job()
        batch(self.conn, self.heartbeat(job, claim, runner, 1))
        self.assertEqual(self.lease(job), NOW + 1_000 + LEASE_MS)
        self.assertEqual(self.execute("SELECT count(*) FROM batch_assertions").fetchone()[0], 0)

    def test_a_moved_credential_generation_aborts_the_whole_batch(self):
        org, runner, job, claim = self.claimed_job()
        before = self.lease(job)
        self.execute("UPDATE runners SET credential_generation = 2 WHERE id = ?", runner)  # a rotation
        self.assertRefused(batch, self.conn, self.heartbeat(job, claim, runner, 1), message="credential_revoked")
        self.assertEqual(self.lease(job), before)
        # The new generation passes.
        batch(self.conn, self.heartbeat(job, claim, runner, 2))

    def test_a_revoked_runner_fails_the_credential_assertion_at_its_own_generation(self):
        org, runner, job, claim = self.claimed_job()
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, runner)
        self.assertRefused(batch, self.conn, self.heartbeat(job, claim, runner, 1), message="credential_revoked")

    def test_the_credential_assertion_is_scoped_to_the_organization(self):
        org, runner, job, claim = self.claimed_job()
        other = self.w.org()
        statements = self.heartbeat(job, claim, runner, 1)
        statements[0] = (self.CREDENTIAL, (runner, other, 1, AUTHENTICATING_STATES))
        self.assertRefused(batch, self.conn, statements, message="credential_revoked")

    def test_the_credential_read_agrees_with_the_assertion(self):
        org, runner, job, claim = self.claimed_job()
        self.assertEqual(self.execute(self.CREDENTIAL_READ, runner, org, 1, AUTHENTICATING_STATES).fetchall(), [(1,)])
        self.assertEqual(self.execute(self.CREDENTIAL_READ, runner, org, 2, AUTHENTICATING_STATES).fetchall(), [])
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, runner)
        self.assertEqual(self.execute(self.CREDENTIAL_READ, runner, org, 1, AUTHENTICATING_STATES).fetchall(), [])

    def test_the_credential_statements_pass_exactly_the_states_that_may_authenticate(self):
        # A key pair awaiting approval (a bootstrap runner is never pending): no row, no pass.
        org = self.w.org()
        pending = self.w.keypair_runner(org, state="pending_approval")
        self.assertNotIn("pending_approval", json.loads(AUTHENTICATING_STATES))
        self.assertEqual(self.execute(self.CREDENTIAL_READ, pending, org, 1, AUTHENTICATING_STATES).fetchall(), [])
        self.assertRefused(batch, self.conn, [(self.CREDENTIAL, (pending, org, 1, AUTHENTICATING_STATES))],
                           message="credential_revoked")
        org, runner, job, claim = self.claimed_job()
        for state in ("active", "draining", "lost", "revoked"):
            self.execute("UPDATE runners SET state = ?, revoked_at = ? WHERE id = ?",
                         state, NOW if state == "revoked" else None, runner)
            passes = state in json.loads(AUTHENTICATING_STATES)
            read = self.execute(self.CREDENTIAL_READ, runner, org, 1, AUTHENTICATING_STATES).fetchall()
            self.assertEqual(read, [(1,)] if passes else [], state)
            if passes:
                batch(self.conn, self.heartbeat(job, claim, runner, 1))
            else:
                self.assertRefused(batch, self.conn, self.heartbeat(job, claim, runner, 1),
                                   message="credential_revoked")
            if state == "revoked":
                break  # permanent (runners_revocation_is_permanent); it is the last state

    def test_a_job_not_as_its_object_knew_it_aborts_the_batch(self):
        org, runner, job, claim = self.claimed_job()
        before = self.lease(job)
        # Another state, attempt or claim than the object believed.
        for state, attempt, held in (("running", 1, claim), ("claimed", 2, claim), ("claimed", 1, None)):
            statements = self.heartbeat(job, claim, runner, 1)
            statements[1] = (self.JOB_AS_KNOWN, (job, state, attempt, held, NOW + 1_000))
            self.assertRefused(batch, self.conn, statements, message="job_moved")
        self.assertEqual(self.lease(job), before)

    def test_a_lease_moved_into_the_past_in_d1_aborts_a_batch_that_relied_on_it(self):
        org, runner, job, claim = self.claimed_job()
        self.execute("UPDATE jobs SET lease_expires_at = ? WHERE id = ?", NOW, job)
        self.assertRefused(batch, self.conn, self.heartbeat(job, claim, runner, 1, now=NOW), message="job_moved")
        # A decision that did not rely on the lease is not held to it.
        batch(self.conn, self.heartbeat(job, claim, runner, 1, now=NOW, lease_check=False))

    def test_an_unknown_assertion_code_aborts(self):
        self.assertRefused(
            batch, self.conn, [("INSERT INTO batch_assertions (code, held) VALUES ('credential_revokd', 1)", ())],
            message="unknown_batch_assertion")

    RUNNER_AS_KNOWN = (QUERIES / "assert_runner_as_known.sql").read_text()

    def test_an_admin_change_decided_from_a_moved_runner_state_aborts_whole(self):
        org = self.w.org()
        runner = self.w.runner(org)
        tags = ("UPDATE runners SET tags = '[\"gpu\"]', updated_at = ? WHERE id = ? AND organization_id = ?",
                (NOW, runner, org))
        # A revocation landed between the change's read (active) and its write.
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, runner)
        self.assertRefused(batch, self.conn, [(self.RUNNER_AS_KNOWN, (runner, org, "active")), tags],
                           message="runner_moved")
        self.assertEqual(self.w.one("SELECT tags FROM runners WHERE id = ?", runner)[0], "[]")
        # Control: decided from the state the runner is in, the same batch commits.
        other = self.w.runner(org)
        batch(self.conn, [(self.RUNNER_AS_KNOWN, (other, org, "active")),
                          (tags[0], (NOW, other, org))])
        self.assertEqual(self.w.one("SELECT tags FROM runners WHERE id = ?", other)[0], '["gpu"]')


# =============================================================================================
# Claim request ids (migration 0008): a retried claim finds the claim it was granted
# =============================================================================================


class ClaimRequestIdTests(SchemaTest):
    CLAIM_BY_REQUEST = (QUERIES / "claim_by_request.sql").read_text()

    def granted_with(self, org, runner, request_id):
        job = self.w.job(org)
        claim = self.w.grant(job, runner)
        self.execute("UPDATE job_claims SET request_id = ? WHERE id = ?", request_id, claim)
        return job, claim

    def test_a_retried_request_finds_its_active_claim_and_only_that(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job, claim = self.granted_with(org, runner, "req-1")
        rows = self.execute(self.CLAIM_BY_REQUEST, runner, "req-1").fetchall()
        self.assertEqual([r[0] for r in rows], [claim])
        self.assertEqual(self.execute(self.CLAIM_BY_REQUEST, runner, "req-2").fetchall(), [])
        other = self.w.runner(org)
        self.assertEqual(self.execute(self.CLAIM_BY_REQUEST, other, "req-1").fetchall(), [])

    def test_a_request_id_is_unique_among_the_runners_active_claims_only(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=5)
        job, claim = self.granted_with(org, runner, "req-1")
        self.assertRefused(self.granted_with, org, runner, "req-1", message="UNIQUE")
        # Another runner may use the same key.
        self.granted_with(org, self.w.runner(org), "req-1")
        # Once the claim ended, the key asks for a new job like any other claim.
        self.execute("UPDATE job_claims SET state = 'released', ended_at = ? WHERE id = ?", NOW, claim)
        self.execute("UPDATE jobs SET state = 'queued', active_claim_id = NULL, lease_expires_at = NULL"
                     " WHERE id = ?", job)
        self.granted_with(org, runner, "req-1")
        self.assertEqual(len(self.execute(self.CLAIM_BY_REQUEST, runner, "req-1").fetchall()), 1)

    def test_a_request_id_is_a_short_plain_token(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=5)
        for bad in ("", "has space", "a" * 65, "emoji-\u00e9"):
            with self.subTest(bad=bad):
                self.assertRefused(self.granted_with, org, runner, bad, message="CHECK")
        self.granted_with(org, runner, "A1" * 30 + ".:_-")
