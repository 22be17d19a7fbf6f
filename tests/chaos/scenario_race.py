"""Scenario 2, the claim race: protocol runners of capacity 1-4 racing for jobs; no job granted
twice, no runner past its capacity. RELIABILITY.md says what it promises."""
from __future__ import annotations

import os
import threading
import time
from typing import Any

from harness import *  # noqa: F403 - the suite's shared parts


# ------------------------------------------------------------------------------------------------
# Scenario 2: claim race
# ------------------------------------------------------------------------------------------------

def capacity_overruns(rows: list[dict[str, Any]], capacity: dict[str, int], now_ms: int) -> list[str]:
    """From stored claim intervals [issued_at, ended_at): runners that at some instant held more
    active claims than their capacity. An end and a start at the same millisecond: end first."""
    by_runner: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        end = row["ended_at"] if row["ended_at"] is not None else now_ms
        by_runner.setdefault(row["runner_id"], []).append((row["issued_at"], 1))
        by_runner[row["runner_id"]].append((end, -1))
    found = []
    for runner, points in by_runner.items():
        held = peak = 0
        for _, delta in sorted(points, key=lambda p: (p[0], p[1])):
            held += delta
            peak = max(peak, held)
        if peak > capacity.get(runner, 0):
            found.append(f"{runner}: peak {peak} > capacity {capacity.get(runner)}")
    return found


def peak_per_runner(rows: list[dict[str, Any]], now_ms: int) -> dict[str, int]:
    peaks = {}
    for runner in {r["runner_id"] for r in rows}:
        points = []
        for r in rows:
            if r["runner_id"] == runner:
                points += [(r["issued_at"], 1), (r["ended_at"] if r["ended_at"] is not None else now_ms, -1)]
        held = peak = 0
        for _, d in sorted(points):
            held += d
            peak = max(peak, held)
        peaks[runner] = peak
    return peaks


