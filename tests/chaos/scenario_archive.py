"""Scenario 5, archive on finish through server crashes: finished jobs archived to R2 while the
server is SIGKILLed and restarted; every bundle byte for byte what it was. RELIABILITY.md says
what it promises."""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import threading
import time

from harness import *  # noqa: F403 - the suite's shared parts


# ------------------------------------------------------------------------------------------------
# Scenario 5: archive on finish through server crashes
# ------------------------------------------------------------------------------------------------

def scenario_archive(ctx: Context) -> None:
    """Hundreds of finished jobs archived (bundle and record to R2, checked, then their rows
    pruned) while the server is SIGKILLed again and again: every job must end archived, every
    bundle byte for byte what it was, every chunk still in it, and every bundle must verify."""
    name = "archive"
    n_jobs, chunks, workers, kills = (60, 5, 6, 2) if ctx.short else (240, 10, 8, 4)
    org = Org(ctx.server, f"chaos-archive-{os.urandom(3).hex()}")
    runner_id, token = org.register("archive-runner", workers)
    runner = ProtocolRunner(ctx.server, runner_id, token, workers)
    job_ids = org.enqueue([f"archive-{i}-{os.urandom(3).hex()}" for i in range(n_jobs)])
    deadline = time.monotonic() + (300 if ctx.short else 900)

    def work(_: int) -> int:
        done = 0
        while time.monotonic() < deadline:
            got, held = claim(runner, deadline)
            if got == "empty":
                return done
            if got != "claimed":
                time.sleep(0.2)
                continue
            held.heartbeat(60, deadline)
            for n in range(chunks):
                held.chunk({"line": n, "text": f"archive chunk {n} " + "z" * 200}, deadline)
            held.complete(held.evidence_run(deadline), deadline)
            done += 1
        return done
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        ran = sum(pool.map(work, range(workers)))
    r = ctx.report
    if not r.promise(name, f"all {n_jobs} jobs ran to their end first", ran == n_jobs and wait_terminal(
            org, job_ids, 60, "archive jobs terminal"), f"{ran} ran"):
        return

    def digest(job_id: str) -> tuple[str, int]:
        body = org.bundle(job_id)
        return hashlib.sha256(body).hexdigest(), len(json.loads(body)["stream"])
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        before = dict(zip(job_ids, pool.map(digest, job_ids)))

    # Archivers ask for every job not yet archived, again and again (a step is safe to repeat);
    # meanwhile the server is SIGKILLed `kills` times, each while archives are under way.
    pending = set(job_ids)
    pending_lock = threading.Lock()
    stop = threading.Event()
    answers: dict[str, int] = {}

    def archiver(index: int) -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            with pending_lock:
                mine = sorted(pending)[index::3]
            if not mine:
                return
            for job_id in mine:
                if stop.is_set():
                    return
                try:
                    status, answer = request(ctx.server.url, "POST", f"/api/remote-runners/jobs/{job_id}/archive",
                                             {}, org.key)
                except NoAnswer:
                    answers["no-answer"] = answers.get("no-answer", 0) + 1
                    time.sleep(0.2)
                    continue
                answers[str(status)] = answers.get(str(status), 0) + 1
                if status == 200 and answer.get("state") == "pruned":
                    with pending_lock:
                        pending.discard(job_id)
    threads = [threading.Thread(target=archiver, args=(i,), daemon=True) for i in range(3)]
    for thread in threads:
        thread.start()
    kill_log = []
    for k in range(kills):
        # Kill once some archives are under way (or done): a bounded wait for progress.
        target = n_jobs - (k + 1) * n_jobs // (kills + 2)
        try:
            poll(f"archive progress before kill {k + 1}", 120, lambda: len(pending) <= target, every=0.1)
        except Timeout:
            pass
        at = ctx.server.kill()
        with pending_lock:
            left = len(pending)
        took = ctx.server.start()
        kill_log.append(f"kill {k + 1} with {left} of {n_jobs} jobs not yet archived; restarted in {took:.1f} s")
        log(f"{name}: {kill_log[-1]}")
    for thread in threads:
        thread.join(max(1.0, deadline - time.monotonic()))
    stop.set()

    after = org.jobs(job_ids)
    not_pruned = [f"{j}: {after[j].get('archive')}" for j in job_ids if (after[j].get("archive") or {}).get("state") != "pruned"]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        now = dict(zip(job_ids, pool.map(digest, job_ids)))
    changed = [f"{j}: {before[j][0][:12]} → {now[j][0][:12]}" for j in job_ids if now[j][0] != before[j][0]]
    lost_chunks = sum(max(0, before[j][1] - now[j][1]) for j in job_ids)
    wrong_summary = [j for j in job_ids if (after[j].get("archive") or {}).get("bundleSha256") != before[j][0]]
    failures = verify_bundles(ctx, org, job_ids)
    left = ctx.server.sql(
        "SELECT (SELECT count(*) FROM stream_chunks WHERE organization_id = '{o}') AS chunks,"
        " (SELECT count(*) FROM job_completions WHERE organization_id = '{o}') AS completions,"
        " (SELECT count(*) FROM job_claims WHERE organization_id = '{o}') AS claims,"
        " (SELECT count(*) FROM job_events WHERE organization_id = '{o}' AND job_id IS NOT NULL) AS events,"
        # Custody: rows of completion_evidence, and the runs archived rows hold (migration 0019).
        " (SELECT count(*) FROM completion_evidence WHERE organization_id = '{o}')"
        " + (SELECT count(*) FROM archived_jobs AS a JOIN organization_numbers AS n"
        "     ON n.number = a.organization_number"
        "     WHERE n.organization_id = '{o}' AND a.custody_run_id IS NOT NULL) AS custody".format(o=org.id))[0]
    r.promise(name, "every job ends archived (stored and pruned)", not not_pruned, "; ".join(not_pruned[:5]))
    r.promise(name, "0 chunks lost: every bundle byte for byte what it was before archiving",
              not changed and lost_chunks == 0, f"{lost_chunks} chunks lost; " + "; ".join(changed[:5]))
    r.promise(name, "each job's summary names its bundle's SHA-256", not wrong_summary, "; ".join(wrong_summary[:5]))
    r.promise(name, "every custody bundle passes `edgerunner verify`", not failures, "; ".join(failures[:3]))
    r.promise(name, "D1 keeps no claim, chunk, completion or event of an archived job, and every custody",
              left["chunks"] == left["completions"] == left["claims"] == left["events"] == 0 and left["custody"] == n_jobs,
              json.dumps(left))
    r.promise(name, f"the server was SIGKILLed {kills} times while jobs archived", len(kill_log) == kills, "; ".join(kill_log))
    ctx.report.section("Scenario 5: archive through server crashes", [
        f"- {n_jobs} jobs of {chunks} chunks each ran to their end; then three threads asked "
        f"`POST …/jobs/{{id}}/archive` for every job not yet archived while the server was SIGKILLed and restarted:",
        *[f"  - {line}" for line in kill_log],
        f"- answers to the archive requests: {json.dumps(dict(sorted(answers.items())))}",
        f"- D1 after: {json.dumps(left)}"])
    ctx.figures["archive"] = {"jobs": n_jobs, "kills": kill_log, "answers": answers}
