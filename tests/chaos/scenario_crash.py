"""Scenario 3, server crash: the server's process group SIGKILLed while workers stream chunks and
complete jobs, restarted on its state at once and after every lease lapsed. RELIABILITY.md says
what it promises."""
from __future__ import annotations

import os
import threading
import time
import traceback

from harness import *  # noqa: F403 - the suite's shared parts


# ------------------------------------------------------------------------------------------------
# Scenario 3: server crash
# ------------------------------------------------------------------------------------------------

class CrashPhase:
    """Protocol workers streaming and completing jobs of one organization while the server is
    SIGKILLed and restarted: at once (`down_past_leases` False: leases of 60 s outlive the
    outage), or once every lease of a job in flight (15 s) has lapsed."""

    def __init__(self, ctx: Context, phase: str, n_jobs: int, n_workers: int, chunks_per_job: int,
                 extend: int, down_past_leases: bool):
        self.ctx, self.phase, self.n_jobs, self.chunks_per_job = ctx, phase, n_jobs, chunks_per_job
        self.extend, self.down_past_leases = extend, down_past_leases
        self.org = Org(ctx.server, f"chaos-crash-{phase}-{os.urandom(3).hex()}")
        self.job_ids = self.org.enqueue([f"crash-{phase}-{i}-{os.urandom(4).hex()}" for i in range(n_jobs)])
        self.runners = []
        for i in range(n_workers):
            runner_id, token = self.org.register(f"crash-{phase}-runner-{i}", 1)
            self.runners.append(ProtocolRunner(ctx.server, runner_id, token, 1))
        self.helds: list[Held] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.acked = 0
        self.finished: set[str] = set()
        self.lost_claims: list[tuple[str, int, str]] = []
        self.stop = threading.Event()
        self.deadline = time.monotonic() + (300 if ctx.short else 420)
        self.threads = [threading.Thread(target=self.worker, args=(r,), daemon=True) for r in self.runners]

    def worker(self, runner: ProtocolRunner) -> None:
        try:
            while time.monotonic() < self.deadline and not self.stop.is_set():
                outcome, held = claim(runner, self.deadline)
                if outcome != "claimed":
                    with self.lock:
                        if len(self.finished) >= self.n_jobs:
                            return
                    time.sleep(0.1)
                    continue
                with self.lock:
                    self.helds.append(held)
                try:
                    held.heartbeat(self.extend, self.deadline)
                    run_id = held.evidence_run(self.deadline)
                    for n in range(self.chunks_per_job):
                        if time.monotonic() - held.last_beat > 3:
                            held.heartbeat(self.extend, self.deadline)
                        held.chunk({"segments": [{"stream": "stdout",
                                                  "text": f"{held.job_id} a{held.attempt} line {n}\n"}]}, self.deadline)
                        with self.lock:
                            self.acked += 1
                    decision = held.complete(run_id, self.deadline)
                    if decision in ("accepted", "duplicate"):
                        with self.lock:
                            self.finished.add(held.job_id)
                except Lost as why:
                    with self.lock:
                        self.lost_claims.append((held.job_id, held.attempt, str(why)))
        except Exception as error:  # noqa: BLE001 - reported
            with self.lock:
                self.errors.append(f"{runner.runner_id}: {error!r} {traceback.format_exc()[-400:]}")

    def run_through_crash(self) -> None:
        self.started = time.time()
        for t in self.threads:
            t.start()
        threshold = self.n_jobs * self.chunks_per_job // 5
        poll(f"{threshold} chunks acknowledged before the crash", 180, lambda: self.acked >= threshold, every=0.05)
        with INFLIGHT_LOCK:
            self.requests_at_kill = {k: v for k, v in INFLIGHT.items() if v}
        with self.lock:
            self.in_flight = {(h.job_id, h.attempt) for h in self.helds if h.job_id not in self.finished}
            self.acked_at_kill = self.acked
        self.counters_before = self.org.counters()
        self.killed_at = self.ctx.server.kill()
        log(f"crash/{self.phase}: server killed with {self.acked_at_kill} chunks acknowledged, "
            f"{len(self.in_flight)} jobs in flight, requests on their way {self.requests_at_kill}")
        if self.down_past_leases:
            leases = [h.lease_expires for h in self.helds if h.lease_expires and (h.job_id, h.attempt) in self.in_flight]
            wake = max(leases + [self.killed_at + 15]) + 5  # every lease in flight lapsed, and 5 s more
            while time.time() < wake:
                time.sleep(0.2)
        self.restart_began = time.time()
        took = self.ctx.server.start()
        self.restarted_at = time.time()
        self.down = self.restarted_at - self.killed_at
        log(f"crash/{self.phase}: server back after {self.down:.1f} s down (start took {took:.1f} s)")
        self.counters_after = self.org.counters()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=max(1.0, self.deadline - time.monotonic() + 5))
        self.alive = sum(t.is_alive() for t in self.threads)


