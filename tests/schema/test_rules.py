"""The schema's rules: the migrations themselves, enum CHECKs, the enrollment policy, runners, secrets.

Run from the repository root: python3 -m unittest discover -s tests/schema
"""

import sqlite3
import unittest

from harness import *  # noqa: F401,F403 (the world and the statements every suite uses)
from harness import _update


# =============================================================================================
# The migration itself
# =============================================================================================


class MigrationTests(SchemaTest):
    def test_migrations_apply_in_order_with_foreign_keys_enforced(self):
        self.assertTrue(MIGRATIONS, "no migrations/*.sql found")
        self.assertEqual(os.path.basename(MIGRATIONS[0]), "0001_init.sql")
        self.assertEqual(self.execute("PRAGMA foreign_keys").fetchone()[0], 1)
        self.assertEqual(self.execute("PRAGMA foreign_key_check").fetchall(), [])
        self.assertEqual(self.execute("PRAGMA integrity_check").fetchone()[0], "ok")

    def test_migrations_hold_no_pragma_or_top_level_transaction(self):
        # D1 runs each migration in its own transaction and refuses most PRAGMAs (the one it
        # documents for migrations, defer_foreign_keys, is allowed); BEGIN/END are only allowed
        # as the body delimiters of CREATE TRIGGER.
        for path in MIGRATIONS:
            with open(path, encoding="utf-8") as f:
                text = re.sub(r"--[^\n]*", "", f.read())
            text = re.sub(r"(?im)^\s*PRAGMA defer_foreign_keys = on;", "", text)
            with self.subTest(migration=os.path.basename(path)):
                self.assertIsNone(re.search(r"(?im)^\s*PRAGMA\b", text))
                self.assertIsNone(re.search(r"(?im)\bBEGIN\s+(TRANSACTION|IMMEDIATE|EXCLUSIVE|DEFERRED)\b", text))
                self.assertIsNone(re.search(r"(?im)\bBEGIN\s*;", text))
                self.assertIsNone(re.search(r"(?im)\b(COMMIT|ROLLBACK|END\s+TRANSACTION)\s*;", text))


    def test_the_hand_back_rebuild_keeps_every_row_and_every_foreign_key(self):
        # 0006 rebuilds jobs, job_claims, job_events and job_completions under D1's always-on
        # foreign keys. A database with rows in every table touched (and their children: chunks,
        # evidence) comes through it unchanged but for the new column.
        before = [p for p in MIGRATIONS if os.path.basename(p) < "0006"]
        rebuild = next(p for p in MIGRATIONS if os.path.basename(p).startswith("0006"))
        conn = open_database(before)
        w = World(conn)
        org = w.org()
        runner = w.runner(org, max_concurrent_jobs=5)
        run = w.evaluation_run(org)
        lost = w.job(org)
        w.grant(lost, runner)
        w.reap(lost, runner, counted="dispatch_attempt")
        done = w.job(org)
        claim = w.grant(done, runner)
        head = w.stream(done, claim, 1, 3)
        w.complete(done, claim, runner, 1, final_stream_checksum=head, evaluation_run_id=run,
                   evidence=[("test_result", w.test_result(org, run))])
        w.complete(done, claim, runner, 1, decision="duplicate", final_stream_checksum=head)
        held = w.job(org)
        w.grant(held, runner)
        queued = w.job(org)
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        columns = {t: ", ".join(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
        rows = {t: conn.execute(f"SELECT {columns[t]} FROM {t} ORDER BY rowid").fetchall() for t in tables}
        events_seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'job_events'").fetchone()

        apply_migration(conn, rebuild)

        self.assertEqual(conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        self.assertEqual(conn.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        for t in tables:
            with self.subTest(table=t):
                after = conn.execute(f"SELECT {columns[t]} FROM {t} ORDER BY rowid").fetchall()
                self.assertEqual(after, rows[t])
        self.assertEqual(conn.execute("SELECT DISTINCT released_attempts FROM jobs").fetchall(), [(0,)])
        self.assertEqual(conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'job_events'").fetchone(),
                         events_seq)
        self.assertEqual(conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'kept_%'").fetchall(), [])
        # The schema is the one a fresh database gets, and its guards are back.
        fresh = open_database([p for p in MIGRATIONS if os.path.basename(p) < "0007"])
        shape = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        self.assertEqual(conn.execute(shape).fetchall(), fresh.execute(shape).fetchall())  # through 0006
        fresh.close()
        w2 = World(conn)
        self.assertRaises(sqlite3.IntegrityError, conn.execute, "DELETE FROM jobs WHERE id = ?", (done,))
        self.assertRaises(sqlite3.IntegrityError, conn.execute, "UPDATE job_events SET reason = 'x'")
        self.assertRaises(sqlite3.IntegrityError, w2.grant, done, runner)
        self.assertEqual(w2.job_row(lost)[:2], ("queued", 1))
        w2.grant(lost, runner)
        self.assertEqual(w2.job_row(queued)[0], "queued")
        self.assertEqual(w2.job_row(held)[0], "claimed")
        conn.close()


class EnumCheckTests(SchemaTest):
    def cases(self):
        """(table, column, good value, write) — write(value) performs the write under test."""
        w = self.w
        org = w.org()
        runner = w.runner(org, max_concurrent_jobs=5)
        state_runner = w.runner(org)
        _, _, job, claim = self.claimed_job(org=org, runner=runner)
        queued_job = w.job(org)
        run = w.evaluation_run(org)
        _, _, accepted_job, accepted_claim = self.claimed_job(org=org, runner=runner)
        # A row of the run its completion did not name: the enum case below attaches it.
        unnamed_result = w.test_result(org, run)
        accepted = w.complete(accepted_job, accepted_claim, runner, 1, evaluation_run_id=run)

        def insert_runner(**kw):
            return lambda value: w.runner(org, **{**kw, "identity_model": value})

        def chunk_kind(value):
            w.append(w.chunk(job, claim, 1, 0, None, kind=value))

        def completion(column):
            def write(value):
                row = w.completion_row(job, claim, runner, 1, **{"decision": "stale", column: value})
                w.insert("job_completions", row)

            return write

        # `run` is in custody of an accepted completion: new rows go to a run that is not.
        open_run = w.evaluation_run(org)

        def evidence_kind(value):
            self.execute(
                "INSERT INTO completion_evidence (evidence_kind, evidence_id, completion_id, job_id,"
                " organization_id, attached_at) VALUES (?, ?, ?, ?, ?, ?)",
                value, unnamed_result, accepted, accepted_job, org, NOW,
            )

        def archived(column):
            """An archived row with `column` = value, moved from a job pruned for it."""
            def write(value):
                moved = w.job(org)
                self.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, cancel_reason = 'x'"
                             " WHERE id = ?", NOW, moved)
                self.execute("UPDATE jobs SET archive_state = 'stored', bundle_sha256 = ?, bundle_bytes = 1,"
                             " stream_chunks = 0, stream_bytes = 0, archived_at = ? WHERE id = ?",
                             sha(moved), NOW, moved)
                self.execute("UPDATE jobs SET archive_state = 'pruned' WHERE id = ?", moved)
                number = w.one("SELECT number FROM organization_numbers WHERE organization_id = ?", org)[0]
                document = self.execute(
                    "INSERT INTO requirement_documents (organization_number, document, jobs)"
                    " SELECT ?, requirements, 1 FROM jobs WHERE id = ?"
                    " ON CONFLICT (organization_number, document) DO UPDATE SET jobs = jobs + 1"
                    " RETURNING id", number, moved).fetchone()[0]
                row = {"state": "cancelled", "subject_environment": "prod", column: value}
                self.execute(
                    "INSERT INTO archived_jobs (id, organization_number, idempotency_key, intent_hash,"
                    " subject_version_id, subject_environment, requirements_id, input_hash, state,"
                    " dispatch_attempt, released_attempts, created_at, updated_at, finished_at, archived_at,"
                    " bundle_sha256, bundle_bytes, stream_chunks, stream_bytes)"
                    " SELECT id, ?, idempotency_key, unhex(intent_hash), subject_version_id, ?, ?,"
                    " unhex(input_hash), ?, 0, 0, created_at, updated_at, finished_at, archived_at,"
                    " unhex(bundle_sha256), 1, 0, 0 FROM jobs WHERE id = ?",
                    number, row["subject_environment"], document, row["state"], moved)

            return write

        return [
            ("archived_jobs", "state", "failed", archived("state")),
            ("archived_jobs", "subject_environment", "dev", archived("subject_environment")),
            ("api_keys", "role", "member", lambda v: w.api_key(org, role=v)),
            ("organizations", "enrollment_policy", "token", lambda v: w.org(enrollment_policy=v)),
            ("runners", "state", "draining", lambda v: _update("runners", "state")(self, state_runner, v)),
            ("runners", "identity_model", "bootstrap", insert_runner()),
            ("runners", "external", 1, lambda v: _update("runners", "external")(self, runner, v)),
            ("runner_credentials", "issued_via", "bootstrap", lambda v: w.insert("runner_credentials", {
                "id": w.uid("cred"), "runner_id": runner, "organization_id": org, "credential_generation": 1,
                "issued_via": v, "scopes": '["runner:claim"]', "issued_at": NOW, "expires_at": NOW + 600_000})),
            ("release_artifacts", "kind", "scorer", lambda v: w.release(org, kind=v)),
            ("release_promotions", "environment", "staging",
             lambda v: w.promote(org, w.release(org, environments=())["version_id"], v)),
            ("jobs", "state", "cancelled",
             lambda v: self.execute("UPDATE jobs SET state = ?, finished_at = ? WHERE id = ?", v, NOW, queued_job)),
            ("jobs", "subject_kind", "agent", lambda v: w.job(org, subject_kind=v)),
            ("jobs", "subject_environment", "staging", lambda v: w.job(org, subject_environment=v)),
            ("jobs", "execution_kind", "tool", lambda v: w.job(org, execution_kind=v)),
            ("jobs", "external", 1, lambda v: w.job(org, external=v)),
            ("job_claims", "state", "active", lambda v: _update("job_claims", "state")(self, claim, v)),
            ("stream_chunks", "kind", "trajectory", chunk_kind),
            ("job_completions", "decision", "stale", completion("decision")),
            ("job_completions", "status", "failed", completion("status")),
            ("completion_evidence", "evidence_kind", "test_result", evidence_kind),
            ("evaluation_runs", "status", "completed", lambda v: w.evaluation_run(org, status=v)),
            ("test_results", "status", "skipped", lambda v: w.test_result(org, open_run, status=v)),
            ("cost_records", "category", "sandbox", lambda v: w.cost_record(org, open_run, category=v)),
            ("model_calls", "status", "failed", lambda v: w.model_call(org, open_run, status=v)),
            ("organization_counters", "name", "requeues",
             lambda v: self.execute(query("counters/add"), org, v, 1)),
            ("deployment_counters", "name", "reaper_passes",
             lambda v: self.execute("INSERT INTO deployment_counters (name, value) VALUES (?, 1)"
                                    " ON CONFLICT (name) DO UPDATE SET value = value + 1", v)),
        ]

    def test_every_state_and_enum_column_refuses_an_unknown_value(self):
        for table, column, good, write in self.cases():
            with self.subTest(table=table, column=column):
                write(good)
                bad = 7 if isinstance(good, int) else "bogus"
                self.assertRefused(write, bad)

    def test_every_enum_check_in_the_schema_is_covered_here(self):
        # A new enum column without a case above fails this test rather than going unproved.
        covered = {(t, c) for t, c, _, _ in self.cases()}
        declared = set()
        for table, sql in self.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
            for column in re.findall(r"CHECK \((\w+) IN \(", sql or ""):
                declared.add((table, column))
        self.assertEqual(declared - covered, set())


# =============================================================================================
# Enrollment policy and tokens (migration 0009)
# =============================================================================================


class EnrollmentPolicyTests(SchemaTest):
    def test_an_organization_is_open_unless_it_says_otherwise(self):
        org = self.w.org()
        self.assertEqual(self.w.one("SELECT enrollment_policy FROM organizations WHERE id = ?", org)[0], "open")
        self.execute("UPDATE organizations SET enrollment_policy = 'closed' WHERE id = ?", org)
        self.assertRefused(self.execute, "UPDATE organizations SET enrollment_policy = 'Open' WHERE id = ?", org,
                           message="CHECK constraint failed")

    def test_a_token_is_bounded_in_uses_and_lifetime(self):
        org = self.w.org()
        self.w.enrollment_token(org, max_uses=1)
        self.w.enrollment_token(org, max_uses=1000, expires_at=NOW + 2_592_000_000)
        for bad in ({"max_uses": 0}, {"max_uses": 1001}, {"expires_at": NOW},
                    {"expires_at": NOW + 2_592_000_001}, {"uses": 3}, {"uses": -1},
                    {"id": "tok_1"}, {"token_hash": "short"}, {"name": ""}):
            with self.subTest(bad=bad):
                self.assertRefused(self.w.enrollment_token, org, **bad, message="CHECK constraint failed")

    def test_a_token_hash_is_unique_across_organizations(self):
        org, other = self.w.org(), self.w.org()
        self.w.enrollment_token(org, token_hash=sha("same"))
        self.assertRefused(self.w.enrollment_token, other, token_hash=sha("same"), message="UNIQUE")

    def test_live_tokens_stop_at_100_per_organization(self):
        org, other = self.w.org(), self.w.org()
        for _ in range(100):
            self.w.enrollment_token(org)
        self.assertRefused(self.w.enrollment_token, org, message="enrollment_tokens_at_cap")
        # Another organization, and the dead ones, do not count.
        self.w.enrollment_token(other)
        first = self.w.one("SELECT id FROM enrollment_tokens WHERE organization_id = ? ORDER BY id", org)[0]
        self.execute("UPDATE enrollment_tokens SET revoked_at = ? WHERE id = ?", NOW, first)
        self.w.enrollment_token(org)
        self.assertRefused(self.w.enrollment_token, org, message="enrollment_tokens_at_cap")
        self.w.enrollment_token(org, created_at=NOW + 86_400_000, expires_at=NOW + 2 * 86_400_000)

    def test_a_token_cannot_be_unrevoked_rewound_or_rewritten(self):
        org = self.w.org()
        token = self.w.enrollment_token(org)
        self.execute("UPDATE enrollment_tokens SET uses = 1, last_used_at = ? WHERE id = ?", NOW, token)
        for sql in ("UPDATE enrollment_tokens SET uses = 0 WHERE id = ?",
                    "UPDATE enrollment_tokens SET max_uses = 5 WHERE id = ?",
                    "UPDATE enrollment_tokens SET expires_at = expires_at + 1 WHERE id = ?",
                    "UPDATE enrollment_tokens SET token_hash = '" + sha("other") + "' WHERE id = ?"):
            with self.subTest(sql=sql):
                self.assertRefused(self.execute, sql, token, message="enrollment_token_is_immutable")
        self.execute("UPDATE enrollment_tokens SET revoked_at = ? WHERE id = ?", NOW + 1, token)
        self.assertRefused(self.execute, "UPDATE enrollment_tokens SET revoked_at = NULL WHERE id = ?", token,
                           message="enrollment_token_is_immutable")

    def test_a_runner_admitted_by_a_token_spends_one_use_in_the_same_statement(self):
        org = self.w.org()
        token = self.w.enrollment_token(org, max_uses=2)
        self.w.keypair_runner(org, enrollment_token_id=token, enroll_network="203.0.113.7")
        self.assertEqual(self.w.one("SELECT uses, last_used_at FROM enrollment_tokens WHERE id = ?", token),
                         (1, NOW))
        self.w.keypair_runner(org, enrollment_token_id=token, enroll_network="203.0.113.7")
        # Used up: the third is refused and nothing is written.
        self.assertRefused(self.w.keypair_runner, org, enrollment_token_id=token, message="enrollment_token_invalid")
        self.assertEqual(self.w.one("SELECT uses FROM enrollment_tokens WHERE id = ?", token)[0], 2)
        self.assertEqual(self.w.one(
            "SELECT count(*) FROM runners WHERE enrollment_token_id = ?", token)[0], 2)

    def test_a_revoked_expired_or_foreign_token_admits_no_runner(self):
        org, other = self.w.org(), self.w.org()
        revoked = self.w.enrollment_token(org, revoked_at=NOW)
        expired = self.w.enrollment_token(org, created_at=NOW - 2 * 86_400_000, expires_at=NOW)
        foreign = self.w.enrollment_token(other)
        for token in (revoked, expired, foreign, "ent_unknown"):
            with self.subTest(token=token):
                self.assertRefused(self.w.keypair_runner, org, enrollment_token_id=token,
                                   message="enrollment_token_invalid")
        # The control: a live token of the organization admits one.
        self.w.keypair_runner(org, enrollment_token_id=self.w.enrollment_token(org))

    def test_a_runner_keeps_the_network_and_token_it_enrolled_with(self):
        org = self.w.org()
        runner = self.w.keypair_runner(org, enroll_network="203.0.113.7")
        self.assertRefused(self.execute, "UPDATE runners SET enroll_network = '198.51.100.1' WHERE id = ?", runner,
                           message="runner_enrollment_is_fixed")
        self.execute("UPDATE runners SET name = 'renamed' WHERE id = ?", runner)
        # Only a key-pair enrollment has a network or a token.
        self.assertRefused(self.w.runner, org, enroll_network="203.0.113.7", message="CHECK constraint failed")

    def test_pending_enrollments_stop_at_the_networks_share(self):
        org, other = self.w.org(), self.w.org()
        self.execute("UPDATE organizations SET max_pending_enrollments_per_network = 2 WHERE id = ?", org)
        first = self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64")
        self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64")
        self.assertRefused(self.w.keypair_runner, org, enroll_network="2001:db8:1:2::/64",
                           message="pending_enrollments_from_network_at_cap")
        # Another network, another organization, and a token's enrollments are not counted.
        self.w.keypair_runner(org, enroll_network="2001:db8:1:3::/64")
        self.w.keypair_runner(other, enroll_network="2001:db8:1:2::/64")
        self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64",
                              enrollment_token_id=self.w.enrollment_token(org))
        # Approving one frees its slot.
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, first)
        self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64")


    def test_pending_enrollments_stop_at_the_sites_share(self):
        # Migration 0012: one IPv6 /48 (or IPv4 address) has its own share, across its /64s.
        org, other = self.w.org(), self.w.org()
        self.execute("UPDATE organizations SET max_pending_enrollments_per_site = 2 WHERE id = ?", org)
        site = "2001:db8:1::/48"
        first = self.w.keypair_runner(org, enroll_network="2001:db8:1:1::/64", enroll_site=site)
        self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64", enroll_site=site)
        self.assertRefused(self.w.keypair_runner, org, enroll_network="2001:db8:1:3::/64", enroll_site=site,
                           message="pending_enrollments_from_site_at_cap")
        # Another site, another organization, and a token's enrollments are not counted.
        self.w.keypair_runner(org, enroll_network="2001:db8:2:1::/64", enroll_site="2001:db8:2::/48")
        self.w.keypair_runner(other, enroll_network="2001:db8:1:3::/64", enroll_site=site)
        self.w.keypair_runner(org, enroll_network="2001:db8:1:3::/64", enroll_site=site,
                              enrollment_token_id=self.w.enrollment_token(org))
        # Approving one frees its slot; the site an enrollment came from never changes.
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, first)
        self.w.keypair_runner(org, enroll_network="2001:db8:1:3::/64", enroll_site=site)
        self.assertRefused(self.execute, "UPDATE runners SET enroll_site = 'x' WHERE id = ?", first,
                           message="runner_enrollment_is_fixed")
        # Only a key-pair enrollment has a site.
        self.assertRefused(self.w.runner, org, enroll_site=site, message="CHECK constraint failed")

    def test_a_tokens_enrollments_neither_count_against_nor_stop_at_the_organizations_cap(self):
        org = self.w.org()
        self.execute("UPDATE organizations SET max_pending_enrollments = 2 WHERE id = ?", org)
        token = self.w.enrollment_token(org, max_uses=3)
        self.w.keypair_runner(org, enrollment_token_id=token)
        self.w.keypair_runner(org)
        self.w.keypair_runner(org)
        self.assertRefused(self.w.keypair_runner, org, message="pending_enrollments_at_cap")
        # The token still admits at the cap, and its runners did not take a slot.
        self.w.keypair_runner(org, enrollment_token_id=token)
        self.assertEqual(self.w.one(
            "SELECT count(*) FROM runners WHERE organization_id = ? AND state = 'pending_approval'", org)[0], 4)

    def delete_expired(self, cutoff, limit=500):
        moves = '{"pending_approval":"revoked"}'
        batch(self.conn, [
            (query("runners/delete_expired_enrollment_events"), (cutoff, limit, moves)),
            (query("runners/delete_expired_enrollment_files"), (cutoff, limit, moves)),
            (query("runners/delete_expired_enrollment_challenges"), (cutoff, limit, moves)),
            (query("runners/delete_expired_enrollments"), (cutoff, limit, moves)),
        ])

    def test_the_cron_pass_deletes_an_expired_enrollment_its_files_and_events_only(self):
        org = self.w.org()
        stale = self.w.keypair_runner(org, registered_at=NOW - 10, updated_at=NOW - 10)
        fresh = self.w.keypair_runner(org)
        approved = self.w.keypair_runner(org, registered_at=NOW - 10, updated_at=NOW - 10)
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, approved)
        for runner in (stale, fresh, approved):
            self.w.insert("runner_files", {"runner_id": runner, "organization_id": org, "name": "lscpu.txt",
                                           "content": "x86_64", "content_hash": sha("x86_64"),
                                           "uploaded_at": NOW})
            self.w.insert("job_events", {"organization_id": org, "runner_id": runner, "actor": "runner:" + runner,
                                         "type": "runner.enrolled", "at": NOW})
        self.delete_expired(cutoff=NOW)
        for table, column in (("runners", "id"), ("runner_files", "runner_id"), ("job_events", "runner_id")):
            counts = [self.w.one(f"SELECT count(*) FROM {table} WHERE {column} = ?", r)[0]
                      for r in (stale, fresh, approved)]
            self.assertEqual(counts, [0, 1, 1], table)
        # An approved runner's events stay append-only.
        self.assertRefused(self.execute, "DELETE FROM job_events WHERE runner_id = ?", approved,
                           message="job_events_are_append_only")

    def test_the_cron_pass_deletes_at_most_its_limit_of_expired_enrollments(self):
        org = self.w.org()
        runners = [self.w.keypair_runner(org, registered_at=NOW - 10 + i, updated_at=NOW) for i in range(3)]
        self.delete_expired(cutoff=NOW, limit=2)
        left = [r for r in runners if self.w.one("SELECT count(*) FROM runners WHERE id = ?", r)[0]]
        self.assertEqual(left, runners[2:])

    def test_an_api_key_ends_after_it_was_made_or_never(self):
        # Migration 0013: NULL (keys made before, and bootstrap-admin's) or after created_at.
        org = self.w.org()
        self.w.api_key(org)
        self.w.api_key(org, expires_at=NOW + 1)
        self.assertRefused(self.w.api_key, org, expires_at=NOW, message="CHECK constraint failed")
        # The insert the worker sends binds it.
        self.execute(query("api_keys/insert"), "key_x", org, "ci", "erk_01234567", sha("x"), "member",
                     '["runs:read"]', NOW, NOW + 90 * 86_400_000)
        self.assertEqual(self.w.one("SELECT expires_at FROM api_keys WHERE id = 'key_x'")[0], NOW + 90 * 86_400_000)

    def test_a_runners_events_page_newest_first_before_a_cursor(self):
        org, other_org = self.w.org(), self.w.org()
        runner, other = self.w.runner(org), self.w.runner(org)
        for r, o in ((runner, org), (other, org), (runner, org), (runner, org)):
            self.w.insert("job_events", {"organization_id": o, "runner_id": r, "actor": "system:test",
                                         "type": "runner.tags_changed", "at": NOW})
        ids = [row[0] for row in self.execute(
            "SELECT id FROM job_events WHERE runner_id = ? ORDER BY id DESC", runner).fetchall()]
        page = lambda org_id, before, limit: [row[0] for row in self.execute(
            query("events/for_runner"), org_id, runner, before, limit).fetchall()]
        self.assertEqual(page(org, 2**63 - 1, 2), ids[:2])
        self.assertEqual(page(org, ids[1], 2), ids[2:])
        self.assertEqual(page(other_org, 2**63 - 1, 10), [])

    def test_migration_0012_deletes_the_enrollments_the_cron_pass_revoked_before_it(self):
        before = [m for m in MIGRATIONS if os.path.basename(m) < "0012"]
        conn = open_database(before)
        w = World(conn)
        org = w.org()
        expired = w.keypair_runner(org, state="revoked", revoked_at=NOW,
                                   state_reason="enrollment expired before approval")
        by_admin = w.keypair_runner(org, state="revoked", revoked_at=NOW, state_reason="not ours")
        for runner in (expired, by_admin):
            w.insert("job_events", {"organization_id": org, "runner_id": runner, "actor": "system:cron",
                                    "type": "runner.enrollment_expired", "at": NOW})
        for path in MIGRATIONS[len(before):]:
            apply_migration(conn, path)
        self.assertEqual([w.one("SELECT count(*) FROM runners WHERE id = ?", r)[0] for r in (expired, by_admin)],
                         [0, 1])
        self.assertEqual([w.one("SELECT count(*) FROM job_events WHERE runner_id = ?", r)[0]
                          for r in (expired, by_admin)], [0, 1])
        conn.close()


