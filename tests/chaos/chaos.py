#!/usr/bin/env python3
"""The chaos suite: runners killed mid-job, a claim race, the server killed mid-stream, and the
three-attempt limit, each checked from the server's own records.

Python 3 standard library only. It owns its server: a local `wrangler dev` (workerd with
embedded D1 and Durable Object state) on fresh state under --state-root, started with
scripts/lib.sh's `start_local_server` and reached on workerd's own socket (`find_direct_url`),
SIGKILLed as a process group and restarted on the same state by the server-crash scenario.

    tests/chaos/chaos.py --state-root DIR --bin target/debug/edgerunner \
        [--short] [--summary FILE] [--scenarios loss,race,crash,limit,archive]

The worker must already be built into $EDGERUNNER_BUILD_DIR (scripts/chaos does it). Writes a
Markdown summary of figures and every broken promise; exits 1 when any promise is broken.

Scenarios (see RELIABILITY.md for what each promises and why):
  loss   15 `edgerunner runner start` processes on 200 jobs (--short: 10 on 50), 15 s leases; 30% of
         the runners SIGKILLed mid-job (their job's process group too), half of them restarted.
  race   32 runner-protocol threads (8 runners of capacity 1-4, 4 threads each) against 400 jobs
         (--short: 100).
  crash  the server's process group SIGKILLed while workers stream chunks and complete jobs
         (16 workers, 60 jobs of 30 chunks per phase; --short: 8, 24 of 15),
         restarted on the same state: once at once (leases of 60 s survive), once after every
         lease (15 s) has lapsed.
  limit  one job whose runner is SIGKILLed three times: it ends cancelled, no fourth claim.
  archive  240 finished jobs of 10 chunks (--short: 60 of 5) archived to R2 while the server is
         SIGKILLed 4 times (--short: 2) and restarted: every job ends archived, every bundle byte
         for byte what it was and verifiable, no row of theirs left in D1 but their custody.

Every wait is a poll with a deadline; sleeps only pace polls and retries. This file is the entry
point; the shared parts are harness.py, each scenario its own scenario_*.py.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import random
import subprocess
import sys
import time
import traceback
from pathlib import Path

from harness import *  # noqa: F403 - the suite's shared parts
from scenario_archive import scenario_archive
from scenario_crash import scenario_crash
from scenario_limit import scenario_limit
from scenario_loss import scenario_loss
from scenario_race import scenario_race


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------

SCENARIOS = {"loss": scenario_loss, "race": scenario_race, "crash": scenario_crash, "limit": scenario_limit,
             "archive": scenario_archive}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short", action="store_true", help="the smaller run scripts/test uses")
    parser.add_argument("--state-root", required=True, help="a fresh directory for the server's state and scratch files")
    parser.add_argument("--bin", default=str(ROOT / "target/debug/edgerunner"), help="the edgerunner CLI")
    parser.add_argument("--summary", default=str(ROOT / "target/chaos/summary.md"))
    parser.add_argument("--scenarios", default="loss,limit,race,crash,archive")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    random.seed(seed)
    ctx = Context(args)
    wanted = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in wanted if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}")
    started = time.time()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    try:
        took = ctx.server.start()
        log(f"server on {ctx.server.url} (started in {took:.1f} s), state {ctx.server.state}")
        # loss and limit mostly wait on leases, race on the server: run them side by side (each in
        # its own organization). crash and archive kill the server, so they run alone, last.
        parallel = [s for s in wanted if s in ("loss", "limit", "race")]
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = {pool.submit(SCENARIOS[s], ctx): s for s in parallel}
            for future in concurrent.futures.as_completed(futures):
                try:
                    future.result()
                except Exception:  # noqa: BLE001 - a crashed scenario is a broken promise
                    ctx.report.promise(futures[future], "the scenario ran to its end", False, traceback.format_exc()[-1500:])
        for s in wanted:
            if s in parallel:
                continue
            try:
                SCENARIOS[s](ctx)
            except Exception:  # noqa: BLE001
                ctx.report.promise(s, "the scenario ran to its end", False, traceback.format_exc()[-1500:])
    finally:
        ctx.stop_runners()
        ctx.server.stop()
    elapsed = time.time() - started
    header = [f"- date: {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(started))} UTC; commit {commit}; "
              f"{'--short' if args.short else 'full run'}; seed {seed}; scenarios {','.join(wanted)}",
              f"- wall time: {elapsed:.0f} s; server starts: {ctx.server.starts}; state: {ctx.server.state}"]
    if ctx.missing_alarms:
        ctx.report.section("Leases found without an alarm", [
            "A claimed or running job 8 s past its lease (and past the restart) that nothing recovered: its "
            "job object has no alarm at or before the lease, so only the cron pass (once a minute in "
            "production, never by itself under `wrangler dev`, so fired here by hand) recovers it. Jobs found so:", "",
            "| phase | job | claim | state | issued | started | lease expired | found after |", "|---|---|---|---|---|---|---|---|",
            *[f"| {m['phase']} | {m['job']} | {m['claim']} | {m['state']} | {m['issuedAt']} | {m['startedAt']} | "
              f"{m['leaseExpiresAt']} | {m['lapsedFor']:.0f} s |" for m in ctx.missing_alarms]])
    text = ctx.report.markdown(header)
    Path(args.summary).parent.mkdir(parents=True, exist_ok=True)
    Path(args.summary).write_text(text)
    print(text)
    broken = ctx.report.broken()
    if broken:
        log(f"{len(broken)} promise(s) broken; summary in {args.summary}")
        return 1
    log(f"every promise held ({len(ctx.report.promises)}); summary in {args.summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
