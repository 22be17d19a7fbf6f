"""Scenario 4, the three-attempt limit: one job whose runner is SIGKILLed three times ends
cancelled, with no fourth claim. RELIABILITY.md says what it promises."""
from __future__ import annotations

import os
import time
from typing import Any

from harness import *  # noqa: F403 - the suite's shared parts


# ------------------------------------------------------------------------------------------------
# Scenario 4: the three-attempt limit
# ------------------------------------------------------------------------------------------------

def scenario_limit(ctx: Context) -> None:
    name = "limit"
    org = Org(ctx.server, f"chaos-limit-{os.urandom(3).hex()}")
    [job_id] = org.enqueue([f"limit-{os.urandom(4).hex()}"])
    runner_id, token = org.register("limit-runner", 1)
    runner = CliRunner(ctx, runner_id, token, f"limit-runner-{runner_id[-6:]}",
                       'echo "attempt $EDGERUNNER_ATTEMPT"; while true; do sleep 0.2; done')
    kills = []
    for attempt in (1, 2, 3):
        runner.start()

        def running() -> dict[str, Any] | None:
            job = org.job(job_id)
            return job if job["state"] == "running" and job["dispatchAttempt"] == attempt else None
        try:
            poll(f"attempt {attempt} running", 60, running, every=0.2)
        except Timeout as error:
            ctx.report.promise(name, f"attempt {attempt} was claimed and ran", False, str(error))
            runner.stop()
            return
        kills.append(runner.kill())

        def recovered() -> dict[str, Any] | None:
            job = org.job(job_id)
            wanted = "job.requeued" if attempt < 3 else "job.cancelled"
            return job if any(e["type"] == wanted and e.get("attempt") == attempt for e in job["events"]) else None
        try:
            poll(f"attempt {attempt}'s lease recovered", 60, recovered, every=0.2)
        except Timeout as error:
            ctx.report.promise(name, f"attempt {attempt}'s loss was recovered", False, str(error))
            return
        log(f"{name}: attempt {attempt} killed and recovered")
    # A live runner for the job's organization: it must not get a fourth claim. Bounded watch:
    # until the runner has polled for 5 s after its session (it claims every 0.2 s when idle).
    runner.start()
    watch_until = time.time() + 6
    while time.time() < watch_until:
        time.sleep(0.2)
    runner.stop()
    job = org.job(job_id)
    cancelled = [e for e in job["events"] if e["type"] == "job.cancelled"]
    detail = event_detail(cancelled[0]) if cancelled else {}
    r = ctx.report
    r.promise(name, "the job ends cancelled", job["state"] == "cancelled", f"state {job['state']}")
    r.promise(name, "with the reason recorded", bool(job.get("cancelReason")) and bool(cancelled and cancelled[0].get("reason")),
              f"cancelReason {job.get('cancelReason')!r}; event reason {cancelled[0].get('reason') if cancelled else None!r}; "
              f"decision {detail.get('decision')}, countedAttempts {detail.get('countedAttempts')}")
    r.promise(name, "recorded as DISPATCH_ATTEMPTS_EXHAUSTED after 3 counted attempts",
              detail.get("decision") == "DISPATCH_ATTEMPTS_EXHAUSTED" and detail.get("countedAttempts") == 3, str(detail))
    r.promise(name, "no fourth claim", len(job["claims"]) == 3 and job["dispatchAttempt"] == 3,
              f"claims {[c['dispatchAttempt'] for c in job['claims']]}, dispatchAttempt {job['dispatchAttempt']}")
    lost = [e for e in job["events"] if e["type"] == "job.lease_lost"]
    r.promise(name, "three leases lost, each recorded", len(lost) == 3, f"{len(lost)} job.lease_lost events")
    ctx.report.section("Scenario 4: three-attempt limit", [
        f"- one job, one runner (`--lease-seconds 15`) SIGKILLed mid-job three times (restarted each time), then a "
        f"fourth process left claiming for 6 s",
        f"- final state `{job['state']}`, claims {len(job['claims'])}, cancel reason: {job.get('cancelReason')!r}"])