# =============================================================================================
# Runners
# =============================================================================================


class RunnerTests(SchemaTest):
    def test_runner_active_claims_cannot_exceed_max_concurrent_jobs(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=2)
        self.execute("UPDATE runners SET active_claims = 2 WHERE id = ?", runner)
        # Named by a trigger (migration 0003), so the edge maps it by name.
        self.assertRefused(self.execute, "UPDATE runners SET active_claims = 3 WHERE id = ?", runner,
                           message="runner_at_capacity")
        # Lowering capacity below what is in flight is refused too: drain first.
        self.assertRefused(self.execute, "UPDATE runners SET max_concurrent_jobs = 1 WHERE id = ?", runner,
                           message="CHECK constraint failed")
        self.assertEqual(self.w.active_claims(runner), 2)

    def test_pending_enrollments_stop_at_the_organizations_cap(self):
        org, other = self.w.org(), self.w.org()
        self.execute("UPDATE organizations SET max_pending_enrollments = 2 WHERE id = ?", org)
        self.w.keypair_runner(org)
        self.w.keypair_runner(org)
        self.assertRefused(self.w.keypair_runner, org, message="pending_enrollments_at_cap")
        # Admin-registered runners and other organizations do not count against it.
        self.w.runner(org)
        self.w.keypair_runner(other)
        # Approving one makes room for one more.
        pending = self.execute(
            "SELECT id FROM runners WHERE organization_id = ? AND state = 'pending_approval' LIMIT 1", org
        ).fetchone()[0]
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, pending)
        self.w.keypair_runner(org)

    def test_runner_active_claims_cannot_go_negative(self):
        org = self.w.org()
        runner = self.w.runner(org)
        self.assertRefused(self.execute, "UPDATE runners SET active_claims = active_claims - 1 WHERE id = ?", runner,
                           message="CHECK constraint failed")

    def test_revoked_runner_cannot_be_reactivated(self):
        org = self.w.org()
        runner = self.w.runner(org)
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, runner)
        for state in ("active", "draining", "lost", "pending_approval"):
            with self.subTest(to=state):
                self.assertRefused(
                    self.execute, "UPDATE runners SET state = ?, revoked_at = NULL WHERE id = ?", state, runner,
                    message="runner_revocation_is_permanent",
                )
        # Bookkeeping on a revoked runner still works (the reaper releases its capacity).
        self.execute("UPDATE runners SET last_seen_at = ?, state = 'revoked' WHERE id = ?", NOW + 1, runner)
        self.assertEqual(self.one_state(runner), "revoked")

    def one_state(self, runner):
        return self.w.one("SELECT state FROM runners WHERE id = ?", runner)[0]

    def test_revocation_records_its_time(self):
        org = self.w.org()
        runner = self.w.runner(org)
        self.assertRefused(self.execute, "UPDATE runners SET state = 'revoked' WHERE id = ?", runner,
                           message="CHECK constraint failed")

    def test_runner_key_is_unique_per_organization_but_reusable_across_organizations(self):
        a, b = self.w.org(), self.w.org()
        self.w.runner(a, runner_key="worker-1")
        self.w.runner(b, runner_key="worker-1")
        self.assertRefused(self.w.runner, a, runner_key="worker-1", message="UNIQUE constraint failed")

    def test_fingerprint_is_unique_across_organizations(self):
        a, b = self.w.org(), self.w.org()
        self.w.keypair_runner(a, fingerprint="SHA256:abc")
        self.assertRefused(self.w.keypair_runner, b, fingerprint="SHA256:abc", message="UNIQUE constraint failed")

    def test_each_identity_model_holds_exactly_its_own_credentials(self):
        org = self.w.org()
        self.w.runner(org)
        self.w.keypair_runner(org)
        refused = [
            ("bootstrap runner without token hash", self.w.runner, {"bootstrap_token_hash": None}),
            ("bootstrap runner without runner key", self.w.runner, {"runner_key": None}),
            ("bootstrap runner with a key pair", self.w.runner, {"public_key": "pk", "fingerprint": "fp"}),
            ("bootstrap runner pending approval", self.w.runner, {"state": "pending_approval"}),
            ("keypair runner without public key", self.w.keypair_runner, {"public_key": None}),
            ("keypair runner without fingerprint", self.w.keypair_runner, {"fingerprint": None}),
            ("keypair runner with a bootstrap token", self.w.keypair_runner,
             {"bootstrap_token_hash": sha("token")}),
        ]
        for name, make, overrides in refused:
            with self.subTest(name):
                self.assertRefused(make, org, message="CHECK constraint failed", **overrides)

    def test_keypair_runner_works_only_after_approval(self):
        org = self.w.org()
        runner = self.w.keypair_runner(org)
        self.assertRefused(self.execute, "UPDATE runners SET state = 'active' WHERE id = ?", runner,
                           message="CHECK constraint failed")
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, runner)
        self.assertEqual(self.one_state(runner), "active")

    def test_runner_key_pair_and_organization_are_immutable(self):
        a, b = self.w.org(), self.w.org()
        runner = self.w.keypair_runner(a)
        for column, value in (("public_key", "other"), ("fingerprint", "SHA256:other"),
                              ("organization_id", b), ("identity_model", "bootstrap")):
            with self.subTest(column=column):
                self.assertRefused(self.execute, f"UPDATE runners SET {column} = ? WHERE id = ?", value, runner,
                                   message="runner_identity_is_immutable")

    def test_credential_generation_only_moves_forward(self):
        org = self.w.org()
        runner = self.w.runner(org)
        self.execute("UPDATE runners SET credential_generation = credential_generation + 1 WHERE id = ?", runner)
        self.assertRefused(self.execute, "UPDATE runners SET credential_generation = 1 WHERE id = ?", runner,
                           message="runner_identity_is_immutable")

    def test_runner_file_is_size_capped_plainly_named_and_one_per_name(self):
        org = self.w.org()
        runner = self.w.runner(org)

        def upload(name, content):
            self.w.insert("runner_files", {"runner_id": runner, "organization_id": org, "name": name,
                                           "content": content, "content_hash": sha(content), "uploaded_at": NOW})

        upload("runner.log", "ok\n")
        upload("lscpu.txt", "é" * 131072)  # exactly 262144 bytes of UTF-8
        self.assertRefused(upload, "runner.log", "again", message="UNIQUE constraint failed")
        self.assertRefused(upload, "big.txt", "é" * 131072 + "x", message="CHECK constraint failed")
        for name in ("../etc/passwd", "a/b", ".hidden", "", "x" * 129):
            with self.subTest(name=name):
                self.assertRefused(upload, name, "x", message="CHECK constraint failed")
        other_org = self.w.org()
        self.assertRefused(self.w.insert, "runner_files", {
            "runner_id": runner, "organization_id": other_org, "name": "x.txt", "content": "x",
            "content_hash": sha("x"), "uploaded_at": NOW}, message="FOREIGN KEY constraint failed")

    def test_runner_credentials_live_at_most_ten_minutes(self):
        org = self.w.org()
        runner = self.w.runner(org)

        def issue(lifetime_ms, token_hash=None):
            self.w.insert("runner_credentials", {
                "id": self.w.uid("cred"), "runner_id": runner, "organization_id": org,
                "credential_generation": 1, "token_hash": token_hash, "issued_via": "bootstrap",
                "scopes": '["runner:claim"]', "issued_at": NOW, "expires_at": NOW + lifetime_ms})

        issue(600_000)
        issue(600_000, token_hash=sha("token-a"))
        self.assertRefused(issue, 600_001, message="CHECK constraint failed")
        self.assertRefused(issue, 0, message="CHECK constraint failed")

    def test_challenge_is_single_use_and_bound_to_the_runner_fingerprint(self):
        org = self.w.org()
        runner = self.w.keypair_runner(org)
        other = self.w.keypair_runner(org)
        fingerprint = self.w.one("SELECT fingerprint FROM runners WHERE id = ?", runner)[0]
        other_fp = self.w.one("SELECT fingerprint FROM runners WHERE id = ?", other)[0]

        def challenge(fp, secret):
            self.w.insert("runner_challenges", {
                "id": self.w.uid("chl"), "runner_id": runner, "organization_id": org, "fingerprint": fp,
                "challenge_hash": sha(secret), "issued_at": NOW, "expires_at": NOW + 60_000})

        challenge(fingerprint, "challenge-1")
        self.assertRefused(challenge, other_fp, "challenge-2", message="FOREIGN KEY constraint failed")
        consume = "UPDATE runner_challenges SET consumed_at = ? WHERE challenge_hash = ?"
        self.execute(consume, NOW + 1, sha("challenge-1"))
        self.assertRefused(self.execute, consume, NOW + 2, sha("challenge-1"), message="challenge_already_consumed")


