"""Queues, counters and the queue history.

Run from the repository root: python3 -m unittest discover -s tests/schema
"""

import sqlite3
import unittest

from harness import *  # noqa: F401,F403 (the world and the statements every suite uses)


# =============================================================================================
# Migration 0016: queues
# =============================================================================================


class QueueTests(SchemaTest):
    """Each organization names at most 100 queues; a job past them is counted in q_overflow,
    and the queues view reads live jobs from one partial index only."""

    MAX_QUEUES = 100

    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.release = self.w.release(self.org)

    def enqueue(self, queue_id, org=None):
        """The enqueue's two statements, as src/routes/jobs.rs batches them: the queue named,
        then the job inserted into it (or into q_overflow). Returns the job's queue."""
        org = org or self.org
        self.execute(query("queues/register"), org, queue_id, f"queue {queue_id}",
                     '["agent","python3.12",false,null,["default"]]', NOW, self.MAX_QUEUES)
        release = self.release if org == self.org else self.w.release(org)
        job_input = {"q": queue_id}
        requirements = {"executionKind": "agent", "runtime": "python3.12"}
        job_id = self.w.uid("job")
        self.execute(query("jobs/insert"), job_id, org, self.w.uid("idem"),
                     H({"input": job_input}), release["kind"], release["artifact_id"],
                     release["version_id"], release["content_hash"], "prod", stable_json(job_input),
                     H(job_input), stable_json(requirements), "agent", "python3.12", 0, None, "[]",
                     NOW, queue_id).fetchall()
        return self.w.one("SELECT queue_id FROM jobs WHERE id = ?", job_id)[0]

    @staticmethod
    def qid(n):
        return "q_" + f"{n:016x}"

    def test_a_job_joins_its_queue_named_once_and_past_the_bound_the_overflow_queue(self):
        self.assertEqual(self.enqueue(self.qid(1)), self.qid(1))
        self.assertEqual(self.enqueue(self.qid(1)), self.qid(1), "the same queue, named once")
        self.assertEqual(self.w.one("SELECT count(*) FROM queues WHERE organization_id = ?", self.org)[0], 1)
        for n in range(2, self.MAX_QUEUES + 1):
            self.assertEqual(self.enqueue(self.qid(n)), self.qid(n))
        # The 101st queue is not named: its job is counted in q_overflow.
        self.assertEqual(self.enqueue(self.qid(1000)), "q_overflow")
        self.assertEqual(self.w.one("SELECT count(*) FROM queues WHERE organization_id = ?", self.org)[0],
                         self.MAX_QUEUES)
        # A queue the organization has keeps taking its jobs past the bound.
        self.assertEqual(self.enqueue(self.qid(7)), self.qid(7))
        # Another organization's bound is its own.
        other = self.w.org()
        self.assertEqual(self.enqueue(self.qid(1000), org=other), self.qid(1000))

    def test_a_queue_id_is_q_and_16_hex_digits(self):
        for bad in ("q_overflow", "q_" + "g" * 16, "x_" + "0" * 16, "q_" + "0" * 15):
            with self.subTest(bad=bad):
                self.assertRefused(self.execute, query("queues/register"), self.org, bad, "name", "[]", NOW, 100)
        self.enqueue(self.qid(1))
        self.assertRefused(self.execute, "UPDATE jobs SET queue_id = 'q_zz'")

    def test_the_live_read_counts_from_the_partial_index_alone(self):
        self.enqueue(self.qid(1))
        self.enqueue(self.qid(1))
        self.enqueue(self.qid(2))
        plan = query_plan(self.conn, query("queues/live"), (self.org, 50_000))
        text = " | ".join(plan)
        self.assertTrue(any("COVERING INDEX jobs_live_by_queue" in d for d in plan), text)
        self.assertFalse(any(d.startswith("SCAN jobs") for d in plan), text)
        rows = self.execute(query("queues/live"), self.org, 50_000).fetchall()
        self.assertEqual(sorted((q, s, n) for q, s, n, _ in rows),
                         [(self.qid(1), "queued", 2), (self.qid(2), "queued", 1)])
        # A finished job is not in the index, nor counted.
        self.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, cancel_reason = 'x' "
                     "WHERE queue_id = ?", NOW, self.qid(2))
        rows = self.execute(query("queues/live"), self.org, 50_000).fetchall()
        self.assertEqual([(q, n) for q, _, n, _ in rows], [(self.qid(1), 2)])
        # The bound holds: at most ?2 jobs are looked at.
        rows = self.execute(query("queues/live"), self.org, 1).fetchall()
        self.assertEqual(sum(n for _, _, n, _ in rows), 1)


class CounterTests(SchemaTest):
    """Migration 0017: counters only grow, one row per organization and name."""

    def test_a_counter_adds_up_and_never_falls(self):
        org, other = self.w.org(), self.w.org()
        for n in (1, 2, 3):
            self.execute(query("counters/add"), org, "stream_bytes", n)
        self.execute(query("counters/add"), other, "stream_bytes", 10)
        rows = self.execute(query("counters/read"), org).fetchall()
        self.assertIn(("stream_bytes", 6), rows)
        self.assertNotIn(("stream_bytes", 10), rows)
        self.assertRefused(self.execute, query("counters/add"), org, "stream_bytes", -7)
        self.assertEqual(self.w.one("SELECT value FROM organization_counters WHERE organization_id = ?"
                                    " AND name = 'stream_bytes'", org)[0], 6)
        self.execute(query("counters/add_deployment"), "reaper_passes")
        self.execute(query("counters/add_deployment"), "reaper_passes")
        self.assertIn(("reaper_passes", 2), self.execute(query("counters/read"), org).fetchall())


# =============================================================================================
# Migration 0021: queue history, sampled by the cron pass
# =============================================================================================