def settle(ctx: Context, phases: list[CrashPhase], limit: float) -> None:
    """Waits until every job of the phases is terminal. A job whose lease lapsed more than 8 s ago
    (and 8 s after the server last came back; alarms fire within a second of either) and is still claimed or running has no alarm left to recover it (the alarm fires at the
    lease's expiry): that is recorded as a missing alarm, and the cron pass, production's
    once-a-minute safety net which `wrangler dev` does not fire by itself, is fired by hand."""
    deadline = time.monotonic() + limit
    seen: set[tuple[str, str]] = set()
    while time.monotonic() < deadline:
        unfinished = 0
        for phase in phases:
            counts = phase.org.counts()
            unfinished += sum(counts.get(s, 0) for s in UNFINISHED)
        if unfinished == 0:
            return
        stuck = []
        for phase in phases:
            for state in ("claimed", "running"):
                listing = phase.org.expect("GET", f"/api/remote-runners/jobs?state={state}&limit=500", None, 200)
                for job in listing["jobs"]:
                    lease = parse_time(job.get("leaseExpiresAt"))
                    key = (job["id"], job.get("activeClaimId") or "")
                    # Past its lease (and the restart that would fire a lapsed alarm) by 8 s.
                    if lease and time.time() - max(lease, ctx.server.served_at) > 8 and key not in seen:
                        seen.add(key)
                        stuck.append((phase, job, lease))
        if stuck:
            for phase, job, lease in stuck:
                detail = phase.org.job(job["id"])
                claim_row = next((c for c in detail["claims"] if c["id"] == job.get("activeClaimId")), {})
                ctx.missing_alarms.append({
                    "phase": phase.phase, "job": job["id"], "claim": job.get("activeClaimId"),
                    "state": job["state"], "issuedAt": claim_row.get("issuedAt"),
                    "startedAt": claim_row.get("startedAt"), "leaseExpiresAt": job.get("leaseExpiresAt"),
                    "lapsedFor": time.time() - lease, "killedAt": phase.killed_at})
                log(f"crash/{phase.phase}: job {job['id']} is {job['state']} {time.time() - lease:.0f} s past its "
                    f"lease with no recovery: its alarm is missing; firing the cron pass")
            status, _ = request(ctx.server.url, "GET", "/__scheduled?cron=*+*+*+*+*")
            if status != 200:
                log(f"the cron trigger answered {status}")
        time.sleep(0.5)