# =============================================================================================
# Secrets are stored only as SHA-256
# =============================================================================================


class SecretTests(SchemaTest):
    def test_secret_columns_accept_only_lowercase_sha256_hex(self):
        org = self.w.org()
        raw = "erk_live_0123456789abcdef0123456789abcdef0123456789abcdef01234"
        cases = [
            ("api key", lambda h: self.w.api_key(org, key_hash=h)),
            ("bootstrap token", lambda h: self.w.runner(org, bootstrap_token_hash=h)),
            ("runner credential", lambda h: self.w.insert("runner_credentials", {
                "id": self.w.uid("cred"), "runner_id": self.w.runner(org), "organization_id": org,
                "credential_generation": 1, "token_hash": h, "issued_via": "bootstrap",
                "scopes": "[]", "issued_at": NOW, "expires_at": NOW + 1000})),
        ]
        for name, store in cases:
            with self.subTest(name):
                store(sha(name))
                self.assertRefused(store, raw, message="CHECK constraint failed")
                self.assertRefused(store, sha(name + "2").upper(), message="CHECK constraint failed")

    def test_api_key_and_credential_hashes_are_unique(self):
        org = self.w.org()
        self.w.api_key(org, key_hash=sha("k"))
        self.assertRefused(self.w.api_key, self.w.org(), key_hash=sha("k"), message="UNIQUE constraint failed")
        runner = self.w.runner(org)

        def credential():
            self.w.insert("runner_credentials", {
                "id": self.w.uid("cred"), "runner_id": runner, "organization_id": org, "credential_generation": 1,
                "token_hash": sha("t"), "issued_via": "bootstrap", "scopes": "[]",
                "issued_at": NOW, "expires_at": NOW + 1000})

        credential()
        self.assertRefused(credential, message="UNIQUE constraint failed: runner_credentials.token_hash")
