"""Releases, jobs, claims, batches, streams, completions, evidence, bounds and the audit trail.

Run from the repository root: python3 -m unittest discover -s tests/schema
"""

import sqlite3
import unittest

from harness import *  # noqa: F401,F403 (the world and the statements every suite uses)


# =============================================================================================
# Release registry and job subjects
# =============================================================================================


class ReleaseTests(SchemaTest):
    def test_release_version_content_is_immutable(self):
        org = self.w.org()
        version = self.w.release(org)["version_id"]
        for column, value in (("content", '{"entrypoint":"evil:run"}'), ("content_hash", sha("evil")),
                              ("artifact_id", "art_other"), ("created_at", NOW + 1)):
            with self.subTest(column=column):
                self.assertRefused(self.execute, f"UPDATE release_versions SET {column} = ? WHERE id = ?",
                                   value, version, message="release_version_is_immutable")

    def test_release_version_ids_are_increasing_integers(self):
        org = self.w.org()
        first = self.w.release(org)["version_id"]
        second = self.w.release(org)["version_id"]
        self.assertIsInstance(first, int)
        self.assertGreater(second, first)

    def test_promotion_is_once_per_version_and_environment(self):
        org = self.w.org()
        version = self.w.release(org, environments=("dev",))["version_id"]
        self.w.promote(org, version, "prod")
        self.assertRefused(self.w.promote, org, version, "dev", message="UNIQUE constraint failed")

    def test_job_binds_only_a_version_promoted_to_its_environment(self):
        org = self.w.org()
        release = self.w.release(org, environments=("dev",))
        self.w.job(org, release=release, subject_environment="dev")
        self.assertRefused(self.w.job, org, release=release, subject_environment="prod",
                           message="FOREIGN KEY constraint failed")

    def test_job_subject_is_the_version_artifact_kind_and_content_hash(self):
        org = self.w.org()
        release = self.w.release(org)
        other = self.w.release(org, kind="scorer")
        for name, overrides in (
            ("content hash of another version", {"subject_content_hash": other["content_hash"]}),
            ("artifact of another version", {"subject_artifact_id": other["artifact_id"], "subject_kind": "scorer"}),
            ("kind other than the artifact's", {"subject_kind": "tool"}),
        ):
            with self.subTest(name):
                self.assertRefused(self.w.job, org, release=release, message="FOREIGN KEY constraint failed",
                                   **overrides)

    def test_job_cannot_bind_another_organizations_version(self):
        mine, theirs = self.w.org(), self.w.org()
        release = self.w.release(theirs)
        self.assertRefused(self.w.job, mine, release=release, message="FOREIGN KEY constraint failed")

    def test_executable_target_key_is_unique_per_organization(self):
        a, b = self.w.org(), self.w.org()

        def target(org, key, **kw):
            row = {"id": self.w.uid("tgt"), "organization_id": org, "target_key": key, "repository": "repo",
                   "entrypoint": "main:run", "requirements": "{}", "created_at": NOW, "updated_at": NOW}
            row.update(kw)
            self.w.insert("executable_targets", row)

        target(a, "grader")
        target(b, "grader")
        self.assertRefused(target, a, "grader", message="UNIQUE constraint failed")
        release = self.w.release(a)
        target(a, "bound", version_id=release["version_id"], content_hash=release["content_hash"])
        self.assertRefused(target, a, "half-bound", version_id=release["version_id"], message="CHECK constraint failed")
        self.assertRefused(target, b, "foreign", version_id=release["version_id"],
                           content_hash=release["content_hash"], message="FOREIGN KEY constraint failed")


# =============================================================================================
# Jobs
# =============================================================================================


