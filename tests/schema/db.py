"""The schema suites' database: every migration applied to in-memory SQLite, and its helpers.

The D1 schema's invariants, proved against SQLite.

Run from the repository root:

    python3 -m unittest discover -s tests/schema -v

Every `migrations/*.sql` is applied in order to an in-memory SQLite database with foreign keys
on (D1 enforces them by default). Each invariant is shown twice: the legal write succeeds and
the violating write raises `sqlite3.IntegrityError`. A "batch" here is what D1's `batch()` is,
one transaction: BEGIN, the statements in order, COMMIT, or ROLLBACK on the first failure.

Only the standard library is used.
"""

import glob
import hashlib
import json
import os
import pathlib
import re
import sqlite3
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIGRATIONS = sorted(glob.glob(os.path.join(ROOT, "migrations", "*.sql")))
QUERIES = pathlib.Path(ROOT, "src", "store", "queries")

NOW = 1_780_000_000_000  # Unix ms; fixed so that every test is deterministic.
LEASE_MS = 60_000
HOLDING = ("claimed", "running", "cancel_requested")
ENVIRONMENTS = ("dev", "staging", "prod")


def stable_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def H(value):
    """The protocol hash: SHA-256 hex of the stable JSON rendering."""
    return hashlib.sha256(stable_json(value).encode()).hexdigest()


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def open_database(migrations=None):
    conn = sqlite3.connect(":memory:", isolation_level=None)  # autocommit; batches BEGIN explicitly
    conn.execute("PRAGMA foreign_keys = ON")
    if sqlite3.sqlite_version_info < (3, 41, 0):
        # unhex() is SQLite's own from 3.41 (D1 and workerd have it); older Pythons get its
        # behaviour here: hex text to a blob, NULL for NULL or text that is not hex.
        conn.create_function("unhex", 1, python_unhex, deterministic=True)
    for path in MIGRATIONS if migrations is None else migrations:
        apply_migration(conn, path)
    return conn


def python_unhex(text):
    if text is None:
        return None
    try:
        return bytes.fromhex(text)
    except (TypeError, ValueError):
        return None


def apply_migration(conn, path):
    """One migration as D1 applies it: the whole file in one transaction."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    conn.execute("BEGIN")
    try:
        for statement in split_statements(text):
            conn.execute(statement)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def split_statements(text):
    """The statements of a migration file, in order (a trigger's body is part of its statement)."""
    statements, pending = [], ""
    for line in text.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip():
                statements.append(pending)
            pending = ""
    if pending.strip() and re.sub(r"--[^\n]*", "", pending).strip():
        raise ValueError(f"unterminated statement: {pending[:80]!r}")
    return statements


def batch(conn, statements):
    """Run statements as one transaction, like D1's batch(): all or nothing."""
    conn.execute("BEGIN")
    try:
        for sql, params in statements:
            conn.execute(sql, params)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def query(name):
    return (QUERIES / f"{name}.sql").read_text()


# The quota's allowances, as src/store/usage.rs has them (and migration 0015's estimate).
JOB_ROW_BYTES = 1024
ARCHIVED_JOB_BYTES = 512
CHUNK_ROW_BYTES = 256
VERSION_ROW_BYTES = 512
