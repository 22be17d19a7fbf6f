#!/usr/bin/env python3
"""Storage per job, measured: D1 rows and bytes of a finished job before and after it is
archived (a quiet job, a chatty one of 20,000 lines, and one of 2,000 unbatched chunks), the R2
bytes its archive takes, and how many finished jobs a second the archive stores and prunes.

Python 3 standard library only; it owns its server (a local `wrangler dev` on fresh state,
through scripts/lib.sh, as the chaos suite does) and reuses the chaos suite's protocol client.

    bench/storage.py --state-root DIR [--jobs 60] [--json FILE]

The worker must already be built (scripts/build). Bytes are counted in the local D1 file over
every table that names the job, as the rows' own bytes: text and blobs by their length,
numbers as 8 (SQLite stores them in 1-8), NULL as 0; indexes and page slack are not counted.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("chaos", ROOT / "tests/chaos/chaos.py")
chaos = importlib.util.module_from_spec(spec)
sys.modules["chaos"] = chaos
spec.loader.exec_module(chaos)

TABLES = {
    "jobs": "id",
    "job_claims": "job_id",
    "stream_chunks": "job_id",
    "job_events": "job_id",
    "job_completions": "job_id",
    "completion_evidence": "job_id",
}


def footprint(server: chaos.Server, job_id: str) -> dict[str, tuple[int, int]]:
    """Rows and bytes of each table that names the job."""
    found = {}
    for table, column in TABLES.items():
        rows = server.sql(f"SELECT * FROM {table} WHERE {column} = '{job_id}'")
        size = 0
        for row in rows:
            for value in row.values():
                if value is None:
                    continue
                size += len(value.encode()) if isinstance(value, str) else 8
        found[table] = (len(rows), size)
    return found


def total(found: dict[str, tuple[int, int]]) -> tuple[int, int]:
    return sum(r for r, _ in found.values()), sum(b for _, b in found.values())


def r2_bytes(server: chaos.Server) -> int:
    blobs = server.state / "v3" / "r2" / "edgerunner-archive" / "blobs"
    return sum(p.stat().st_size for p in blobs.rglob("*") if p.is_file()) if blobs.exists() else 0


def run_job(runner: chaos.ProtocolRunner, chunks: list[dict], deadline: float) -> str:
    while True:
        got, held = chaos.claim(runner, deadline)
        if got == "claimed":
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"no job to claim ({got})")
        time.sleep(0.1)
    held.heartbeat(120, deadline)
    for n, payload in enumerate(chunks):
        held.chunk(payload, deadline)
        if n % 200 == 199:
            held.heartbeat(120, deadline)
    held.complete(held.evidence_run(deadline), deadline)
    return held.job_id


def lines(first: int, count: int) -> dict:
    text = "".join(f"line {first + i}: the evaluation printed this\n" for i in range(count))
    return {"segments": [{"stream": "stdout", "text": text}]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-root", required=True)
    parser.add_argument("--jobs", type=int, default=60, help="finished jobs archived for the throughput figure")
    parser.add_argument("--json", default=str(ROOT / "target/bench/storage.json"))
    args = parser.parse_args()
    root = Path(args.state_root).resolve()
    server = chaos.Server(root / "server")
    started = server.start()
    chaos.log(f"storage: server on {server.url} in {started:.1f} s")
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "jobs": {}}
    try:
        org = chaos.Org(server, f"storage-{os.urandom(3).hex()}")
        runner_id, token = org.register("storage-runner", 4)
        runner = chaos.ProtocolRunner(server, runner_id, token, 4)
        deadline = time.monotonic() + 1800
        kinds = {
            # started, two lines and exited, as the CLI sends a short job.
            "quiet (3 chunks)": [lines(0, 1), lines(1, 1), {"event": "exited", "exitCode": 0}],
            # 20,000 lines in chunks of 100 (the CLI batches lines up to 256 KiB or 250 ms).
            "chatty (20,000 lines in 200 chunks)": [lines(i * 100, 100) for i in range(200)],
            # The same order of lines unbatched: 2,000 chunks of 10.
            "unbatched (20,000 lines in 2,000 chunks)": [lines(i * 10, 10) for i in range(2000)],
        }
        for label, chunks in kinds.items():
            [job_id] = org.enqueue([f"storage-{os.urandom(4).hex()}"])
            run_job(runner, chunks, deadline)
            before = footprint(server, job_id)
            r2_before = r2_bytes(server)
            status, archived = chaos.request(server.url, "POST", f"/api/remote-runners/jobs/{job_id}/archive", {}, org.key,
                                             timeout=600)
            if status != 200:
                raise RuntimeError(f"archive {job_id}: {status} {archived}")
            after = footprint(server, job_id)
            results["jobs"][label] = {
                "jobId": job_id, "before": before, "after": after,
                "bundleBytes": archived["bundleBytes"], "r2Bytes": r2_bytes(server) - r2_before,
                "streamBytes": archived["streamBytes"], "chunks": archived["streamChunks"]}
            chaos.log(f"storage: {label}: before {total(before)}, after {total(after)}, "
                      f"bundle {archived['bundleBytes']} B")

        # Throughput: finished jobs (quiet ones) stored and pruned, four archive requests at once.
        job_ids = org.enqueue([f"storage-t-{os.urandom(4).hex()}" for _ in range(args.jobs)])
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: run_job(runner, kinds["quiet (3 chunks)"], deadline), range(args.jobs)))
        t0 = time.monotonic()

        def archive(job_id: str) -> int:
            return chaos.request(server.url, "POST", f"/api/remote-runners/jobs/{job_id}/archive", {}, org.key)[0]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(archive, job_ids))
        took = time.monotonic() - t0
        if any(s != 200 for s in statuses):
            raise RuntimeError(f"archive statuses {statuses}")
        results["throughput"] = {"jobs": args.jobs, "seconds": round(took, 2), "jobsPerSecond": round(args.jobs / took, 2)}
        chaos.log(f"storage: {args.jobs} jobs archived in {took:.1f} s ({args.jobs / took:.1f} jobs/s)")
    finally:
        server.stop()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")

    print("| job | D1 before: rows, bytes | D1 after: rows, bytes | of which the job row | R2: bundle + record bytes |")
    print("|---|---|---|---|---|")
    for label, job in results["jobs"].items():
        b, a = total(job["before"]), total(job["after"])
        print(f"| {label} | {b[0]:,}, {b[1]:,} | {a[0]}, {a[1]:,} | {job['after']['jobs'][1]:,} | "
              f"{job['r2Bytes']:,} (bundle {job['bundleBytes']:,}) |")
    t = results["throughput"]
    print(f"\nThroughput: {t['jobs']} finished jobs archived (stored, read back, pruned) in {t['seconds']} s "
          f"with 4 requests at once: {t['jobsPerSecond']} jobs/s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
