"""The production statements, the runner state machine's statements, ephemeral runners.

Run from the repository root: python3 -m unittest discover -s tests/schema
"""

import sqlite3
import unittest

from harness import *  # noqa: F401,F403 (the world and the statements every suite uses)


class ProductionStatementTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.runner = self.w.runner(self.org)
        self.job = self.w.job(self.org)

    def known(self, state, attempt, claim, now=None):
        return (query("assert_job_as_known"), (self.job, state, attempt, claim, now))

    def credential(self, generation=1):
        return (query("assert_credential_current"), (self.runner, self.org, generation, AUTHENTICATING_STATES))

    def grant(self, attempt, at=NOW, request_id=None):
        claim = f"{self.job}-a{attempt}"
        lease = at + LEASE_MS
        batch(self.conn, [
            self.known("queued", attempt - 1, None),
            (query("grant_claim"), (claim, self.job, self.org, self.runner, attempt, sha("nonce" + claim),
                                    "kid", at, at + 300_000, lease, '{"signed": true}', request_id)),
            (query("grant_job"), (self.job, self.org, attempt, claim, lease, at, "claimed", "queued")),
            (query("grant_runner"), (self.runner, at, CLAIMING_STATES, EPHEMERAL_DRAINED,
                                     EPHEMERAL_DRAINED_REASON)),
        ])
        return claim

    def heartbeat(self, claim, attempt, state, at, generation=1):
        lease = at + 2 * LEASE_MS
        batch(self.conn, [
            self.credential(generation),
            self.known(state, attempt, claim, at),
            (query("heartbeat_job"), (self.job, claim, attempt, lease, "running", at, state)),
            (query("heartbeat_claim"), (claim, lease, at, "active")),
            (query("heartbeat_runner"), (self.runner, at)),
        ])
        return lease

    def end(self, claim, attempt, state, to, how, runner_statement, free=0, at=NOW):
        batch(self.conn, [
            self.known(state, attempt, claim),
            (query("end_claim"), (claim, at, how[0], how[1], "active")),
            (query("free_job"), (self.job, claim, attempt, state, to, at, at if to == "cancelled" else None,
                                 "reason", free, "cancelled")),
            runner_statement,
        ])

    def active_claims(self):
        return self.w.active_claims(self.runner)

    def test_grant_heartbeat_recovery_hand_back_and_completion_in_production_statements(self):
        claim = self.grant(1)
        self.assertEqual(self.w.job_row(self.job)[:3], ("claimed", 1, claim))
        self.assertEqual(self.active_claims(), 1)
        # The same attempt cannot be granted twice.
        self.assertRefused(self.grant, 1, message="job_moved")
        self.heartbeat(claim, 1, "claimed", NOW + 1_000)
        self.assertEqual(self.w.job_row(self.job)[0], "running")

        # The lease lapses: recovery ends the claim, requeues the job, marks the runner lost.
        self.end(claim, 1, "running", "queued", ("lost", "lease expired"),
                 (query("recover_runner"), (self.runner, NOW, "job: lease expired", LEASE_LOST_MOVES,
                                            LEASE_LOST_RETIRING)))
        self.assertEqual(self.w.job_row(self.job)[:3], ("queued", 1, None))
        state, generation = self.w.one(
            "SELECT state, credential_generation FROM runners WHERE id = ?", self.runner)
        self.assertEqual((state, generation, self.active_claims()), ("lost", 2, 0))
        # Its old credential no longer passes; a fresh session brings it back.
        self.execute("UPDATE runners SET state = 'active' WHERE id = ?", self.runner)

        # Attempt 2, handed back (free): queued again with the hand-back counted as free.
        claim = self.grant(2, request_id="req-2")
        self.end(claim, 2, "claimed", "queued", ("released", "handed back: stopping"),
                 (query("hand_back_runner"), (self.runner, NOW)), free=1)
        self.assertEqual(self.w.one("SELECT released_attempts FROM jobs WHERE id = ?", self.job)[0], 1)
        self.assertEqual(self.active_claims(), 0)

        # Attempt 3, completed and accepted, with its evidence in custody.
        claim = self.grant(3)
        self.heartbeat(claim, 3, "claimed", NOW + 2_000, generation=2)
        run = self.w.evaluation_run(self.org)
        row = self.w.completion_row(self.job, claim, self.runner, 3, evaluation_run_id=run)
        completion = (query("completion_insert"), (
            row["id"], self.job, self.org, claim, self.runner, 3, "accepted", "accepted",
            row["completion_checksum"], "succeeded", row["input_hash"], row["result_hash"], None, run,
            row["evidence"], None, row["completed_at"], NOW, stable_json({"completion": True})))
        batch(self.conn, [
            self.credential(generation=2),
            self.known("running", 3, claim, NOW + 3_000),
            completion,
            (query("complete_job"), (self.job, claim, 3, "succeeded", NOW + 3_000, HELD_JOB_STATES)),
            (query("complete_claim"), (claim, NOW + 3_000, "released", "active")),
            (query("complete_runner"), (self.runner, NOW + 3_000)),
            (query("completion_evidence_insert"), ("evaluation_run", run, row["id"], self.job, self.org,
                                                   NOW + 3_000)),
        ])
        self.assertEqual(self.w.job_row(self.job)[:3], ("succeeded", 3, None))
        self.assertEqual(self.active_claims(), 0)
        # Whose custody the run is in, as a later completion naming it is told.
        holder = self.execute(query("evidence_holder"), self.org,
                              json.dumps([["test_result", "tr_x"], ["evaluation_run", run]])).fetchall()
        self.assertEqual(holder, [("evaluation_run", run, self.job)])
        self.assertEqual(self.execute(query("evidence_holder"), self.org, json.dumps([["evaluation_run", "evr_none"]]))
                         .fetchall(), [])

    def test_a_heartbeat_of_a_rotated_credential_changes_nothing(self):
        claim = self.grant(1)
        before = self.w.job_row(self.job)
        self.execute("UPDATE runners SET credential_generation = 2 WHERE id = ?", self.runner)
        self.assertRefused(self.heartbeat, claim, 1, "claimed", NOW + 1_000, message="credential_revoked")
        self.assertEqual(self.w.job_row(self.job), before)

    def presumed_heartbeat(self, claim, attempt, at, runner=None, org=None):
        """A cold job object's first heartbeat, decided from the claim id alone
        (objects::job::heartbeat::presumed_first): its assertions, the writes, then the job read back."""
        runner = runner or self.runner
        lease = at + 2 * LEASE_MS
        batch(self.conn, [
            (query("assert_credential_current"), (runner, org or self.org, 1, AUTHENTICATING_STATES)),
            self.known("claimed", attempt, claim, at),
            (query("assert_claim_held"), (claim, runner, org or self.org)),
            (query("heartbeat_job"), (self.job, claim, attempt, lease, "running", at, "claimed")),
            (query("heartbeat_claim"), (claim, lease, at, "active")),
            (query("heartbeat_runner"), (runner, at)),
        ])
        return lease

    def test_a_presumed_first_heartbeat_commits_only_on_the_claim_it_presumes(self):
        claim = self.grant(1)
        before = self.w.job_row(self.job)
        # Another runner of the organization naming the claim: not its claim.
        other = self.w.runner(self.org)
        self.assertRefused(self.presumed_heartbeat, claim, 1, NOW + 1_000, runner=other, message="job_moved")
        # The holder, presuming another attempt.
        self.assertRefused(self.presumed_heartbeat, f"{self.job}-a2", 2, NOW + 1_000, message="job_moved")
        # The holder, after its lease lapsed.
        self.assertRefused(self.presumed_heartbeat, claim, 1, NOW + LEASE_MS, message="job_moved")
        self.assertEqual(self.w.job_row(self.job), before)
        # The holder, as presumed: the first heartbeat's rows.
        lease = self.presumed_heartbeat(claim, 1, NOW + 1_000)
        self.assertEqual(self.w.job_row(self.job)[:4], ("running", 1, claim, lease))
        # A second heartbeat presumed first is refuted (the job runs), and changes nothing.
        self.assertRefused(self.presumed_heartbeat, claim, 1, NOW + 2_000, message="job_moved")
        self.assertEqual(self.w.job_row(self.job)[3], lease)

    def test_a_presumed_first_heartbeat_of_a_job_asked_to_cancel_is_refuted(self):
        claim = self.grant(1)
        batch(self.conn, [self.known("claimed", 1, claim),
                          (query("cancel_request_job"), (self.job, self.org, "claimed", "stop", NOW, "cancel_requested"))])
        self.assertRefused(self.presumed_heartbeat, claim, 1, NOW + 1_000, message="job_moved")
        self.assertEqual(self.w.job_row(self.job)[0], "cancel_requested")

    def test_cancel_statements(self):
        batch(self.conn, [self.known("queued", 0, None),
                          (query("cancel_queued_job"), (self.job, self.org, "queued", "no longer needed", NOW, "cancelled"))])
        self.assertEqual(self.w.job_row(self.job)[0], "cancelled")
        other = self.w.job(self.org)
        self.job = other
        claim = self.grant(1)
        batch(self.conn, [self.known("claimed", 1, claim),
                          (query("cancel_request_job"), (self.job, self.org, "claimed", "stop", NOW, "cancel_requested"))])
        self.assertEqual(self.w.job_row(self.job)[0], "cancel_requested")

    def test_every_statement_file_is_exercised_by_these_tests(self):
        here = pathlib.Path(__file__).parent
        text = "".join(path.read_text() for path in sorted(here.glob("*.py")))
        for path in sorted(QUERIES.glob("*.sql")):
            with self.subTest(query=path.name):
                self.assertTrue(f'query("{path.stem}")' in text or f'"{path.name}"' in text, path.name)

    def test_every_statement_the_worker_compiles_in_prepares_against_the_migrated_schema(self):
        # Every statement file, those of queries/*.sql (each tested for its behaviour in this
        # suite) and those of queries/<table group>/*.sql (the reads and plain writes behind the
        # store's typed functions, exercised end to end by the e2e suites on real D1): each
        # prepares against the schema the migrations build, with exactly the parameters it
        # numbers, so a column, table or placeholder that does not exist fails here.
        # bench_floor is the benchmark build's own table, created by scripts/bench.
        self.execute("CREATE TABLE bench_floor (id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL)")
        files = sorted(QUERIES.rglob("*.sql"))
        self.assertGreater(len(files), 100)
        for path in files:
            sql = path.read_text()
            code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
            numbered = [int(n) for n in re.findall(r"\?(\d+)", code)]
            with self.subTest(query=str(path.relative_to(QUERIES))):
                self.assertEqual(sorted(set(numbered)), list(range(1, max(numbered, default=0) + 1)),
                                 "placeholders are numbered from ?1 without a gap")
                self.assertNotIn("?", re.sub(r"\?\d+", "", re.sub(r"'[^']*'", "", code)),
                                 "every placeholder is numbered")
                self.conn.execute("EXPLAIN " + sql, [None] * max(numbered, default=0))