def check_crash_phase(ctx: Context, run: CrashPhase) -> list[str]:
    name = f"crash/{run.phase}"
    org = run.org
    r = ctx.report
    r.promise(name, "no worker error, every worker done", not run.errors and run.alive == 0,
              f"{run.alive} threads still alive; " + "; ".join(run.errors[:2]))
    # /metrics' counters are D1 rows: the crash leaves them where they were (none fell), and the
    # work before it was counted.
    fell = {k: (v, run.counters_after.get(k)) for k, v in run.counters_before.items()
            if run.counters_after.get(k, -1) < v}
    r.promise(name, "no counter of /metrics fell across the server's restart",
              not fell and run.counters_before.get("edgerunner_claims_granted_total", 0) > 0,
              f"fell: {fell}; before: {run.counters_before}")
    jobs = org.jobs(run.job_ids)
    # And once every job ended, they say what the jobs' own records say.
    final = org.counters()
    claims = [c for job in jobs.values() for c in job["claims"]]
    recorded = {"edgerunner_claims_granted_total": len(claims),
                "edgerunner_leases_lost_total": sum(1 for c in claims if c["state"] == "lost"),
                'edgerunner_completions_total{outcome="succeeded"}':
                    sum(1 for job in jobs.values() if job["state"] == "succeeded")}
    wrong = {k: (final.get(k), v) for k, v in recorded.items() if final.get(k) != v}
    r.promise(name, "/metrics' counters are the jobs' own records (claims, lost leases, successes)",
              not wrong, f"counter, record: {wrong or recorded}")
    by_attempt: dict[tuple[str, int], Held] = {(h.job_id, h.attempt): h for h in run.helds}
    client_claims = {h.claim_id for h in run.helds}
    # Grants whose answer the crash lost: stored claims no client ever held.
    orphans = [(j, c) for j, job in jobs.items() for c in job["claims"] if c["id"] not in client_claims]

    missing, mismatched, unacked_extra, foreign = [], [], [], []
    acked_chunks = unanswered_sends = acked_after_retry = present_unacked = 0
    for (job_id, attempt), held in by_attempt.items():
        stored = org.stream(job_id, attempt)
        sent = held.chunks
        for c in sent:
            unanswered_sends += c["sends"].count("no-answer")
            if (c["outcome"] or "").startswith("acked"):
                acked_chunks += 1
                if "no-answer" in c["sends"]:
                    acked_after_retry += 1
        # The rule: an attempt's stored stream is the prefix of what its client sent made of every
        # acknowledged chunk, plus at most the one chunk that was on its way without an answer
        # (a chunk is sent only once its predecessor is acknowledged, so only the last can be).
        for i, c in enumerate(sent):
            if (c["outcome"] or "").startswith("acked"):
                if i >= len(stored):
                    missing.append(f"{job_id} a{attempt} #{i}")
                elif stored[i]["checksum"] != c["checksum"]:
                    mismatched.append(f"{job_id} a{attempt} #{i}")
        for i, s in enumerate(stored):
            if i >= len(sent) or s["checksum"] != sent[i]["checksum"]:
                foreign.append(f"{job_id} a{attempt} #{i}")
            elif not (sent[i]["outcome"] or "").startswith("acked"):
                if "no-answer" in sent[i]["sends"] and i == len(sent) - 1:
                    present_unacked += 1  # committed before the crash; its answer was lost
                else:
                    unacked_extra.append(f"{job_id} a{attempt} #{i} ({sent[i]['outcome']}, sends {sent[i]['sends']})")
    for job_id, c in orphans:
        stored = org.stream(job_id, c["dispatchAttempt"])
        if stored:
            foreign.append(f"{job_id} a{c['dispatchAttempt']}: {len(stored)} chunks under a claim no client held")
    comp_missing, comp_foreign = [], []
    comps_acked = comps_unanswered_present = 0
    for job_id, job in jobs.items():
        stored_by_checksum = {c["completionChecksum"]: c for c in job["completions"]}
        sent_all = {}
        for (jid, attempt), held in by_attempt.items():
            if jid != job_id:
                continue
            for c in held.completions:
                sent_all[c["checksum"]] = (held, c)
                if c["outcome"] == "acked":
                    comps_acked += 1
                    if c["checksum"] not in stored_by_checksum:
                        comp_missing.append(f"{job_id} a{attempt}")
        for s in job["completions"]:
            entry = sent_all.get(s["completionChecksum"])
            if entry is None:
                comp_foreign.append(f"{job_id}: {s['completionChecksum'][:12]} never sent")
                continue
            held, c = entry
            if c["outcome"] != "acked" and s["decision"] == "accepted":
                if "no-answer" in c["sends"] and c is held.completions[-1]:
                    comps_unanswered_present += 1
                else:
                    comp_foreign.append(f"{job_id}: accepted {c['checksum'][:12]} whose sends were {c['sends']}")
    r.promise(name, "every 2xx-acknowledged chunk is stored with the same checksum", not missing and not mismatched,
              f"{acked_chunks} acknowledged; missing {missing[:5]}; other checksum {mismatched[:5]}")
    r.promise(name, "no stored chunk that was not sent, or sent out of chain", not foreign, str(foreign[:5]))
    r.promise(name, "nothing unacknowledged stored, but a chunk on its way when the crash cut its answer",
              not unacked_extra, f"such chunks stored: {present_unacked}; violations {unacked_extra[:5]}")
    r.promise(name, "every 2xx-acknowledged completion is stored with the same checksum", not comp_missing,
              f"{comps_acked} acknowledged; missing {comp_missing[:5]}")
    r.promise(name, "no stored completion that was not sent; none accepted unacknowledged but the one the crash cut",
              not comp_foreign, str(comp_foreign[:5]))
    states: dict[str, int] = {}
    for job in jobs.values():
        states[job["state"]] = states.get(job["state"], 0) + 1
    r.promise(name, "every job succeeded exactly once",
              all(j["state"] == "succeeded" and accepted_count(j) == 1 for j in jobs.values()), f"states {states}")

    # Jobs in flight at the crash: a claim a client held, or a grant whose answer the crash cut.
    missing_alarm_claims = {m["claim"] for m in ctx.missing_alarms if m["phase"] == run.phase}
    in_flight = set(run.in_flight) | {(j, c["dispatchAttempt"]) for j, c in orphans}
    continued = by_alarm = by_cron_after_missing_alarm = completed_before = 0
    requeue_after_restart = []
    bad = []
    for job_id, attempt in sorted(in_flight):
        job = jobs[job_id]
        requeued = [e for e in job["events"] if e["type"] == "job.requeued" and e.get("attempt") == attempt]
        lost = [e for e in job["events"] if e["type"] == "job.lease_lost" and e.get("attempt") == attempt]
        claim_id = f"{job_id}-a{attempt}"
        accepted_here = any(c["decision"] == "accepted" and c["dispatchAttempt"] == attempt for c in job["completions"])
        if accepted_here and not lost:
            if run.down_past_leases:
                completed_before += 1  # its completion was accepted before the kill
            else:
                continued += 1
            continue
        if not requeued:
            bad.append(f"{job_id} a{attempt}: neither completed nor requeued")
            continue
        actor = requeued[0]["actor"]
        orphan = (job_id, attempt) not in run.in_flight
        if actor == "system:alarm":
            by_alarm += 1
        elif claim_id in missing_alarm_claims:
            by_cron_after_missing_alarm += 1
        else:
            bad.append(f"{job_id} a{attempt}: requeued by {actor}")
        if not orphan and not run.down_past_leases:
            bad.append(f"{job_id} a{attempt}: a claim its client held lost its lease in a {run.down:.1f} s outage")
        if run.down_past_leases:
            requeue_after_restart.append(parse_time(requeued[0]["at"]) - run.restart_began)
    n_orphans = len(orphans)
    r.promise(name, "jobs in flight continued (outage shorter than their lease) or, past it, were requeued by recovery",
              not bad, f"{len(in_flight)} in flight ({n_orphans} grants whose answer was cut): {continued} continued, "
                       f"{completed_before} had completed, {by_alarm} requeued by their alarm, "
                       f"{by_cron_after_missing_alarm} by the cron pass after a missing alarm; problems {bad[:5]}")
    r.promise(name, "every job in flight whose lease lapsed was requeued by its own alarm",
              by_cron_after_missing_alarm == 0,
              f"{by_cron_after_missing_alarm} had no alarm and were left claimed until the cron pass"
              if by_cron_after_missing_alarm else f"{by_alarm} by alarm")
    return [
        f"- **{run.phase}** ({'down past every lease' if run.down_past_leases else 'restarted at once'}): "
        f"{len(run.job_ids)} jobs, {len(run.runners)} workers, {run.chunks_per_job} chunks a job; killed with "
        f"{run.acked_at_kill} chunks acknowledged, {len(run.in_flight)} jobs held in flight and requests on their way "
        f"{run.requests_at_kill}; down {run.down:.1f} s. Chunks acknowledged {acked_chunks}; sends without an answer "
        f"{unanswered_sends}; chunks acknowledged on a retry {acked_after_retry}; stored though their answer was cut "
        f"{present_unacked}. Completions acknowledged {comps_acked} (accepted though the answer was cut "
        f"{comps_unanswered_present}). Grants whose answer was cut: {n_orphans}. Claims lost by workers "
        f"{len(run.lost_claims)}. In flight: {continued} continued, {completed_before} had completed, {by_alarm} "
        f"requeued by alarm, {by_cron_after_missing_alarm} only by the cron pass (alarm missing)"
        + (f"; requeue after the restart began (s) min / median / max {pct(requeue_after_restart)}"
           if run.down_past_leases else "")
        + f". Final states {states}."]


def scenario_crash(ctx: Context) -> None:
    n_jobs, n_workers, chunks = (24, 8, 15) if ctx.short else (60, 16, 30)
    lines = ["Workers are protocol threads (session, claim, heartbeat, chunk, complete); a chunk or completion "
             "without an answer is sent again unchanged until one comes. The long outage starts while the brief "
             "phase's workers are still finishing.", ""]
    brief = CrashPhase(ctx, "brief", n_jobs, n_workers, chunks, extend=60, down_past_leases=False)
    long = CrashPhase(ctx, "long", n_jobs, n_workers, chunks, extend=15, down_past_leases=True)
    brief.run_through_crash()
    long.run_through_crash()
    settle(ctx, [brief, long], 240 if ctx.short else 360)
    for phase in (brief, long):
        phase.join()
    for phase in (brief, long):
        lines += check_crash_phase(ctx, phase)
    ctx.report.section("Scenario 3: server crash", lines)
    ctx.figures["crash"] = {"brief_down": brief.down, "long_down": long.down}