class QueueHistoryTests(SchemaTest):
    """Each organization's five-minute buckets: peaks, slot sums, finished jobs, a day at most."""

    BUCKET = 300_000
    SAMPLE = query("history/sample")
    READ = query("history/read")

    def sample(self, at, seen_since=None, organizations=1000):
        bucket = at - at % self.BUCKET
        self.execute(self.SAMPLE, bucket, NOW - 900_000 if seen_since is None else seen_since, organizations,
                     "queued", HELD_JOB_STATES, "active")
        return bucket

    def rows(self, org):
        return self.execute(self.READ, org, 0, 1000).fetchall()

    def finish(self, org, n=1, name="completions_succeeded"):
        self.execute(query("counters/add"), org, name, n)

    def test_a_bucket_keeps_its_peaks_sums_its_slots_and_counts_what_finished_in_it(self):
        org = self.w.org()
        busy = self.w.runner(org, max_concurrent_jobs=3, last_seen_at=NOW, active_claims=0)
        self.w.runner(org, max_concurrent_jobs=1, last_seen_at=NOW - 3_600_000)  # offline: not counted
        jobs = [self.w.job(org) for _ in range(3)]
        self.finish(org, 5)  # before the first sample: history before it is not this bucket's
        bucket = self.sample(NOW)
        self.assertEqual(self.rows(org), [(bucket, 1, 3, 0, 0, 3, 5, 5)])
        # A claim: 2 queued, 1 held; then it finishes (and one more fails out of attempts).
        self.w.grant(jobs[0], busy)
        self.sample(NOW + 60_000)
        self.finish(org, 1)
        self.finish(org, 1, "attempts_exhausted")
        self.finish(org, 4, "completions_duplicate")  # a refused completion finishes nothing
        self.sample(NOW + 120_000)
        [(at, samples, queued, running, busy_slots, slots, base, total)] = self.rows(org)
        self.assertEqual((at, samples, queued, running), (bucket, 3, 3, 1))
        self.assertEqual((busy_slots, slots), (1 + 1, 3 * 3), "busy and total slots summed over samples")
        self.assertEqual(total - base, 2, "two jobs finished in the bucket")
        # The next bucket's base is this one's last total: nothing counted twice.
        following = self.sample(bucket + self.BUCKET)
        self.assertEqual(self.rows(org)[-1][0], following)
        self.assertEqual(self.rows(org)[-1][6:], (7, 7))

    def test_an_organization_with_nothing_to_show_gets_no_row_and_others_are_apart(self):
        idle, busy = self.w.org(), self.w.org()
        self.w.runner(idle, last_seen_at=NOW - 3_600_000)  # offline, no jobs
        self.w.job(busy)
        self.sample(NOW)
        self.assertEqual(self.rows(idle), [])
        self.assertEqual(len(self.rows(busy)), 1)
        # Its counter moved: a row. Its first row starts the count (what finished before any
        # sample, e.g. before migration 0021, is no bucket's); the next finish is its bucket's.
        self.finish(idle, 2)
        self.sample(NOW + self.BUCKET)
        self.assertEqual([r[6:] for r in self.rows(idle)], [(2, 2)])
        self.finish(idle, 1)
        self.sample(NOW + 2 * self.BUCKET)
        self.assertEqual([r[6:] for r in self.rows(idle)], [(2, 2), (2, 3)])

    def test_an_organization_keeps_a_day_of_buckets_at_most(self):
        org = self.w.org()
        self.w.job(org)
        start = NOW - NOW % self.BUCKET
        for n in range(300):  # bounded: past a day by 12 buckets
            self.sample(start + n * self.BUCKET)
        rows = self.rows(org)
        self.assertEqual(len(rows), 288)
        self.assertEqual(rows[0][0], start + 12 * self.BUCKET)
        self.assertEqual(rows[-1][0], start + 299 * self.BUCKET)

    def test_a_pass_samples_at_most_its_bound_of_organizations(self):
        orgs = sorted(self.w.org() for _ in range(3))
        for org in orgs:
            self.w.job(org)
        self.sample(NOW, organizations=2)
        self.assertEqual([len(self.rows(org)) for org in orgs], [1, 1, 0])

    def test_a_bucket_is_five_minutes_on_the_clock_and_its_numbers_are_never_negative(self):
        org = self.w.org()
        row = {"organization_id": org, "bucket_at": NOW - NOW % self.BUCKET + 1, "samples": 1,
               "queued": 0, "running": 0, "busy_slots": 0, "slots": 0, "finished_base": 0,
               "finished_total": 0}
        self.assertRefused(self.w.insert, "queue_history", row)
        row["bucket_at"] -= 1
        self.assertRefused(self.w.insert, "queue_history", {**row, "queued": -1})
        self.assertRefused(self.w.insert, "queue_history", {**row, "finished_base": 2, "finished_total": 1})
        self.w.insert("queue_history", row)

    def test_the_sample_and_the_read_use_their_indexes(self):
        org = self.w.org()
        self.w.job(org)
        plan = " | ".join(query_plan(self.conn, self.SAMPLE, (NOW, NOW, 1000, "queued", HELD_JOB_STATES, "active")))
        for index in ("jobs_by_organization_state", "runners_by_organization_state"):
            self.assertIn(index, plan)
        self.assertNotIn("SCAN j", plan)
        self.assertNotIn("SCAN r", plan)
        self.assertNotIn("SCAN c", plan)
        self.assertNotIn("SCAN h", plan)
        read = " | ".join(query_plan(self.conn, self.READ, (org, 0, 288)))
        self.assertIn("SEARCH queue_history USING PRIMARY KEY", read)
        self.assertNotIn("TEMP B-TREE", read)