def scenario_race(ctx: Context) -> None:
    name = "race"
    n_jobs = 100 if ctx.short else 400
    caps = [1, 2, 3, 4, 1, 2, 3, 4]
    threads_per_runner = 4
    org = Org(ctx.server, f"chaos-race-{os.urandom(3).hex()}")
    job_ids = org.enqueue([f"race-{i}-{os.urandom(4).hex()}" for i in range(n_jobs)])
    runners = []
    for i, cap in enumerate(caps):
        runner_id, token = org.register(f"race-runner-{i}", cap)
        runners.append(ProtocolRunner(ctx.server, runner_id, token, cap))
    granted: list[tuple[str, int, str, str]] = []  # job, attempt, claim, runner
    decisions: dict[str, list[str]] = {}
    errors: list[str] = []
    stats = {"claims": 0, "empty": 0, "capacity": 0}
    lock = threading.Lock()
    done = threading.Event()
    deadline = time.monotonic() + (150 if ctx.short else 300)

    def worker(runner: ProtocolRunner) -> None:
        idle = 0
        try:
            while not done.is_set() and time.monotonic() < deadline:
                outcome, held = claim(runner, deadline)
                with lock:
                    stats["claims"] += 1
                    if outcome in stats:
                        stats[outcome] += 1
                if outcome == "capacity":
                    time.sleep(0.02)
                    continue
                if outcome != "claimed":
                    idle += 1
                    with lock:
                        finished = sum(len(v) for v in decisions.values()) >= n_jobs
                    if finished or idle > 400:
                        return
                    time.sleep(0.05)
                    continue
                idle = 0
                with lock:
                    granted.append((held.job_id, held.attempt, held.claim_id, runner.runner_id))
                held.heartbeat(60, deadline)
                run_id = held.evidence_run(deadline)
                decision = held.complete(run_id, deadline)
                with lock:
                    decisions.setdefault(held.job_id, []).append(decision)
                    if sum(len(v) for v in decisions.values()) >= n_jobs:
                        done.set()
        except Exception as error:  # noqa: BLE001 - reported
            with lock:
                errors.append(f"{runner.runner_id}: {error!r}")

    started = time.time()
    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in runners for _ in range(threads_per_runner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.monotonic() + 5))
    elapsed = time.time() - started
    log(f"{name}: {len(threads)} threads done in {elapsed:.1f} s; {len(granted)} grants")

    rows = ctx.server.sql(
        f"SELECT id, job_id, runner_id, dispatch_attempt, state, issued_at, ended_at FROM job_claims "
        f"WHERE organization_id = '{org.id}'")
    now_ms = int(time.time() * 1000)
    capacity = {r.runner_id: r.capacity for r in runners}
    overruns = capacity_overruns(rows, capacity, now_ms)
    peaks = peak_per_runner(rows, now_ms)
    per_attempt: dict[tuple[str, int], int] = {}
    for row in rows:
        per_attempt[(row["job_id"], row["dispatch_attempt"])] = per_attempt.get((row["job_id"], row["dispatch_attempt"]), 0) + 1
    stored_twice = [k for k, v in per_attempt.items() if v > 1]
    client_pairs: dict[tuple[str, int], int] = {}
    for job, attempt, _, _ in granted:
        client_pairs[(job, attempt)] = client_pairs.get((job, attempt), 0) + 1
    granted_twice = [k for k, v in client_pairs.items() if v > 1]
    accepted = ctx.server.sql(
        f"SELECT job_id, COUNT(*) AS n FROM job_completions WHERE organization_id = '{org.id}' "
        f"AND decision = 'accepted' GROUP BY job_id")
    accepted_by_job = {r["job_id"]: r["n"] for r in accepted}
    counts = org.counts()
    not_once = [j for j in job_ids if accepted_by_job.get(j, 0) != 1]
    client_not_once = [j for j in job_ids if decisions.get(j, []) != ["accepted"]]

    r = ctx.report
    r.promise(name, "no worker error", not errors, "; ".join(errors[:3]))
    r.promise(name, "zero jobs claimed twice in one attempt (answers)", not granted_twice, str(granted_twice[:5]))
    r.promise(name, "zero jobs claimed twice in one attempt (stored claims)", not stored_twice, str(stored_twice[:5]))
    r.promise(name, "zero capacity overruns (stored claim intervals)", not overruns, "; ".join(overruns[:5]))
    r.promise(name, "every job succeeded", counts.get("succeeded") == n_jobs, f"counts {counts}")
    r.promise(name, "exactly one accepted completion per job (stored)", not not_once, f"{len(not_once)} jobs off: {not_once[:5]}")
    r.promise(name, "exactly one accepted answer per job (client)", not client_not_once,
              f"{len(client_not_once)} jobs off: {[(j, decisions.get(j)) for j in client_not_once[:5]]}")
    r.section("Scenario 2: claim race", [
        f"- workers: {len(threads)} threads ({len(runners)} runners of capacity {caps}, {threads_per_runner} threads each), "
        f"jobs: {n_jobs}, wall time {elapsed:.1f} s",
        f"- claim requests: {stats['claims']} (granted {len(granted)}, `204` {stats['empty']}, "
        f"`503 RUNNER_AT_CAPACITY` {stats['capacity']})",
        f"- stored claims: {len(rows)}; peak simultaneous claims per runner (capacity): "
        + ", ".join(f"{peaks.get(x.runner_id, 0)} ({x.capacity})" for x in runners),
        f"- (job, attempt) granted twice: answers {len(granted_twice)}, stored {len(stored_twice)}; "
        f"capacity overruns: {len(overruns)}; jobs with exactly one accepted completion: {n_jobs - len(not_once)} of {n_jobs}"])
    ctx.figures["race"] = {"workers": len(threads), "jobs": n_jobs, "claims": stats["claims"], "granted": len(granted),
                           "capacity": stats["capacity"], "overruns": len(overruns), "twice": len(stored_twice)}