# =============================================================================================
# The runner statements that apply the protocol's runner machine: for a runner in every state,
# which rows change and how, column by column
# =============================================================================================


class RunnerMachineStatementTests(SchemaTest):
    COLUMNS = ("state", "state_reason", "active_claims", "credential_generation", "approved_at", "revoked_at",
               "key_id", "last_seen_at", "updated_at")

    def setUp(self):
        super().setUp()
        self.org = self.w.org()

    def runner_in(self, state):
        """A runner in `state` holding one claim, its generation moved on once, a reason on
        record, and every time column at a distinct past value."""
        common = {"active_claims": 1, "credential_generation": 2, "state_reason": "before",
                  "last_seen_at": NOW - 2, "updated_at": NOW - 1}
        if state == "pending_approval":
            return self.w.keypair_runner(self.org, **common)
        extra = {"state": state, "approved_at": NOW - 4}
        if state == "revoked":
            extra["revoked_at"] = NOW - 3
        return self.w.runner(self.org, **common, **extra)

    def row(self, runner):
        values = self.w.one(f"SELECT {', '.join(self.COLUMNS)} FROM runners WHERE id = ?", runner)
        return dict(zip(self.COLUMNS, values))

    def test_the_fixture_covers_every_runner_state(self):
        for state in RUNNER_STATES:
            with self.subTest(state=state):
                self.assertEqual(self.row(self.runner_in(state))["state"], state)
        self.assertRefused(self.runner_in, "retired", message="CHECK constraint failed")

    # -- recover_runner: the lease_lost move, from the runner's live state ---------------------

    def recover(self, runner, reason="job job_1: lease expired"):
        return self.execute(query("recover_runner"), runner, NOW, reason, LEASE_LOST_MOVES,
                            LEASE_LOST_RETIRING).rowcount

    def test_recovery_marks_only_an_active_runner_lost_and_frees_capacity_in_every_state(self):
        for state in RUNNER_STATES:
            with self.subTest(state=state):
                runner = self.runner_in(state)
                before = self.row(runner)
                self.assertEqual(self.recover(runner), 1)
                expected = dict(before, active_claims=0, updated_at=NOW)
                if state == "active":
                    expected.update(state="lost", state_reason="job job_1: lease expired",
                                    credential_generation=before["credential_generation"] + 1)
                self.assertEqual(self.row(runner), expected)

    def test_a_second_lost_lease_keeps_the_lost_runners_generation_and_first_reason(self):
        runner = self.runner_in("active")
        self.execute("UPDATE runners SET active_claims = 2, max_concurrent_jobs = 2 WHERE id = ?", runner)
        self.recover(runner, "job job_1: lease expired")
        self.recover(runner, "job job_2: lease expired")
        row = self.row(runner)
        self.assertEqual((row["state"], row["state_reason"], row["credential_generation"], row["active_claims"]),
                         ("lost", "job job_1: lease expired", 3, 0))

    # -- record_session: the session_proven move, guarded by who may authenticate -------------

    def session(self, runner, generation=2):
        return self.execute(query("record_session"), runner, NOW, generation, "kid-new", AUTHENTICATING_STATES,
                            SESSION_PROVEN_MOVES, SESSION_REASON).rowcount

    def test_a_session_returns_only_a_lost_runner_to_active_and_pending_or_revoked_ones_get_none(self):
        for state in RUNNER_STATES:
            with self.subTest(state=state):
                runner = self.runner_in(state)
                before = self.row(runner)
                if state in ("pending_approval", "revoked"):
                    self.assertEqual(self.session(runner), 0)
                    self.assertEqual(self.row(runner), before)
                    continue
                self.assertEqual(self.session(runner), 1)
                expected = dict(before, key_id="kid-new", last_seen_at=NOW, updated_at=NOW)
                if state == "lost":
                    expected.update(state="active", state_reason=SESSION_REASON)
                self.assertEqual(self.row(runner), expected)

    def test_a_session_decided_on_a_retired_generation_changes_nothing_in_any_state(self):
        for state in RUNNER_STATES:
            with self.subTest(state=state):
                runner = self.runner_in(state)
                before = self.row(runner)
                self.assertEqual(self.session(runner, generation=1), 0)
                self.assertEqual(self.row(runner), before)

    # -- change_runner_state: an admin's move, decided in Rust, guarded by its from-state -----

    def change(self, runner, move):
        from_state, _command, to, approves, revokes, retires = move
        return self.execute(query("change_runner_state"), self.org, runner, from_state, to, "operator", NOW,
                            None, NOW if approves else None, NOW if revokes else None, int(retires)).rowcount

    def test_every_admin_move_writes_exactly_its_stamps(self):
        for move in ADMIN_MOVES:
            from_state, command, to, approves, revokes, retires = move
            with self.subTest(from_state=from_state, command=command):
                runner = self.runner_in(from_state)
                before = self.row(runner)
                self.assertEqual(self.change(runner, move), 1)
                expected = dict(before, state=to, state_reason="operator", updated_at=NOW)
                if approves:
                    expected["approved_at"] = NOW
                if revokes:
                    expected["revoked_at"] = NOW
                if retires:
                    expected["credential_generation"] = before["credential_generation"] + 1
                self.assertEqual(self.row(runner), expected)

    def test_an_admin_move_decided_from_another_state_changes_nothing(self):
        for state in RUNNER_STATES:
            runner = self.runner_in(state)
            before = self.row(runner)
            for move in ADMIN_MOVES:
                if move[0] == state:
                    continue
                with self.subTest(state=state, move=move[:2]):
                    self.assertEqual(self.change(runner, move), 0)
                    self.assertEqual(self.row(runner), before)

    def test_an_approval_sets_the_key_id_it_is_given_and_keeps_it_otherwise(self):
        runner = self.runner_in("pending_approval")
        self.execute(query("change_runner_state"), self.org, runner, "pending_approval", "active", "ok", NOW,
                     "kid-approved", NOW, None, 0)
        self.assertEqual(self.row(runner)["key_id"], "kid-approved")
        self.change(runner, ADMIN_MOVES[2])  # active → draining, no key id
        self.assertEqual(self.row(runner)["key_id"], "kid-approved")


