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


def d1_file(server: chaos.Server) -> Path:
    """The server's local D1 database file (the one that is not miniflare's metadata)."""
    files = [p for p in (server.state / "v3" / "d1").rglob("*.sqlite") if p.name != "metadata.sqlite"]
    if len(files) != 1:
        raise RuntimeError(f"expected one D1 file, found {files}")
    return files[0]


def pages_by_name(db: sqlite3.Connection) -> dict[str, int]:
    return {name: size for name, size in db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")}


# A compact layout for archived jobs, measured beside today's (a design, not the schema): an
# integer key that the indexes carry instead of the 28-byte job id; hashes as 32-byte blobs;
# the subject by its version (the version names its artifact, kind and content hash); the
# requirements by reference to one row per distinct requirements document; the accepted
# completion's evaluation run in the row instead of a custody row; what only the detail shows
# (input hash, stream summary, the decisions' counters) in the R2 record.
COMPACT = """
CREATE TABLE compact_requirements (id INTEGER PRIMARY KEY, sha256 BLOB NOT NULL UNIQUE, document TEXT NOT NULL);
CREATE TABLE compact_archived_jobs (
    seq INTEGER PRIMARY KEY,
    organization_id TEXT NOT NULL,
    id TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL,
    intent_hash BLOB NOT NULL,
    subject_version_id INTEGER NOT NULL,
    subject_environment INTEGER NOT NULL,
    requirements_id INTEGER NOT NULL REFERENCES compact_requirements (id),
    state INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    bundle_sha256 BLOB NOT NULL,
    bundle_bytes INTEGER NOT NULL,
    evidence_run_id TEXT,
    held_at INTEGER, held_by TEXT, held_reason TEXT, expiring_at INTEGER);
CREATE UNIQUE INDEX compact_by_key ON compact_archived_jobs (organization_id, idempotency_key);
CREATE INDEX compact_by_organization ON compact_archived_jobs (organization_id, created_at);
CREATE INDEX compact_by_state ON compact_archived_jobs (organization_id, state, created_at);
CREATE INDEX compact_to_expire ON compact_archived_jobs (organization_id, finished_at)
    WHERE held_at IS NULL AND expiring_at IS NULL;
"""


def compact_at_scale(db: sqlite3.Connection, row: dict, run_id: str | None, copies: int) -> dict:
    """Bytes per archived job in the compact layout, for `copies` copies of `row`."""
    db.executescript(COMPACT)
    db.execute("INSERT INTO compact_requirements (sha256, document) VALUES (?, ?)",
               (os.urandom(32), row["requirements"]))
    before = pages_by_name(db)
    states = {"succeeded": 0, "failed": 1, "cancelled": 2}
    environments = {"dev": 0, "staging": 1, "prod": 2}
    for n in range(copies):
        db.execute(
            "INSERT INTO compact_archived_jobs (organization_id, id, idempotency_key, intent_hash, "
            "subject_version_id, subject_environment, requirements_id, state, attempts, created_at, "
            "finished_at, bundle_sha256, bundle_bytes, evidence_run_id) "
            "VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)",
            (row["organization_id"], "job_" + os.urandom(12).hex(), f"storage-{n:08x}",
             bytes.fromhex(row["intent_hash"]), row["subject_version_id"],
             environments[row["subject_environment"]], states[row["state"]],
             row["dispatch_attempt"] * 16 + row["released_attempts"], row["created_at"] + n * 1000,
             row["finished_at"] + n * 1000, bytes.fromhex(row["bundle_sha256"]), row["bundle_bytes"],
             run_id and run_id[:4] + os.urandom(12).hex()))
    db.commit()
    after = pages_by_name(db)
    grown = {name: round((after[name] - before.get(name, 0)) / copies, 1)
             for name in after if name.startswith(("compact", "sqlite_autoindex_compact"))
             and after[name] > before.get(name, 0)}
    return {"bytesPerJob": grown, "totalPerJob": round(sum(grown.values()), 1)}


def at_scale(source: Path, job_id: str, copies: int, scratch: Path) -> dict:
    """Bytes per archived job in the database file, by table and index: `copies` copies of the
    archived job `job_id` (row and custody rows) added to a copy of the server's database."""
    path = scratch / "scale.sqlite"
    shutil.copyfile(source, path)
    db = sqlite3.connect(path)
    # A copy for measuring only: the rows copied are valid as the server writes them, but the
    # schema's triggers would ask for the job's pruned rows (its completion) to exist.
    db.execute("PRAGMA foreign_keys = OFF")
    for (name,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'trigger'").fetchall():
        db.execute(f'DROP TRIGGER "{name}"')
    db.commit()
    before = pages_by_name(db)
    file_before = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    job_columns = [row[1] for row in db.execute("PRAGMA table_info(jobs)")]
    [template] = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchall()
    custody = db.execute("SELECT * FROM completion_evidence WHERE job_id = ?", (job_id,)).fetchall()
    custody_columns = [row[1] for row in db.execute("PRAGMA table_info(completion_evidence)")]
    row = dict(zip(job_columns, template))
    for n in range(copies):
        new_id = "job_" + os.urandom(12).hex()
        copy = dict(row, id=new_id, idempotency_key=f"storage-{n:08x}",
                    created_at=row["created_at"] + n * 1000, updated_at=row["updated_at"] + n * 1000,
                    finished_at=row["finished_at"] + n * 1000, archived_at=row["archived_at"] + n * 1000)
        db.execute(f"INSERT INTO jobs ({', '.join(copy)}) VALUES ({', '.join('?' * len(copy))})", list(copy.values()))
        for held in custody:
            entry = dict(zip(custody_columns, held))
            entry.update(job_id=new_id, evidence_id=entry["evidence_id"][:4] + os.urandom(12).hex(),
                         completion_id=entry["completion_id"][:4] + os.urandom(12).hex())
            db.execute(f"INSERT INTO completion_evidence ({', '.join(entry)}) VALUES ({', '.join('?' * len(entry))})",
                       list(entry.values()))
    db.commit()
    after = pages_by_name(db)
    file_after = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    runs = [dict(zip(custody_columns, held))["evidence_id"] for held in custody
            if dict(zip(custody_columns, held))["evidence_kind"] == "evaluation_run"]
    compact = compact_at_scale(db, row, runs[0] if runs else None, copies)
    db.close()
    path.unlink()
    grown = {name: round((after[name] - before.get(name, 0)) / copies, 1)
             for name in after if after[name] > before.get(name, 0)}
    return {"copies": copies, "custodyRows": len(custody), "bytesPerJob": grown,
            "totalPerJob": round(sum(grown.values()), 1),
            "fileBytesPerJob": round((file_after - file_before) / copies, 1), "compact": compact}


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

    print("| job | D1 before: rows, bytes | D1 after: rows, bytes | of which the job row | R2: bundle + record bytes |")
    print("|---|---|---|---|---|")
    for label, job in results["jobs"].items():
        b, a = total(job["before"]), total(job["after"])
        print(f"| {label} | {b[0]:,}, {b[1]:,} | {a[0]}, {a[1]:,} | {job['after']['jobs'][1]:,} | "
              f"{job['r2Bytes']:,} (bundle {job['bundleBytes']:,}) |")
    scale = results["scale"]
    print(f"\nAt scale: {scale['copies']:,} archived quiet jobs (each with {scale['custodyRows']} custody row(s)) "
          f"grow its tables and indexes by {scale['totalPerJob']:,} bytes each (the file by "
          f"{scale['fileBytesPerJob']:,}):")
    print("| table or index | bytes per archived job |\n|---|---|")
    for name, size in sorted(scale["bytesPerJob"].items(), key=lambda item: -item[1]):
        print(f"| {name} | {size:,} |")
    print(f"\nThe compact layout (bench/storage.py COMPACT), the same jobs: {scale['compact']['totalPerJob']:,} bytes each:")
    print("| table or index | bytes per archived job |\n|---|---|")
    for name, size in sorted(scale["compact"]["bytesPerJob"].items(), key=lambda item: -item[1]):
        print(f"| {name} | {size:,} |")
    t = results["throughput"]
    print(f"\nThroughput: {t['jobs']} finished jobs archived (stored, read back, pruned) in {t['seconds']} s "
          f"with 4 requests at once: {t['jobsPerSecond']} jobs/s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