class JobTests(SchemaTest):
    def test_idempotency_key_is_unique_per_organization_but_reusable_across_organizations(self):
        a, b = self.w.org(), self.w.org()
        self.w.job(a, idempotency_key="nightly-42")
        self.w.job(b, idempotency_key="nightly-42")
        self.assertRefused(self.w.job, a, idempotency_key="nightly-42", message="UNIQUE constraint failed")

    def test_job_is_born_queued_at_attempt_zero(self):
        org = self.w.org()
        self.assertRefused(self.w.job, org, state="running", message="job_must_start_queued")
        self.assertRefused(self.w.job, org, dispatch_attempt=1, message="job_must_start_queued")

    def test_job_intent_is_immutable(self):
        org = self.w.org()
        job = self.w.job(org)
        for column, value in (("input", '{"question":"3+3"}'), ("input_hash", sha("x")),
                              ("requirements", "{}"), ("runtime", "nodejs20"), ("tags", '["gpu"]'),
                              ("idempotency_key", "other"), ("intent_hash", sha("y"))):
            with self.subTest(column=column):
                self.assertRefused(self.execute, f"UPDATE jobs SET {column} = ? WHERE id = ?", value, job,
                                   message="job_intent_is_immutable")

    def test_finished_job_never_changes_state(self):
        org = self.w.org()
        job = self.w.job(org)
        self.execute("UPDATE jobs SET state = 'cancelled', cancel_reason = 'x', finished_at = ? WHERE id = ?", NOW, job)
        self.assertRefused(self.execute, "UPDATE jobs SET state = 'queued', finished_at = NULL WHERE id = ?", job,
                           message="job_is_finished")

    def test_job_is_never_requeued_after_its_third_attempt(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        for attempt in (1, 2, 3):
            self.w.grant(job, runner)
            self.w.reap(job, runner)
        self.assertEqual(self.w.job_row(job)[:2], ("lost", 3))
        self.assertRefused(self.execute, "UPDATE jobs SET state = 'queued' WHERE id = ?", job,
                           message="CHECK constraint failed")
        self.assertRefused(self.w.grant, job, runner)  # no fourth claim either

    def test_a_free_hand_back_does_not_use_one_of_the_three_attempts(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        self.w.grant(job, runner)
        self.w.hand_back(job, runner)
        for _ in range(3):  # three counted attempts after the free one: 2, 3, 4
            self.w.grant(job, runner)
            self.w.reap(job, runner)
        self.assertEqual(self.w.job_row(job)[:2], ("lost", 4))
        self.assertRefused(self.execute, "UPDATE jobs SET state = 'queued' WHERE id = ?", job,
                           message="CHECK constraint failed")
        self.assertRefused(self.w.grant, job, runner)

    def test_a_job_gets_five_free_hand_backs_and_eight_dispatches_at_most(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        for _ in range(5):
            self.w.grant(job, runner)
            self.w.hand_back(job, runner)
        self.assertEqual(self.one_job(job), ("queued", 5, 5))
        self.w.grant(job, runner)
        self.assertRefused(self.w.hand_back, job, runner, message="CHECK constraint failed")  # a sixth free one
        self.w.hand_back(job, runner, free=False)  # counted: attempt 6 is the first of three
        self.w.grant(job, runner)
        self.w.hand_back(job, runner, free=False)
        self.assertEqual(self.one_job(job), ("queued", 7, 5))
        self.w.grant(job, runner)
        self.assertRefused(self.w.hand_back, job, runner, free=False, message="CHECK constraint failed")
        self.w.reap(job, runner)
        self.assertEqual(self.one_job(job), ("lost", 8, 5))
        self.assertRefused(self.w.grant, job, runner)
        self.assertRefused(self.execute, "UPDATE jobs SET dispatch_attempt = 9 WHERE id = ?", job,
                           message="CHECK constraint failed")

    def test_released_attempts_never_go_back_and_a_job_is_born_with_none(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        self.w.grant(job, runner)
        self.w.hand_back(job, runner)
        self.assertRefused(self.execute, "UPDATE jobs SET released_attempts = 0 WHERE id = ?", job,
                           message="job_dispatch_attempt_only_grows")
        self.assertRefused(self.execute, "UPDATE jobs SET released_attempts = 2 WHERE id = ?", job,
                           message="CHECK constraint failed")  # more than were dispatched
        self.assertRefused(self.w.job, org, released_attempts=1, message="job_must_start_queued")

    def test_the_bounds_are_the_protocol_crates(self):
        text = pathlib.Path(ROOT, "crates", "protocol", "src", "recovery.rs").read_text()
        consts = dict(re.findall(r"pub const (MAX_\w+): u32 = (\d+);", text))
        self.assertEqual(consts, {"MAX_DISPATCH_ATTEMPTS": "3", "MAX_FREE_HAND_BACKS": "5"})
        self.assertIn("MAX_DISPATCHES: u32 = MAX_DISPATCH_ATTEMPTS + MAX_FREE_HAND_BACKS", text)
        org = self.w.org()
        job = self.w.job(org)
        self.assertRefused(self.execute, "UPDATE jobs SET dispatch_attempt = 3 + 5 + 1 WHERE id = ?", job,
                           message="CHECK constraint failed")

    def one_job(self, job):
        return tuple(self.w.one("SELECT state, dispatch_attempt, released_attempts FROM jobs WHERE id = ?", job))

    def test_dispatch_attempt_never_goes_back(self):
        org, runner, job, _ = self.claimed_job()
        self.w.reap(job, runner)
        self.assertRefused(self.execute, "UPDATE jobs SET dispatch_attempt = 0 WHERE id = ?", job,
                           message="job_dispatch_attempt_only_grows")

    def test_job_holds_a_claim_and_lease_exactly_while_claimed_running_or_cancelling(self):
        org, runner, job, claim = self.claimed_job()
        queued = self.w.job(org)
        self.assertRefused(self.execute, "UPDATE jobs SET lease_expires_at = ? WHERE id = ?", NOW, queued,
                           message="CHECK constraint failed")
        self.assertRefused(self.execute, "UPDATE jobs SET lease_expires_at = NULL WHERE id = ?", job,
                           message="CHECK constraint failed")
        self.assertRefused(
            self.execute, "UPDATE jobs SET state = 'queued', lease_expires_at = NULL WHERE id = ?", job,
            message="CHECK constraint failed")  # still pointing at its claim
        self.assertRefused(self.execute, "UPDATE jobs SET state = 'cancel_requested' WHERE id = ?", job,
                           message="CHECK constraint failed")  # without a reason
        self.execute("UPDATE jobs SET state = 'cancel_requested', cancel_reason = 'user' WHERE id = ?", job)


# =============================================================================================
# Claims
# =============================================================================================


class ClaimTests(SchemaTest):
    def test_claim_for_queued_job_is_granted(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        claim = self.w.grant(job, runner)
        self.assertEqual(self.w.job_row(job)[:3], ("claimed", 1, claim))
        self.assertEqual(self.w.active_claims(runner), 1)
        self.w.start(job)
        self.assertEqual(self.w.job_row(job)[0], "running")

    def test_claim_refused_for_a_job_that_is_not_queued(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=10)

        def claimed():
            return self.claimed_job(org=org, runner=runner)[2]

        def running():
            job = claimed()
            self.w.start(job)
            return job

        def cancelling():
            job = claimed()
            self.execute("UPDATE jobs SET state = 'cancel_requested', cancel_reason = 'x' WHERE id = ?", job)
            return job

        def cancelled():
            job = self.w.job(org)
            self.execute("UPDATE jobs SET state = 'cancelled', finished_at = ? WHERE id = ?", NOW, job)
            return job

        def succeeded():
            _, _, job, claim = self.claimed_job(org=org, runner=runner)
            self.w.complete(job, claim, runner, 1)
            return job

        def lost():
            job = claimed()
            self.execute("UPDATE job_claims SET state = 'lost', ended_at = ? WHERE job_id = ?", NOW, job)
            self.execute("UPDATE jobs SET state = 'lost', active_claim_id = NULL, lease_expires_at = NULL"
                         " WHERE id = ?", job)
            return job

        for make in (claimed, running, cancelling, cancelled, succeeded, lost):
            with self.subTest(state=make.__name__):
                job = make()
                before = self.w.job_row(job)
                capacity = self.w.active_claims(runner)
                attempt = before[1] + 1 if before[1] < 3 else 3
                self.assertRefused(self.w.grant, job, runner, attempt=attempt,
                                   message="claim_requires_queued_job")
                self.assertEqual(self.w.job_row(job), before)
                self.assertEqual(self.w.active_claims(runner), capacity)

    def test_claim_refused_unless_it_is_the_next_attempt(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        for attempt in (0, 2, 3):
            with self.subTest(attempt=attempt):
                self.assertRefused(self.w.grant, job, runner, attempt=attempt, message="claim_requires_queued_job")
        self.assertEqual(self.w.job_row(job)[:2], ("queued", 0))

    def test_claim_refused_for_a_runner_that_is_not_active(self):
        org = self.w.org()
        job = self.w.job(org)
        pending = self.w.keypair_runner(org)
        draining = self.w.runner(org, state="draining")
        lost = self.w.runner(org, state="lost")
        revoked = self.w.runner(org, state="revoked", revoked_at=NOW)
        for runner in (pending, draining, lost, revoked):
            with self.subTest(runner=runner):
                self.assertRefused(self.w.grant, job, runner, message="claim_requires_active_runner")
        self.assertEqual(self.w.job_row(job)[:2], ("queued", 0))

    def test_one_active_claim_per_job(self):
        # A faulty requeue that forgets to end the claim: the job is queued again, so the next
        # grant passes the queued-job trigger, and only the partial unique index stops a second
        # active claim.
        org, runner, job, first = self.claimed_job()
        self.execute("UPDATE jobs SET state = 'queued', active_claim_id = NULL, lease_expires_at = NULL"
                     " WHERE id = ?", job)
        self.assertRefused(self.w.grant, job, runner, message="UNIQUE constraint failed: job_claims.job_id")
        self.assertEqual(self.w.job_row(job)[:3], ("queued", 1, None))
        self.assertEqual(self.w.active_claims(runner), 1)

    def test_one_claim_per_job_and_attempt(self):
        # Two claim rows for attempt 1 written before the job moves, the first already ended so
        # that the one-active-claim index is not what stops the second: UNIQUE (job_id,
        # dispatch_attempt) is.
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        first_id, first = self.w.grant_statements(job, runner, attempt=1)
        _, second = self.w.grant_statements(job, runner, attempt=1)
        end_first = ("UPDATE job_claims SET state = 'lost', ended_at = ? WHERE id = ?", (NOW, first_id))
        self.assertRefused(batch, self.conn, [first[0], end_first, second[0]],
                           message="UNIQUE constraint failed: job_claims.job_id, job_claims.dispatch_attempt")
        self.assertEqual(self.w.one("SELECT count(*) FROM job_claims")[0], 0)
        # And after a loss the old attempt's number cannot be granted again.
        self.w.grant(job, runner)
        self.w.reap(job, runner)
        self.assertRefused(self.w.grant, job, runner, attempt=1)
        self.w.grant(job, runner, attempt=2)

    def test_claim_nonce_is_never_reused(self):
        org = self.w.org()
        runner = self.w.runner(org)
        a, b = self.w.job(org), self.w.job(org)
        self.w.grant(a, runner, nonce="n" * 32)
        self.assertRefused(self.w.grant, b, runner, nonce="n" * 32, message="UNIQUE constraint failed: job_claims.nonce")
        self.assertEqual(self.w.job_row(b)[:2], ("queued", 0))

    def test_claim_cannot_join_a_job_and_a_runner_of_different_organizations(self):
        mine, theirs = self.w.org(), self.w.org()
        job = self.w.job(mine)
        foreign_runner = self.w.runner(theirs)
        _, grant = self.w.grant_statements(job, foreign_runner, org=mine)
        self.assertRefused(self.conn.execute, *grant[0], message="FOREIGN KEY constraint failed")  # the claim row alone
        self.assertRefused(self.w.grant, job, foreign_runner, org=theirs, message="claim_requires_queued_job")
        self.assertEqual(self.w.job_row(job)[:2], ("queued", 0))

    def test_ended_claim_is_never_reactivated_or_reassigned(self):
        org, runner, job, claim = self.claimed_job()
        other_runner = self.w.runner(org)
        self.execute("UPDATE job_claims SET runner_id = ? WHERE id = ? AND 0", other_runner, claim)  # no row: fine
        self.assertRefused(self.execute, "UPDATE job_claims SET runner_id = ? WHERE id = ?", other_runner, claim,
                           message="claim_is_over")
        self.w.reap(job, runner)
        self.assertRefused(self.execute, "UPDATE job_claims SET state = 'active', ended_at = NULL WHERE id = ?",
                           claim, message="claim_is_over")

    def test_job_points_only_at_its_own_active_claim_at_its_attempt(self):
        org, runner, job, claim = self.claimed_job()
        _, _, other_job, other_claim = self.claimed_job(org=org, runner=runner)
        self.assertRefused(self.execute, "UPDATE jobs SET active_claim_id = ? WHERE id = ?", other_claim, job,
                           message="job_claim_mismatch")
        self.w.reap(job, runner)  # claim lost, job queued at attempt 1
        self.assertRefused(
            self.execute,
            "UPDATE jobs SET state = 'claimed', active_claim_id = ?, lease_expires_at = ? WHERE id = ?",
            claim, NOW, job, message="job_claim_mismatch")

    def test_requeued_job_is_claimed_again_at_the_next_attempt(self):
        org, runner, job, first = self.claimed_job()
        self.w.reap(job, runner)
        self.assertEqual(self.w.job_row(job)[:3], ("queued", 1, None))
        second = self.w.grant(job, runner)
        self.assertEqual(self.w.job_row(job)[:3], ("claimed", 2, second))
        states = self.conn.execute("SELECT dispatch_attempt, state FROM job_claims WHERE job_id = ?"
                                   " ORDER BY dispatch_attempt", (job,)).fetchall()
        self.assertEqual(states, [(1, "lost"), (2, "active")])


# =============================================================================================
# Batches are all or nothing
# =============================================================================================


class BatchTests(SchemaTest):
    def test_failed_claim_insert_undoes_a_successful_job_update_in_the_same_batch(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        self.w.grant(self.w.job(org), runner, nonce="taken" * 4)
        before = self.w.job_row(job)
        _, grant = self.w.grant_statements(job, runner, nonce="taken" * 4)
        touch = ("UPDATE jobs SET updated_at = ? WHERE id = ? AND state = 'queued'", (NOW + 5, job))
        self.conn.execute("BEGIN")
        self.assertEqual(self.conn.execute(*touch).rowcount, 1)  # the job UPDATE succeeds…
        self.assertRefused(self.conn.execute, *grant[0])  # …and the claim INSERT fails,
        self.conn.execute("ROLLBACK")  # which D1 turns into a rollback of the batch
        self.assertEqual(self.w.job_row(job), before)
        # The same through the batch helper, in one call.
        self.assertRefused(batch, self.conn, [touch] + grant)
        self.assertEqual(self.w.job_row(job), before)

    def test_grant_in_job_first_order_is_refused_and_leaves_the_job_unchanged(self):
        # The contract puts the claim INSERT first; a batch that moves the job first is refused
        # (the job would point at a claim that does not exist yet) and nothing of it remains.
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        before = self.w.job_row(job)
        _, grant = self.w.grant_statements(job, runner)
        claim_insert, job_update, runner_update, event = grant
        self.assertRefused(batch, self.conn, [job_update, claim_insert, runner_update, event],
                           message="job_claim_mismatch")
        self.assertEqual(self.w.job_row(job), before)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_claims")[0], 0)

    def test_grant_at_capacity_rolls_back_the_claim_and_the_job(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=1)
        self.w.grant(self.w.job(org), runner)
        job = self.w.job(org)
        before = self.w.job_row(job)
        events_before = self.w.one("SELECT count(*) FROM job_events")[0]
        # Claim INSERT and job UPDATE succeed; the runner's `active_claims + 1` meets the
        # named capacity guard.
        self.assertRefused(self.w.grant, job, runner, message="runner_at_capacity")
        self.assertEqual(self.w.job_row(job), before)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_claims WHERE job_id = ?", job)[0], 0)
        self.assertEqual(self.w.active_claims(runner), 1)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_events")[0], events_before)

    def test_guarded_update_that_matches_nothing_does_not_fail_a_batch(self):
        # Why the guards above are constraints: a WHERE guard alone lets the batch commit.
        org, runner, job, _ = self.claimed_job()
        batch(self.conn, [("UPDATE jobs SET updated_at = ? WHERE id = ? AND state = 'queued'", (NOW + 9, job))])
        self.assertEqual(self.w.job_row(job)[4], NOW)


# =============================================================================================
# Stream custody
# =============================================================================================


class StreamTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org, self.runner, self.job, self.claim = self.claimed_job()

    def chunk(self, sequence, previous, **kw):
        return self.w.chunk(self.job, self.claim, 1, sequence, previous, **kw)

    def test_a_gap_free_chain_is_stored(self):
        head = self.w.stream(self.job, self.claim, 1, 3)
        rows = self.conn.execute("SELECT sequence, checksum FROM stream_chunks WHERE job_id = ?"
                                 " ORDER BY sequence", (self.job,)).fetchall()
        self.assertEqual([r[0] for r in rows], [0, 1, 2])
        self.assertEqual(rows[-1][1], head)

    def test_first_chunk_has_no_previous_checksum_and_later_ones_do(self):
        self.assertRefused(self.w.append, self.chunk(0, sha("x")), message="CHECK constraint failed")
        c0 = self.w.append(self.chunk(0, None))
        self.assertRefused(self.w.append, self.chunk(1, None))  # the chain trigger fires before the CHECK
        self.w.append(self.chunk(1, c0))

    def test_chunk_after_a_gap_is_refused(self):
        c0 = self.w.append(self.chunk(0, None))
        self.assertRefused(self.w.append, self.chunk(2, c0), message="stream_chunk_breaks_chain")
        self.assertRefused(self.w.append, self.chunk(5, sha("anything")), message="stream_chunk_breaks_chain")

    def test_chunk_with_wrong_previous_checksum_is_refused(self):
        c0 = self.w.append(self.chunk(0, None))
        c1 = self.w.append(self.chunk(1, c0))
        self.assertRefused(self.w.append, self.chunk(2, c0), message="stream_chunk_breaks_chain")
        self.w.append(self.chunk(2, c1))

    def test_duplicate_sequence_is_refused(self):
        c0 = self.w.append(self.chunk(0, None))
        self.w.append(self.chunk(1, c0))
        self.assertRefused(self.w.append, self.chunk(1, c0, payload={"message": "forked"}),
                           message="UNIQUE constraint failed")
        self.assertRefused(self.w.append, self.chunk(0, None, payload={"message": "restart"}),
                           message="UNIQUE constraint failed")

    def test_duplicate_checksum_is_refused(self):
        c0 = self.w.append(self.chunk(0, None))
        c1 = self.w.append(self.chunk(1, c0))
        self.assertRefused(self.w.append, self.chunk(2, c1, checksum=c0),
                           message="UNIQUE constraint failed: stream_chunks.job_id, stream_chunks.checksum")

    def test_chunk_must_name_the_claim_of_its_job_and_attempt(self):
        _, _, other_job, other_claim = self.claimed_job(org=self.org, runner=self.runner)
        self.assertRefused(self.w.append, self.w.chunk(self.job, other_claim, 1, 0, None),
                           message="FOREIGN KEY constraint failed")
        self.assertRefused(self.w.append, self.w.chunk(self.job, self.claim, 2, 0, None),
                           message="FOREIGN KEY constraint failed")

    def test_chunk_refused_once_the_claim_has_ended(self):
        c0 = self.w.append(self.chunk(0, None))
        self.w.reap(self.job, self.runner)
        self.assertRefused(self.w.append, self.chunk(1, c0), message="stream_claim_not_active")

    def test_next_attempt_starts_its_own_chain_at_zero(self):
        self.w.stream(self.job, self.claim, 1, 2)
        self.w.reap(self.job, self.runner)
        second = self.w.grant(self.job, self.runner)
        self.assertRefused(self.w.append, self.w.chunk(self.job, second, 2, 1, sha("x")),
                           message="stream_chunk_breaks_chain")
        c0 = self.w.append(self.w.chunk(self.job, second, 2, 0, None))
        self.w.append(self.w.chunk(self.job, second, 2, 1, c0))

    def test_stored_chunks_are_immutable(self):
        self.w.append(self.chunk(0, None))
        self.assertRefused(self.execute, "UPDATE stream_chunks SET payload = '{}' WHERE job_id = ?", self.job,
                           message="stream_chunks_are_immutable")


# =============================================================================================
# Completions
# =============================================================================================


class CompletionTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org, self.runner, self.job, self.claim = self.claimed_job()

    def store(self, **kwargs):
        row = self.w.completion_row(self.job, self.claim, self.runner, 1, **kwargs)
        self.w.insert("job_completions", row)
        return row

    def test_accepted_completion_finalizes_job_releases_claim_and_capacity(self):
        head = self.w.stream(self.job, self.claim, 1, 2)
        self.w.complete(self.job, self.claim, self.runner, 1, final_stream_checksum=head)
        self.assertEqual(self.w.job_row(self.job)[:4], ("succeeded", 1, None, None))
        self.assertEqual(self.w.one("SELECT state FROM job_claims WHERE id = ?", self.claim)[0], "released")
        self.assertEqual(self.w.one("SELECT active_claims, completed_jobs FROM runners WHERE id = ?",
                                    self.runner), (0, 1))

    def test_one_accepted_completion_per_job_while_other_decisions_repeat(self):
        self.w.complete(self.job, self.claim, self.runner, 1)
        for decision in ("duplicate", "duplicate", "conflict", "conflict"):
            self.store(decision=decision)
        self.assertRefused(self.store, decision="accepted")
        # Even bypassing the trigger's preconditions, the partial unique index holds.
        index = self.w.one("SELECT sql FROM sqlite_master WHERE name = 'job_completions_one_accepted_per_job'")[0]
        self.assertIn("UNIQUE", index)
        self.assertIn("WHERE decision = 'accepted'", index)
        counts = dict(self.conn.execute("SELECT decision, count(*) FROM job_completions WHERE job_id = ?"
                                        " GROUP BY decision", (self.job,)).fetchall())
        self.assertEqual(counts, {"accepted": 1, "duplicate": 2, "conflict": 2})

    def test_second_accepted_completion_breaks_the_unique_index(self):
        # Two accepted rows inserted back to back while the job still holds the claim: the
        # trigger passes both, the partial unique index refuses the second.
        first = self.w.completion_row(self.job, self.claim, self.runner, 1)
        second = self.w.completion_row(self.job, self.claim, self.runner, 1, status="failed")
        stmts = self.w.completion_statements(first)[:1] + self.w.completion_statements(second)[:1]
        self.assertRefused(batch, self.conn, stmts,
                           message="UNIQUE constraint failed: job_completions.job_id")

    def test_stale_attempt_completion_is_recorded_not_applied(self):
        self.w.reap(self.job, self.runner)
        second = self.w.grant(self.job, self.runner)
        self.assertRefused(self.w.complete, self.job, self.claim, self.runner, 1,
                           message="completion_not_from_active_claim")
        self.store(decision="stale")
        self.store(decision="stale")
        self.assertEqual(self.w.job_row(self.job)[:3], ("claimed", 2, second))
        self.w.complete(self.job, second, self.runner, 2)
        self.assertEqual(self.w.job_row(self.job)[0], "succeeded")

    def test_accepted_completion_must_close_the_stream_head(self):
        c0 = self.w.append(self.w.chunk(self.job, self.claim, 1, 0, None))
        c1 = self.w.append(self.w.chunk(self.job, self.claim, 1, 1, c0))
        for name, final in (("not the head", c0), ("nothing streamed", None), ("unknown", sha("?"))):
            with self.subTest(name):
                self.assertRefused(self.w.complete, self.job, self.claim, self.runner, 1,
                                   final_stream_checksum=final, message="completion_does_not_close_stream")
                self.assertEqual(self.w.job_row(self.job)[0], "claimed")
        self.w.complete(self.job, self.claim, self.runner, 1, final_stream_checksum=c1)

    def test_accepted_completion_without_stream_has_no_final_checksum(self):
        self.w.complete(self.job, self.claim, self.runner, 1, final_stream_checksum=None)
        self.assertEqual(self.w.job_row(self.job)[0], "succeeded")

    def test_accepted_completion_must_carry_the_job_input_hash(self):
        self.assertRefused(self.w.complete, self.job, self.claim, self.runner, 1, input_hash=sha("other"),
                           message="completion_input_hash_mismatch")

    def test_completion_names_a_claim_of_that_job_attempt_and_runner(self):
        other_runner = self.w.runner(self.org)
        _, _, other_job, other_claim = self.claimed_job(org=self.org, runner=self.runner)
        for name, kwargs in (
            ("another job's claim", {"claim_id": other_claim}),
            ("another attempt", {"dispatch_attempt": 2}),
            ("another runner", {"runner_id": other_runner}),
        ):
            with self.subTest(name):
                self.assertRefused(self.store, decision="stale", message="FOREIGN KEY constraint failed", **kwargs)

    def test_completions_are_append_only(self):
        row = self.store(decision="conflict")
        self.assertRefused(self.execute, "UPDATE job_completions SET decision = 'accepted' WHERE id = ?", row["id"],
                           message="job_completions_are_append_only")
        self.assertRefused(self.execute, "DELETE FROM job_completions WHERE id = ?", row["id"],
                           message="job_completions_are_append_only")


# =============================================================================================
# Evidence custody
# =============================================================================================


class EvidenceTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.runner = self.w.runner(self.org, max_concurrent_jobs=5)
        self.run = self.w.evaluation_run(self.org)

    def test_evidence_row_is_attached_to_at_most_one_accepted_completion_across_jobs(self):
        tr = self.w.test_result(self.org, self.run)
        cost = self.w.cost_record(self.org, self.run)
        own = self.w.test_result(self.org, self.run)
        _, _, job_a, claim_a = self.claimed_job(org=self.org, runner=self.runner)
        _, _, job_b, claim_b = self.claimed_job(org=self.org, runner=self.runner)
        self.w.complete(job_a, claim_a, self.runner, 1, evaluation_run_id=self.run,
                        evidence=[("test_result", tr), ("cost_record", cost)])
        before_b = self.w.job_row(job_b)
        capacity = self.w.active_claims(self.runner)
        # Job B names A's run (the service attaches the run first) with a row of it A did not
        # name: the whole batch rolls back, including B's finalization, claim release and
        # capacity decrement.
        self.assertRefused(self.w.complete, job_b, claim_b, self.runner, 1, evaluation_run_id=self.run,
                           evidence=[("test_result", own)],
                           message="UNIQUE constraint failed: completion_evidence.evidence_kind")
        self.assertEqual(self.w.job_row(job_b), before_b)
        self.assertEqual(self.w.one("SELECT state FROM job_claims WHERE id = ?", claim_b)[0], "active")
        self.assertEqual(self.w.active_claims(self.runner), capacity)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job_b)[0], 0)
        self.assertEqual(self.w.one("SELECT count(*) FROM completion_evidence WHERE job_id = ?", job_b)[0], 0)
        # With a run of its own and that run's row, B completes.
        run_b = self.w.evaluation_run(self.org)
        own_b = self.w.test_result(self.org, run_b)
        self.w.complete(job_b, claim_b, self.runner, 1, evaluation_run_id=run_b,
                        evidence=[("test_result", own_b)])
        owners = self.conn.execute("SELECT evidence_id, job_id FROM completion_evidence ORDER BY job_id").fetchall()
        self.assertEqual(sorted(owners), sorted([(self.run, job_a), (tr, job_a), (cost, job_a),
                                                 (run_b, job_b), (own_b, job_b)]))

    def test_a_run_in_custody_takes_no_new_rows(self):
        # Before any accepted completion names the run, rows are added freely.
        self.w.test_result(self.org, self.run)
        _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
        self.w.complete(job, claim, self.runner, 1, evaluation_run_id=self.run)
        for kind, add in [
            ("test result", lambda: self.w.test_result(self.org, self.run)),
            ("cost record", lambda: self.w.cost_record(self.org, self.run)),
            ("model call", lambda: self.w.model_call(self.org, self.run)),
            ("trace", lambda: self.w.trace(self.org, self.run)),
        ]:
            with self.subTest(kind=kind):
                self.assertRefused(add, message="evidence_run_in_custody")
        # Another run of the same organization is unaffected.
        self.w.test_result(self.org, self.w.evaluation_run(self.org))

    def test_a_stale_completion_does_not_take_custody(self):
        _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
        self.w.insert("job_completions", self.w.completion_row(
            job, claim, self.runner, 1, decision="stale", evaluation_run_id=self.run))
        self.w.test_result(self.org, self.run)

    def test_every_evidence_kind_is_in_custody_once(self):
        items = [
            ("evaluation_run", self.run),
            ("test_result", self.w.test_result(self.org, self.run)),
            ("cost_record", self.w.cost_record(self.org, self.run)),
            ("model_call", self.w.model_call(self.org, self.run)),
            ("trace", self.w.trace(self.org, self.run)),
        ]
        _, _, job_a, claim_a = self.claimed_job(org=self.org, runner=self.runner)
        self.w.complete(job_a, claim_a, self.runner, 1, evaluation_run_id=self.run, evidence=items)
        for item in items:
            with self.subTest(kind=item[0]):
                _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
                self.assertRefused(self.w.complete, job, claim, self.runner, 1, evaluation_run_id=self.run,
                                   evidence=[item], message="UNIQUE constraint failed")
                self.assertEqual(self.w.job_row(job)[0], "claimed")

    def test_evidence_must_exist_in_the_completion_run_and_organization(self):
        other_run = self.w.evaluation_run(self.org)
        other_org = self.w.org()
        foreign_run = self.w.evaluation_run(other_org)
        cases = [
            ("missing row", ("test_result", "tr_missing")),
            ("row of another run", ("test_result", self.w.test_result(self.org, other_run))),
            ("another run itself", ("evaluation_run", other_run)),
            ("row of another organization", ("model_call", self.w.model_call(other_org, foreign_run))),
            ("id of the wrong kind", ("trace", self.w.test_result(self.org, self.run))),
        ]
        for name, item in cases:
            with self.subTest(name):
                _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
                self.assertRefused(self.w.complete, job, claim, self.runner, 1, evaluation_run_id=self.run,
                                   evidence=[item], message="evidence_not_in_completion_run")
                self.assertEqual(self.w.job_row(job)[0], "claimed")
                self.execute("UPDATE jobs SET state = 'cancel_requested', cancel_reason = 'test' WHERE id = ?", job)

    def test_only_an_accepted_completion_takes_custody(self):
        tr = self.w.test_result(self.org, self.run)
        _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
        row = self.w.completion_row(job, claim, self.runner, 1, decision="conflict", evaluation_run_id=self.run)
        self.assertRefused(batch, self.conn, self.w.completion_statements(row, [("test_result", tr)]),
                           message="evidence_needs_accepted_completion")
        self.assertEqual(self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job)[0], 0)

    def test_evidence_custody_is_permanent(self):
        tr = self.w.test_result(self.org, self.run)
        _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
        self.w.complete(job, claim, self.runner, 1, evaluation_run_id=self.run, evidence=[("test_result", tr)])
        self.assertRefused(self.execute, "DELETE FROM completion_evidence WHERE evidence_id = ?", tr,
                           message="evidence_custody_is_permanent")
        self.assertRefused(self.execute, "UPDATE completion_evidence SET job_id = 'x' WHERE evidence_id = ?", tr,
                           message="evidence_custody_is_permanent")


# =============================================================================================
# Organization boundaries and time windows
# =============================================================================================


class BoundaryTests(SchemaTest):
    def test_rows_never_reference_another_organizations_rows(self):
        # Composite foreign keys (child_id, organization_id): a row of one organization cannot
        # point at a row of another, even with a valid id.
        w = self.w
        mine, theirs = w.org(), w.org()
        their_release = w.release(theirs, environments=())
        their_run = w.evaluation_run(theirs)
        their_runner = w.runner(theirs)
        _, my_runner, my_job, my_claim = self.claimed_job(org=mine)
        my_run = w.evaluation_run(mine)
        _, _, done_job, done_claim = self.claimed_job(org=mine, runner=my_runner)
        my_result = w.test_result(mine, my_run)
        done = w.complete(done_job, done_claim, my_runner, 1, evaluation_run_id=my_run)
        cases = [
            ("version of their artifact", lambda: w.insert("release_versions", {
                "artifact_id": their_release["artifact_id"], "organization_id": mine, "content": "{}",
                "content_hash": H({}), "created_at": NOW})),
            ("promotion of their version", lambda: w.promote(mine, their_release["version_id"], "dev")),
            ("credential for their runner", lambda: w.insert("runner_credentials", {
                "id": w.uid("cred"), "runner_id": their_runner, "organization_id": mine,
                "credential_generation": 1, "issued_via": "bootstrap", "scopes": "[]",
                "issued_at": NOW, "expires_at": NOW + 1000})),
            ("chunk filed under their organization", lambda: w.append(
                w.chunk(my_job, my_claim, 1, 0, None, organization_id=theirs))),
            ("completion filed under their organization", lambda: w.insert("job_completions", w.completion_row(
                my_job, my_claim, my_runner, 1, decision="stale", organization_id=theirs))),
            ("test result in their run", lambda: w.test_result(mine, their_run)),
            ("cost record in their run", lambda: w.cost_record(mine, their_run)),
            ("model call in their run", lambda: w.model_call(mine, their_run)),
            ("trace in their run", lambda: w.trace(mine, their_run)),
        ]
        for name, write in cases:
            with self.subTest(name):
                self.assertRefused(write, message="FOREIGN KEY constraint failed")
        # Custody names its completion's own job (a trigger since migration 0010: the custody
        # row outlives the completion row, so no foreign key can name it).
        self.assertRefused(lambda: w.insert("completion_evidence", {
            "evidence_kind": "test_result", "evidence_id": my_result, "completion_id": done,
            "job_id": my_job, "organization_id": mine, "attached_at": NOW}),
            message="evidence_needs_accepted_completion")

    def test_time_windows_and_end_times_are_recorded_in_order(self):
        w = self.w
        org, runner, job, claim = self.claimed_job()
        keypair = w.keypair_runner(org)
        fingerprint = w.one("SELECT fingerprint FROM runners WHERE id = ?", keypair)[0]

        def challenge(**kw):
            row = {"id": w.uid("chl"), "runner_id": keypair, "organization_id": org, "fingerprint": fingerprint,
                   "challenge_hash": sha(w.uid("c")), "issued_at": NOW, "expires_at": NOW + 60_000}
            row.update(kw)
            w.insert("runner_challenges", row)

        queued = w.job(org)
        cases = [
            ("claim envelope expiring when issued", lambda: self.execute(
                "UPDATE job_claims SET expires_at = issued_at WHERE id = ?", claim)),
            ("challenge expiring when issued", lambda: challenge(expires_at=NOW)),
            ("challenge consumed before issued", lambda: challenge(consumed_at=NOW - 1)),
            ("claim ended without an end time", lambda: self.execute(
                "UPDATE job_claims SET state = 'lost' WHERE id = ?", claim)),
            ("active claim with an end time", lambda: self.execute(
                "UPDATE job_claims SET ended_at = ? WHERE id = ?", NOW, claim)),
            ("job finished without a finish time", lambda: self.execute(
                "UPDATE jobs SET state = 'cancelled' WHERE id = ?", queued)),
        ]
        for name, write in cases:
            with self.subTest(name):
                self.assertRefused(write, message="CHECK constraint failed")

    def test_artifact_name_is_unique_per_organization_and_kind(self):
        a, b = self.w.org(), self.w.org()

        def artifact(org, kind, name):
            self.w.insert("release_artifacts", {"id": self.w.uid("art"), "organization_id": org, "kind": kind,
                                                "name": name, "created_at": NOW})

        artifact(a, "agent", "triage")
        artifact(a, "scorer", "triage")
        artifact(b, "agent", "triage")
        self.assertRefused(artifact, a, "agent", "triage", message="UNIQUE constraint failed")


# =============================================================================================
# Audit trail
# =============================================================================================


class AuditTests(SchemaTest):
    def test_job_events_are_append_only(self):
        org, runner, job, _ = self.claimed_job()
        event = self.w.one("SELECT id FROM job_events WHERE job_id = ?", job)[0]
        self.assertRefused(self.execute, "UPDATE job_events SET reason = 'edited' WHERE id = ?", event,
                           message="job_events_are_append_only")
        self.assertRefused(self.execute, "DELETE FROM job_events WHERE id = ?", event,
                           message="job_events_are_append_only")

    def test_admin_audit_events_need_no_job_and_types_are_dotted_lowercase(self):
        org = self.w.org()
        key = self.w.api_key(org)

        def event(kind, **kw):
            row = {"organization_id": org, "actor": "api_key:" + key, "type": kind, "at": NOW,
                   "detail": stable_json({"apiKeyId": key})}
            row.update(kw)
            self.w.insert("job_events", row)

        event("api_key.created")
        event("runner.revoked", runner_id=self.w.runner(org), reason="leaked")
        for bad in ("Runner.Revoked", "revoked", "runner revoked", ".x", "x."):
            with self.subTest(type=bad):
                self.assertRefused(event, bad, message="CHECK constraint failed")

    def test_event_cannot_reference_another_organizations_job_or_runner(self):
        mine, theirs = self.w.org(), self.w.org()
        job = self.w.job(theirs)
        runner = self.w.runner(theirs)
        for column, value in (("job_id", job), ("runner_id", runner)):
            with self.subTest(column=column):
                self.assertRefused(self.w.insert, "job_events", {
                    "organization_id": mine, column: value, "actor": "system:reaper", "type": "job.lost",
                    "at": NOW}, message="FOREIGN KEY constraint failed")