class EphemeralRunnerTests(SchemaTest):
    """Migration 0020: an ephemeral runner takes one job. Its grant drains it, nothing makes it
    active again, and the cron pass finds it once its claim ended."""

    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.runner = self.w.runner(self.org)
        self.job = self.w.job(self.org)

    # The grant as the production statements write it (not their tests, which run there).
    known = ProductionStatementTests.known
    grant = ProductionStatementTests.grant

    def make_ephemeral(self):
        """This world's runner from now on: an ephemeral one (whether a runner is ephemeral
        never changes, so a new one)."""
        self.runner = self.w.runner(self.org, ephemeral=1, max_concurrent_jobs=1)

    def runner_state(self):
        return self.w.one("SELECT state, state_reason, active_claims FROM runners WHERE id = ?", self.runner)

    def spent(self):
        return self.execute(query("runners/spent_ephemeral"), 100).fetchall()

    def test_only_a_one_claim_bootstrap_runner_is_ephemeral(self):
        self.assertRefused(self.w.runner, self.org, ephemeral=1, max_concurrent_jobs=2,
                           message="CHECK constraint failed")
        one = self.w.runner(self.org, ephemeral=1, max_concurrent_jobs=1)
        self.assertEqual(self.w.one("SELECT ephemeral FROM runners WHERE id = ?", one)[0], 1)
        # Decided at registration, once.
        self.assertRefused(self.execute, "UPDATE runners SET ephemeral = 0 WHERE id = ?", one,
                           message="runner_ephemeral_is_final")
        self.execute("UPDATE runners SET ephemeral = 1 WHERE id = ?", one)  # the same value: no change

    def test_the_grant_drains_an_ephemeral_runner_and_no_other(self):
        self.grant(1)
        self.assertEqual(self.runner_state(), ("active", None, 1))
        self.job = self.w.job(self.org)
        self.make_ephemeral()
        self.grant(1)
        self.assertEqual(self.runner_state(), (EPHEMERAL_DRAINED, EPHEMERAL_DRAINED_REASON, 1))
        # Spent: it takes no second job.
        other = self.w.job(self.org)
        self.assertEqual(self.execute(query("grant_runner"), self.runner, NOW, CLAIMING_STATES,
                                      EPHEMERAL_DRAINED, EPHEMERAL_DRAINED_REASON).rowcount, 0)
        self.assertNotEqual(other, None)

    def test_a_drained_ephemeral_runner_is_never_active_again_and_is_found_once_its_claim_ended(self):
        self.make_ephemeral()
        claim = self.grant(1)
        self.assertEqual(self.spent(), [])  # it holds its claim
        for state in ("active", "lost", "pending_approval"):
            self.assertRefused(self.execute, "UPDATE runners SET state = ? WHERE id = ?", state, self.runner,
                               message="ephemeral_runner_is_spent")
        # Its claim ends (released, as a completion or a hand-back leaves it).
        self.execute("UPDATE job_claims SET state = 'released', end_reason = 'completed', ended_at = ?"
                     " WHERE id = ?", NOW, claim)
        self.execute("UPDATE runners SET active_claims = 0 WHERE id = ?", self.runner)
        self.assertEqual(self.spent(), [(self.runner, self.org)])
        # The cron pass's revoke (change_runner_state.sql, as an admin's).
        self.assertEqual(self.execute(query("change_runner_state"), self.org, self.runner, "draining", "revoked",
                                      "ephemeral: its one job ended", NOW, None, None, NOW, 1).rowcount, 1)
        self.assertEqual(self.spent(), [])
        # A runner that stays may come back from draining as before.
        stays = self.w.runner(self.org)
        self.execute("UPDATE runners SET state = 'draining' WHERE id = ?", stays)
        self.execute("UPDATE runners SET state = 'active' WHERE id = ?", stays)

    def retired_deletes(self, cutoff):
        """store::runners::delete_retired_ephemeral's batch: the rows each statement deleted."""
        return [self.execute(query(f"runners/{name}"), cutoff, 100).rowcount for name in (
            "delete_retired_ephemeral_events", "delete_retired_ephemeral_files",
            "delete_retired_ephemeral_challenges", "delete_retired_ephemeral_credentials",
            "delete_retired_ephemeral")]

    def retire(self, runner, at=NOW):
        self.assertEqual(self.execute(query("change_runner_state"), self.org, runner, "draining", "revoked",
                                      "ephemeral: its one job ended", at, None, None, at, 1).rowcount, 1)

    def runner_event(self, runner, kind="runner.revoked"):
        self.w.insert("job_events", {"organization_id": self.org, "runner_id": runner,
                                     "actor": "system:cron", "type": kind, "at": NOW})

    def test_a_retired_ephemeral_runner_goes_after_its_time_once_nothing_of_its_job_names_it(self):
        # One that never took a job: drained, then retired, with its own events.
        idle = self.w.runner(self.org, ephemeral=1, max_concurrent_jobs=1)
        self.execute("UPDATE runners SET state = 'draining' WHERE id = ?", idle)
        self.runner_event(idle, "runner.registered")
        # Its events stay while it is not retired.
        self.assertRefused(self.execute, "DELETE FROM job_events WHERE runner_id = ?", idle,
                           message="job_events_are_append_only")
        self.retire(idle)
        self.runner_event(idle)
        # One that took its job: its claim still names it (its job not archived).
        self.make_ephemeral()
        claim = self.grant(1)
        self.execute("UPDATE job_claims SET state = 'released', end_reason = 'completed', ended_at = ?"
                     " WHERE id = ?", NOW, claim)
        self.execute("UPDATE runners SET active_claims = 0 WHERE id = ?", self.runner)
        self.retire(self.runner)
        # And a runner that stays, revoked: never deleted by this pass.
        stays = self.w.runner(self.org)
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, stays)
        # Not yet its time: nothing goes.
        self.assertEqual(self.retired_deletes(NOW), [0, 0, 0, 0, 0])
        # Its time: the idle one goes with its two events; the one its claim names stays.
        self.assertEqual(self.retired_deletes(NOW + 1), [2, 0, 0, 0, 1])
        remaining = {r[0] for r in self.execute("SELECT id FROM runners WHERE organization_id = ?", self.org)}
        self.assertNotIn(idle, remaining)
        self.assertTrue({self.runner, stays} <= remaining)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_events WHERE runner_id = ?", idle)[0], 0)
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        # Again: nothing more (bounded and idempotent).
        self.assertEqual(self.retired_deletes(NOW + 1), [0, 0, 0, 0, 0])

    def test_the_pass_reads_the_index_of_spent_runners(self):
        plan = query_plan(self.conn, query("runners/spent_ephemeral"), (100,))
        self.assertEqual(plan, ["SCAN runners USING INDEX runners_ephemeral_spent"], plan)
        plan = query_plan(self.conn, query("runners/delete_retired_ephemeral"), (NOW, 100))
        self.assertIn("SEARCH runners USING INDEX runners_ephemeral_retired (revoked_at<?)", plan, plan)
        self.assertFalse([d for d in plan if d.startswith("SCAN")], plan)
