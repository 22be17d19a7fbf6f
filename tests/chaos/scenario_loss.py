"""Scenario 1, runner loss: CLI runners SIGKILLed mid-job (their job's process group too), half
of them restarted; every job ends once, with its evidence. RELIABILITY.md says what it promises."""
from __future__ import annotations

import math
import os
import random
import time
from typing import Any

from harness import *  # noqa: F403 - the suite's shared parts


# ------------------------------------------------------------------------------------------------
# Scenario 1: runner loss
# ------------------------------------------------------------------------------------------------

LOSS_COMMAND = ('i=0; while [ $i -lt 15 ]; do i=$((i+1)); '
                'echo "chaos $EDGERUNNER_JOB_ID attempt $EDGERUNNER_ATTEMPT line $i"; sleep 0.2; done; '
                'echo "done $EDGERUNNER_JOB_ID" >&2')


def scenario_loss(ctx: Context) -> None:
    name = "loss"
    n_runners, n_jobs = (10, 50) if ctx.short else (15, 200)
    n_kills = math.ceil(0.3 * n_runners)
    n_restarts = math.ceil(n_kills / 2)
    org = Org(ctx.server, f"chaos-loss-{os.urandom(3).hex()}")
    job_ids = org.enqueue([f"loss-{i}-{os.urandom(4).hex()}" for i in range(n_jobs)])
    runners = []
    for i in range(n_runners):
        runner_id, token = org.register(f"loss-runner-{i}", 1)
        runners.append(CliRunner(ctx, runner_id, token, f"loss-runner-{i}-{runner_id[-6:]}", LOSS_COMMAND))
    started = time.time()
    for runner in runners:
        runner.start()
    log(f"{name}: {n_runners} runners on {n_jobs} jobs; {n_kills} to be killed mid-job, {n_restarts} restarted")

    victims = random.sample(runners, n_kills)
    kills: list[dict[str, Any]] = []
    last_kill = 0.0
    for index, victim in enumerate(victims):
        # Different times: the i-th kill no earlier than 2 + 4i s after the start, nor than 3 s
        # after the kill before it.
        not_before = max(started + 2 + 4 * index, last_kill + 3)
        while time.time() < not_before:
            time.sleep(0.1)

        def running_claim() -> dict[str, Any] | None:
            claims = org.expect("GET", f"/api/remote-runners/{victim.runner_id}/claims?limit=5", None, 200)["claims"]
            for c in claims:
                started_at = parse_time(c.get("startedAt"))
                # Mid-job: its first heartbeat is in (the command starts after it) and it is young
                # enough (the command runs 3 s) that the kill lands before the completion.
                if c["state"] == "active" and started_at and time.time() - started_at < 1.5:
                    return c
            return None
        try:
            held = poll(f"runner {victim.runner_id} to be mid-job", 60, running_claim, every=0.1)
        except Timeout as error:
            ctx.report.promise(name, f"kill {index + 1} found its runner mid-job", False, str(error))
            continue
        at = last_kill = victim.kill()
        kills.append({"runner": victim, "job": held["jobId"], "attempt": held["dispatchAttempt"], "at": at,
                      "restart": index < n_restarts})
        log(f"{name}: killed {victim.runner_id} mid-job {held['jobId']} (attempt {held['dispatchAttempt']})")

    # Requeue lag: kill → that job's `job.requeued` for the killed attempt. Restart the chosen
    # victims once their job has been requeued (they come back from `lost`).
    lags: list[float] = []
    lag_rows = []
    for kill in kills:
        def requeued() -> dict[str, Any] | None:
            job = org.job(kill["job"])
            for event in job["events"]:
                if event["type"] == "job.requeued" and event.get("attempt") == kill["attempt"]:
                    return event
            if job["state"] in TERMINAL and not any(e["type"] == "job.lease_lost" for e in job["events"]):
                return {"type": "finished", "job": job}
            return None
        try:
            event = poll(f"job {kill['job']} to be requeued", 60, requeued, every=0.2)
        except Timeout as error:
            ctx.report.promise(name, f"the job of killed runner {kill['runner'].runner_id} is requeued", False, str(error))
            continue
        if event["type"] == "finished":
            lag_rows.append(f"| {kill['at'] - started:.1f} | {kill['job']} | {kill['attempt']} | "
                            f"finished before the kill took effect | — |")
        else:
            lag = parse_time(event["at"]) - kill["at"]
            lags.append(lag)
            lag_rows.append(f"| {kill['at'] - started:.1f} | {kill['job']} | {kill['attempt']} | {event['actor']} | {lag:.2f} |")
        if kill["restart"]:
            kill["runner"].start()
            log(f"{name}: restarted {kill['runner'].runner_id}")

    finished = wait_terminal(org, job_ids, 240 if ctx.short else 480, "every job terminal")
    elapsed = time.time() - started
    for runner in runners:
        runner.stop()
    jobs = org.jobs(job_ids)
    states: dict[str, int] = {}
    for job in jobs.values():
        states[job["state"]] = states.get(job["state"], 0) + 1
    not_terminal = [j for j, job in jobs.items() if job["state"] not in TERMINAL]
    over = [f"{j}: {counted_attempts(job)}" for j, job in jobs.items() if counted_attempts(job) > 3]
    double = [f"{j}: {accepted_count(job)}" for j, job in jobs.items() if accepted_count(job) > 1]
    unsucceeded = [f"{j}: {job['state']}" for j, job in jobs.items() if job["state"] != "succeeded"]
    claims_per_attempt = []
    for j, job in jobs.items():
        attempts = [c["dispatchAttempt"] for c in job["claims"]]
        if len(attempts) != len(set(attempts)) or len(attempts) != job["dispatchAttempt"]:
            claims_per_attempt.append(f"{j}: attempts {attempts}, dispatchAttempt {job['dispatchAttempt']}")
    lost_and_requeued = sum(1 for job in jobs.values() for e in job["events"] if e["type"] == "job.requeued")
    released = sum(1 for job in jobs.values() for e in job["events"] if e["type"] == "job.released")
    failures = verify_bundles(ctx, org, job_ids)

    r = ctx.report
    r.promise(name, "every job ends terminal", finished and not not_terminal,
              f"{len(not_terminal)} not terminal: {not_terminal[:5]}" if not_terminal else f"states {states}")
    r.promise(name, "within three counted attempts", not over, "; ".join(over[:5]))
    r.promise(name, "every job succeeded (no kill hit one job three times)", not unsucceeded, "; ".join(unsucceeded[:5]))
    r.promise(name, "zero jobs with two accepted completions", not double, "; ".join(double[:5]))
    r.promise(name, "one claim per dispatched attempt", not claims_per_attempt, "; ".join(claims_per_attempt[:5]))
    r.promise(name, "every custody bundle passes `edgerunner verify`", not failures,
              f"{len(failures)} failed: " + "; ".join(failures[:3]) if failures else f"{len(job_ids)} verified")
    r.promise(name, "every kill's job was requeued by recovery", len(lags) + sum("finished" in x for x in lag_rows) == len(kills) == n_kills,
              f"{len(lags)} requeues measured for {len(kills)} kills (of {n_kills} planned)")
    r.section("Scenario 1: runner loss", [
        f"- runners: {n_runners} (`edgerunner runner start`, capacity 1, `--lease-seconds 15 --heartbeat-interval 2`), "
        f"jobs: {n_jobs} (each ~3 s of `sh` printing 15 lines and one to stderr)",
        f"- kills: {len(kills)} SIGKILLs mid-job ({n_kills} planned = 30% of the runners), "
        f"restarted: {sum(1 for k in kills if k['restart'])} (after their job was requeued)",
        f"- wall time to all terminal: {elapsed:.1f} s; final states: {states}",
        f"- `job.requeued` events: {lost_and_requeued}; `job.released` (restart hand-backs, shutdown): {released}",
        f"- requeue lag (kill → `job.requeued` `at`), seconds, min / median / max: **{pct(lags)}**",
        "",
        "| kill at (s after start) | job | attempt killed | requeued by | lag (s) |", "|---|---|---|---|---|", *lag_rows])
    ctx.figures["loss"] = {"runners": n_runners, "jobs": n_jobs, "kills": len(kills), "lags": lags,
                           "states": states, "elapsed": elapsed}
