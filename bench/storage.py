#!/usr/bin/env python3
"""Storage per job, measured: D1 rows and bytes of a finished job before and after it is
archived (a quiet job, a chatty one of 20,000 lines, and one of 2,000 unbatched chunks), the R2
bytes its archive takes, how many finished jobs a second the archive stores and prunes, and
what an archived job takes in the database file at scale, indexes and page slack included.

Python 3 standard library only; it owns its server (a local `wrangler dev` on fresh state,
through scripts/lib.sh, as the chaos suite does) and reuses the chaos suite's protocol client.

    bench/storage.py --state-root DIR [--jobs 60] [--json FILE]

The worker must already be built (scripts/build). Bytes are counted in the local D1 file over
every table that names the job, as the rows' own bytes: text and blobs by their length,
numbers as 8 (SQLite stores them in 1-8), NULL as 0; indexes and page slack are not counted.

At scale: once the server is stopped, a copy of its D1 file gets --scale copies of the quiet
archived job (its row and its custody rows, under fresh random ids as the server makes them,
later creation times), and SQLite's own page accounting (the `dbstat` table) says how many bytes
each table and each index grew by, per job: what the database's size grows by.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import sqlite3
import importlib.util
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("chaos", ROOT / "tests/chaos/harness.py")
chaos = importlib.util.module_from_spec(spec)
sys.modules["chaos"] = chaos
spec.loader.exec_module(chaos)

TABLES = {
    "jobs": "id",
    "archived_jobs": "id",
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
                if isinstance(value, str) and table == "archived_jobs" and value.startswith("["):
                    size += len(json.loads(value))  # a blob, which wrangler answers as "[66, 95, …]"
                elif isinstance(value, str):
                    size += len(value.encode())
                else:
                    size += 8
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


def d1_file(server: chaos.Server) -> Path:
    """The server's local D1 database file (the one that is not miniflare's metadata)."""
    files = [p for p in (server.state / "v3" / "d1").rglob("*.sqlite") if p.name != "metadata.sqlite"]
    if len(files) != 1:
        raise RuntimeError(f"expected one D1 file, found {files}")
    return files[0]


def pages_by_name(db: sqlite3.Connection) -> dict[str, int]:
    return {name: size for name, size in db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")}


def at_scale(source: Path, job_id: str, copies: int, scratch: Path) -> dict:
    """Bytes per archived job in the database file, by table and index: `copies` copies of the
    archived job `job_id` (its archived_jobs row, holding its run's custody since migration 0019,
    and its other custody rows, if any) added to a
    copy of the server's database, each under a fresh id and an idempotency key of 36
    characters (a UUID, as clients commonly send)."""
    path = scratch / "scale.sqlite"
    shutil.copyfile(source, path)
    db = sqlite3.connect(path)
    # A copy for measuring only: the rows copied are valid as the server writes them, but the
    # schema's triggers would ask for the job's pruned row in jobs (gone since its move).
    db.execute("PRAGMA foreign_keys = OFF")
    for (name,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'trigger'").fetchall():
        db.execute(f'DROP TRIGGER "{name}"')
    db.commit()
    before = pages_by_name(db)
    file_before = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    job_columns = [row[1] for row in db.execute("PRAGMA table_info(archived_jobs)")]
    [template] = db.execute("SELECT * FROM archived_jobs WHERE id = ?", (job_id,)).fetchall()
    custody = db.execute("SELECT * FROM completion_evidence WHERE job_id = ?", (job_id,)).fetchall()
    custody_columns = [row[1] for row in db.execute("PRAGMA table_info(completion_evidence)")]
    row = dict(zip(job_columns, template))
    del row["seq"]
    for n in range(copies):
        new_id = "job_" + os.urandom(12).hex()
        copy = dict(row, id=new_id, idempotency_key=str(uuid.uuid4()),
                    created_at=row["created_at"] + n * 1000, updated_at=row["updated_at"] + n * 1000,
                    finished_at=row["finished_at"] + n * 1000, archived_at=row["archived_at"] + n * 1000,
                    intent_hash=os.urandom(32), input_hash=os.urandom(32), bundle_sha256=os.urandom(32),
                    stream_head=row["stream_head"] and os.urandom(32),
                    # The run it holds, and the completion that took it: ids as the server makes them.
                    custody_run_id=row["custody_run_id"] and row["custody_run_id"][:4] + os.urandom(12).hex(),
                    custody_completion_id=row["custody_completion_id"]
                    and row["custody_completion_id"][:4] + os.urandom(12).hex())
        db.execute(f"INSERT INTO archived_jobs ({', '.join(copy)}) VALUES ({', '.join('?' * len(copy))})",
                   list(copy.values()))
        for held in custody:
            entry = dict(zip(custody_columns, held))
            entry.update(job_id=new_id, evidence_id=entry["evidence_id"][:4] + os.urandom(12).hex(),
                         completion_id=entry["completion_id"][:4] + os.urandom(12).hex())
            db.execute(f"INSERT INTO completion_evidence ({', '.join(entry)}) VALUES ({', '.join('?' * len(entry))})",
                       list(entry.values()))
    db.commit()
    after = pages_by_name(db)
    file_after = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    path.unlink()
    grown = {name: round((after[name] - before.get(name, 0)) / copies, 1)
             for name in after if after[name] > before.get(name, 0)}
    custody_names = ("completion_evidence", "sqlite_autoindex_completion_evidence")
    return {"copies": copies, "custodyRows": len(custody), "holdsRun": row["custody_run_id"] is not None,
            "bytesPerJob": grown,
            "totalPerJob": round(sum(grown.values()), 1),
            "withoutCustody": round(sum(size for name, size in grown.items()
                                        if not name.startswith(custody_names)), 1),
            "fileBytesPerJob": round((file_after - file_before) / copies, 1)}


def lines(first: int, count: int) -> dict:
    text = "".join(f"line {first + i}: the evaluation printed this\n" for i in range(count))
    return {"segments": [{"stream": "stdout", "text": text}]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-root", required=True)
    parser.add_argument("--jobs", type=int, default=60, help="finished jobs archived for the throughput figure")
    parser.add_argument("--scale", type=int, default=20_000, help="archived jobs copied for the at-scale figure")
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
    quiet = results["jobs"]["quiet (3 chunks)"]["jobId"]
    results["scale"] = at_scale(d1_file(server), quiet, args.scale, root)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")

    print("| job | D1 before: rows, bytes | D1 after: rows, bytes | of which the archived row | R2: bundle + record bytes |")
    print("|---|---|---|---|---|")
    for label, job in results["jobs"].items():
        b, a = total(job["before"]), total(job["after"])
        print(f"| {label} | {b[0]:,}, {b[1]:,} | {a[0]}, {a[1]:,} | {job['after']['archived_jobs'][1]:,} | "
              f"{job['r2Bytes']:,} (bundle {job['bundleBytes']:,}) |")
    scale = results["scale"]
    held = "holding its run, " if scale["holdsRun"] else ""
    print(f"\nAt scale: {scale['copies']:,} archived quiet jobs (each {held}with {scale['custodyRows']} other custody row(s)) "
          f"grow its tables and indexes by {scale['totalPerJob']:,} bytes each (the file by "
          f"{scale['fileBytesPerJob']:,}):")
    print("| table or index | bytes per archived job |\n|---|---|")
    for name, size in sorted(scale["bytesPerJob"].items(), key=lambda item: -item[1]):
        print(f"| {name} | {size:,} |")
    print(f"\nOf which the job's own row and indexes (with the run it holds, without other custody rows): "
          f"{scale['withoutCustody']:,} bytes.")
    t = results["throughput"]
    print(f"\nThroughput: {t['jobs']} finished jobs archived (stored, read back, pruned) in {t['seconds']} s "
          f"with 4 requests at once: {t['jobsPerSecond']} jobs/s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
