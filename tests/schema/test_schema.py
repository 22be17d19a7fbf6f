"""The D1 schema's invariants, proved against SQLite.

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


class World:
    """Builds valid rows with the statements the service will use; tests override fields."""

    def __init__(self, conn):
        self.conn = conn
        self.counter = 0

    # -- plumbing -----------------------------------------------------------------------------

    def uid(self, prefix):
        self.counter += 1
        return f"{prefix}_{self.counter:04d}"

    def insert(self, table, row):
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", list(row.values()))

    def one(self, sql, *params):
        return self.conn.execute(sql, params).fetchone()

    # The deployment's default quota the service passes to each charge (generous here: a test
    # that is about the quota sets the organization's own).
    quota = 1 << 40

    def usage(self, name, *params):
        """queries/usage/NAME right after the statement it follows, as the service's batches run
        it (it applies only when that statement changed its row); nothing before migration 0014,
        and no charge before 0015."""
        self.usage_sql(query(f"usage/{name}"), *params)

    def usage_sql(self, sql, *params):
        """[`usage`] of a statement's text (one the service ran before a later migration)."""
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(organization_usage)")}
        if columns and ("d1_bytes" in columns or "d1_bytes" not in sql):  # and nothing before 0015's
            self.conn.execute(sql, params)

    def job_row(self, job_id):
        return self.one(
            "SELECT state, dispatch_attempt, active_claim_id, lease_expires_at, updated_at"
            " FROM jobs WHERE id = ?",
            job_id,
        )

    def active_claims(self, runner_id):
        return self.one("SELECT active_claims FROM runners WHERE id = ?", runner_id)[0]

    # -- tenancy ------------------------------------------------------------------------------

    def org(self, **overrides):
        row = {"id": self.uid("org"), "name": "Acme", "created_at": NOW}
        row.update(overrides)
        self.insert("organizations", row)
        return row["id"]

    def api_key(self, org, **overrides):
        secret = self.uid("erk_live_secret")
        row = {
            "id": self.uid("key"),
            "organization_id": org,
            "name": "ci",
            "key_prefix": secret[:8],
            "key_hash": sha(secret),
            "role": "admin",
            "scopes": '["runs:read","runs:write","admin:org"]',
            "created_at": NOW,
        }
        row.update(overrides)
        self.insert("api_keys", row)
        return row["id"]

    def enrollment_token(self, org, **overrides):
        secret = self.uid("ere_secret")
        row = {
            "id": self.uid("ent"),
            "organization_id": org,
            "name": "rack 4",
            "token_prefix": "ere_" + sha(secret)[:8],
            "token_hash": sha(secret),
            "max_uses": 2,
            "created_at": NOW,
            "created_by": "api_key:key_0001",
            "expires_at": NOW + 86_400_000,
        }
        row.update(overrides)
        self.insert("enrollment_tokens", row)
        return row["id"]

    # -- runners ------------------------------------------------------------------------------

    CAPABILITIES = {
        "protocolVersion": "1",
        "executionKinds": ["agent", "scorer"],
        "runtimes": ["python3.12"],
        "maxConcurrentJobs": 2,
    }

    def runner(self, org, **overrides):
        """A bootstrap (admin-registered) runner, active."""
        runner_id = self.uid("run")
        row = {
            "id": runner_id,
            "organization_id": org,
            "identity_model": "bootstrap",
            "name": "gpu-box",
            "runner_key": runner_id + "-key",
            "bootstrap_token_hash": sha("bootstrap-token-" + runner_id),
            "state": "active",
            "capabilities": stable_json(self.CAPABILITIES),
            "capabilities_hash": H(self.CAPABILITIES),
            "protocol_version": "1",
            "max_concurrent_jobs": 2,
            "key_id": "kid-" + runner_id,
            "registered_at": NOW,
            "approved_at": NOW,
            "updated_at": NOW,
        }
        row.update(overrides)
        self.insert("runners", row)
        return row["id"]

    def keypair_runner(self, org, **overrides):
        """A self-registered key-pair runner, awaiting approval."""
        runner_id = self.uid("run")
        public_key = "ed25519-public-key-" + runner_id
        row = {
            "id": runner_id,
            "organization_id": org,
            "identity_model": "keypair",
            "name": "judge-7",
            "public_key": public_key,
            "fingerprint": "SHA256:" + sha(public_key),
            "product": "edgerunner",
            "version": "0.1.0",
            "machine": '{"cpus":8}',
            "address": "203.0.113.7",
            "state": "pending_approval",
            "capabilities": stable_json(self.CAPABILITIES),
            "capabilities_hash": H(self.CAPABILITIES),
            "protocol_version": "1",
            "problem_types": '["icpc.batch"]',
            "external": 0,
            "registered_at": NOW,
            "updated_at": NOW,
        }
        row.update(overrides)
        self.insert("runners", row)
        return row["id"]

    # -- releases -----------------------------------------------------------------------------

    def release(self, org, kind="agent", environments=ENVIRONMENTS, content=None):
        artifact_id = self.uid("art")
        self.insert(
            "release_artifacts",
            {"id": artifact_id, "organization_id": org, "kind": kind, "name": artifact_id, "created_at": NOW},
        )
        content = content if content is not None else {"entrypoint": "main:run", "artifact": artifact_id}
        self.insert(
            "release_versions",
            {
                "artifact_id": artifact_id,
                "organization_id": org,
                "content": stable_json(content),
                "content_hash": H(content),
                "created_at": NOW,
            },
        )
        version_id = self.one("SELECT last_insert_rowid()")[0]
        self.usage("charge", org, VERSION_ROW_BYTES + len(stable_json(content).encode()), self.quota)
        for environment in environments:
            self.promote(org, version_id, environment)
        return {"artifact_id": artifact_id, "version_id": version_id, "content_hash": H(content), "kind": kind}

    def promote(self, org, version_id, environment):
        self.insert(
            "release_promotions",
            {"version_id": version_id, "organization_id": org, "environment": environment, "promoted_at": NOW},
        )

    # -- jobs ---------------------------------------------------------------------------------

    def job(self, org, release=None, **overrides):
        release = release or self.release(org)
        job_input = {"question": "2+2", "temperature": 1e-07}
        requirements = {"executionKind": "agent", "runtime": "python3.12"}
        row = {
            "id": self.uid("job"),
            "organization_id": org,
            "idempotency_key": self.uid("idem"),
            "intent_hash": H({"input": job_input, "requirements": requirements}),
            "subject_kind": release["kind"],
            "subject_artifact_id": release["artifact_id"],
            "subject_version_id": release["version_id"],
            "subject_content_hash": release["content_hash"],
            "subject_environment": "prod",
            "input": stable_json(job_input),
            "input_hash": H(job_input),
            "requirements": stable_json(requirements),
            "execution_kind": "agent",
            "runtime": "python3.12",
            "external": 0,
            "created_at": NOW,
            "updated_at": NOW,
        }
        row.update(overrides)
        self.insert("jobs", row)
        self.usage("job_enqueued", row["organization_id"], row["id"], JOB_ROW_BYTES, self.quota)
        return row["id"]

    def grant_statements(self, job_id, runner_id, attempt=None, claim_id=None, nonce=None, org=None):
        """The grant batch, in its contractual order: claim, job, runner, event."""
        org = org or self.one("SELECT organization_id FROM jobs WHERE id = ?", job_id)[0]
        if attempt is None:
            attempt = self.one("SELECT dispatch_attempt FROM jobs WHERE id = ?", job_id)[0] + 1
        claim_id = claim_id or self.uid("clm")
        nonce = nonce or sha("nonce-" + claim_id)
        lease = NOW + LEASE_MS
        return claim_id, [
            (
                "INSERT INTO job_claims (id, job_id, organization_id, runner_id, dispatch_attempt, nonce,"
                " key_id, state, issued_at, expires_at, lease_expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, ?)",
                (claim_id, job_id, org, runner_id, attempt, nonce, "kid-" + runner_id, NOW, NOW + 300_000, lease),
            ),
            (
                "UPDATE jobs SET state = 'claimed', dispatch_attempt = ?, active_claim_id = ?,"
                " lease_expires_at = ?, updated_at = ?"
                " WHERE id = ? AND state = 'queued' AND dispatch_attempt = ?",
                (attempt, claim_id, lease, NOW, job_id, attempt - 1),
            ),
            (
                "UPDATE runners SET active_claims = active_claims + 1, last_seen_at = ?"
                " WHERE id = ? AND state = 'active'",
                (NOW, runner_id),
            ),
            (
                "INSERT INTO job_events (organization_id, job_id, runner_id, claim_id, actor, type, attempt, at)"
                " VALUES (?, ?, ?, ?, ?, 'job.claimed', ?, ?)",
                (org, job_id, runner_id, claim_id, "runner:" + runner_id, attempt, NOW),
            ),
        ]

    def grant(self, job_id, runner_id, **kwargs):
        claim_id, statements = self.grant_statements(job_id, runner_id, **kwargs)
        batch(self.conn, statements)
        return claim_id

    def start(self, job_id):
        """The first heartbeat: claimed → running."""
        self.conn.execute(
            "UPDATE jobs SET state = 'running', lease_expires_at = ?, updated_at = ?"
            " WHERE id = ? AND state = 'claimed'",
            (NOW + 2 * LEASE_MS, NOW, job_id),
        )

    def reap(self, job_id, runner_id, counted="dispatch_attempt - released_attempts"):
        """Lease loss: claim lost, job requeued (or lost at the last attempt), capacity released.
        `counted` is the attempts counted so far (before migration 0006: dispatch_attempt)."""
        state, attempt, claim_id, _, _ = self.job_row(job_id)
        org = self.one("SELECT organization_id FROM jobs WHERE id = ?", job_id)[0]
        batch(
            self.conn,
            [
                (
                    "UPDATE job_claims SET state = 'lost', ended_at = ?, end_reason = 'lease_expired'"
                    " WHERE id = ? AND state = 'active'",
                    (NOW, claim_id),
                ),
                (
                    f"UPDATE jobs SET state = CASE WHEN {counted} < 3 THEN 'queued' ELSE 'lost' END,"
                    " active_claim_id = NULL, lease_expires_at = NULL, updated_at = ?"
                    " WHERE id = ? AND dispatch_attempt = ? AND state IN ('claimed', 'running', 'cancel_requested')",
                    (NOW, job_id, attempt),
                ),
                ("UPDATE runners SET active_claims = active_claims - 1 WHERE id = ?", (runner_id,)),
                (
                    "INSERT INTO job_events (organization_id, job_id, runner_id, claim_id, actor, type, attempt, at)"
                    " VALUES (?, ?, ?, ?, 'system:reaper', 'job.lost', ?, ?)",
                    (org, job_id, runner_id, claim_id, attempt, NOW),
                ),
            ],
        )
        return claim_id

    def hand_back(self, job_id, runner_id, free=True):
        """A hand-back: claim released, job queued again, capacity back; a free one is counted in
        released_attempts and so does not use one of the three attempts."""
        _, attempt, claim_id, _, _ = self.job_row(job_id)
        batch(
            self.conn,
            [
                (
                    "UPDATE job_claims SET state = 'released', ended_at = ?, end_reason = 'handed back'"
                    " WHERE id = ? AND state = 'active'",
                    (NOW, claim_id),
                ),
                (
                    "UPDATE jobs SET state = 'queued', active_claim_id = NULL, lease_expires_at = NULL,"
                    " released_attempts = released_attempts + ?, updated_at = ?"
                    " WHERE id = ? AND dispatch_attempt = ? AND state IN ('claimed', 'running')",
                    (1 if free else 0, NOW, job_id, attempt),
                ),
                ("UPDATE runners SET active_claims = active_claims - 1 WHERE id = ?", (runner_id,)),
            ],
        )
        return claim_id

    # -- streams ------------------------------------------------------------------------------

    def chunk(self, job_id, claim_id, attempt, sequence, previous_checksum, payload=None, kind="log", **overrides):
        """A chunk exactly as the SDK's create_remote_runner_stream_chunk builds it."""
        payload = payload if payload is not None else {"message": f"line {sequence}"}
        emitted_at = f"2026-05-28T07:00:{sequence % 60:02d}.123456Z"
        payload_hash = H(payload)
        checksum = H(
            {
                "claimId": claim_id,
                "dispatchAttempt": attempt,
                "emittedAt": emitted_at,
                "jobId": job_id,
                "kind": kind,
                "payloadHash": payload_hash,
                "previousChecksum": previous_checksum,
                "sequence": sequence,
            }
        )
        org = self.one("SELECT organization_id FROM jobs WHERE id = ?", job_id)[0]
        row = {
            "job_id": job_id,
            "organization_id": org,
            "claim_id": claim_id,
            "dispatch_attempt": attempt,
            "sequence": sequence,
            "kind": kind,
            "previous_checksum": previous_checksum,
            "payload": stable_json(payload),
            "payload_hash": payload_hash,
            "checksum": checksum,
            "emitted_at": emitted_at,
            "received_at": NOW,
        }
        # The attempt's running payload total (migration 0004): the predecessor's plus this one.
        before = self.one(
            "SELECT stream_bytes FROM stream_chunks WHERE job_id = ? AND dispatch_attempt = ? AND sequence = ?",
            job_id, attempt, sequence - 1,
        )
        row["stream_bytes"] = ((before[0] or 0) if before else 0) + len(row["payload"].encode())
        row.update(overrides)
        return row

    def append(self, row):
        self.insert("stream_chunks", row)
        self.usage("charge", row["organization_id"], CHUNK_ROW_BYTES + len(row["payload"].encode()), self.quota)
        return row["checksum"]

    def stream(self, job_id, claim_id, attempt, count):
        previous = None
        for sequence in range(count):
            previous = self.append(self.chunk(job_id, claim_id, attempt, sequence, previous))
        return previous

    # -- evidence -----------------------------------------------------------------------------

    def evaluation_run(self, org, **overrides):
        row = {"id": self.uid("evr"), "organization_id": org, "created_at": NOW}
        row.update(overrides)
        self.insert("evaluation_runs", row)
        self.usage("evidence_added", row["organization_id"], "evaluation_run", row["id"], self.quota)
        return row["id"]

    def test_result(self, org, run, **overrides):
        row = {
            "id": self.uid("tr"),
            "organization_id": org,
            "evaluation_run_id": run,
            "name": "case-1",
            "status": "passed",
            "score": 1.0,
            "created_at": NOW,
        }
        row.update(overrides)
        self.insert("test_results", row)
        self.usage("evidence_added", row["organization_id"], "test_result", row["id"], self.quota)
        return row["id"]

    def cost_record(self, org, run, **overrides):
        row = {
            "id": self.uid("cost"),
            "organization_id": org,
            "evaluation_run_id": run,
            "category": "model",
            "amount_micros": 1250,
            "created_at": NOW,
        }
        row.update(overrides)
        self.insert("cost_records", row)
        self.usage("evidence_added", row["organization_id"], "cost_record", row["id"], self.quota)
        return row["id"]

    def model_call(self, org, run, **overrides):
        row = {
            "id": self.uid("mc"),
            "organization_id": org,
            "evaluation_run_id": run,
            "provider": "openai",
            "model": "gpt-x",
            "input_tokens": 10,
            "output_tokens": 5,
            "created_at": NOW,
        }
        row.update(overrides)
        self.insert("model_calls", row)
        self.usage("evidence_added", row["organization_id"], "model_call", row["id"], self.quota)
        return row["id"]

    def trace(self, org, run, **overrides):
        row = {"id": self.uid("trc"), "organization_id": org, "evaluation_run_id": run, "created_at": NOW}
        row.update(overrides)
        self.insert("traces", row)
        self.usage("evidence_added", row["organization_id"], "trace", row["id"], self.quota)
        return row["id"]

    # -- completions --------------------------------------------------------------------------

    def completion_row(self, job, claim, runner, attempt, decision="accepted", status="succeeded",
                       final_stream_checksum=None, evaluation_run_id=None, evidence=(), **overrides):
        """A completion as the SDK's create_remote_runner_completion builds it; `overrides` set
        columns of the stored row directly (e.g. a mismatching claim_id)."""
        job_id, claim_id, runner_id = job, claim, runner
        org, input_hash = self.one("SELECT organization_id, input_hash FROM jobs WHERE id = ?", job_id)
        fields = {
            "jobId": job_id,
            "claimId": claim_id,
            "runnerId": runner_id,
            "organizationId": org,
            "dispatchAttempt": attempt,
            "status": status,
            "inputHash": input_hash,
            "resultHash": H({"answer": 4}),
            "finalStreamChecksum": final_stream_checksum,
            "evidence": {"evaluationRunId": evaluation_run_id, "items": [list(e) for e in evidence]},
            "completedAt": "2026-05-28T07:01:00.000000Z",
        }
        row = {
            "id": self.uid("cmp"),
            "job_id": job_id,
            "organization_id": org,
            "claim_id": claim_id,
            "runner_id": runner_id,
            "dispatch_attempt": attempt,
            "decision": decision,
            "rationale": decision,
            "completion_checksum": H(fields),
            "status": status,
            "input_hash": input_hash,
            "result_hash": fields["resultHash"],
            "final_stream_checksum": final_stream_checksum,
            "evaluation_run_id": evaluation_run_id,
            "evidence": stable_json(fields["evidence"]),
            "completed_at": fields["completedAt"],
            "received_at": NOW,
        }
        row.update(overrides)
        return row

    def completion_statements(self, row, evidence=()):
        """The completion batch, in its contractual order (accepted decisions)."""
        job_id, claim_id, runner_id, org = row["job_id"], row["claim_id"], row["runner_id"], row["organization_id"]
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        statements = [(f"INSERT INTO job_completions ({columns}) VALUES ({marks})", list(row.values()))]
        if row["decision"] == "accepted":
            statements += [
                (
                    "UPDATE jobs SET state = ?, active_claim_id = NULL, lease_expires_at = NULL,"
                    " finished_at = ?, updated_at = ?"
                    " WHERE id = ? AND active_claim_id = ? AND dispatch_attempt = ?"
                    " AND state IN ('claimed', 'running', 'cancel_requested')",
                    (row["status"], NOW, NOW, job_id, claim_id, row["dispatch_attempt"]),
                ),
                (
                    "UPDATE job_claims SET state = 'released', ended_at = ?, end_reason = 'completed'"
                    " WHERE id = ? AND state = 'active'",
                    (NOW, claim_id),
                ),
                (
                    "UPDATE runners SET active_claims = active_claims - 1, completed_jobs = completed_jobs + 1"
                    " WHERE id = ?",
                    (runner_id,),
                ),
            ]
        statements.append(
            (
                "INSERT INTO job_events (organization_id, job_id, runner_id, claim_id, actor, type, attempt, at)"
                " VALUES (?, ?, ?, ?, ?, 'job.completion_received', ?, ?)",
                (org, job_id, runner_id, claim_id, "runner:" + runner_id, row["dispatch_attempt"], NOW),
            )
        )
        # As the service does (job_do/complete.rs, `attachments`): an accepted completion takes
        # its evaluation run into custody first, then the rows it names.
        run = ("evaluation_run", row["evaluation_run_id"])
        if row["decision"] == "accepted" and run[1] is not None and run not in evidence:
            evidence = [run, *evidence]
        for kind, evidence_id in evidence:
            statements.append(
                (
                    "INSERT INTO completion_evidence"
                    " (evidence_kind, evidence_id, completion_id, job_id, organization_id, attached_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (kind, evidence_id, row["id"], job_id, org, NOW),
                )
            )
        return statements

    def complete(self, job_id, claim_id, runner_id, attempt, evidence=(), **kwargs):
        row = self.completion_row(job_id, claim_id, runner_id, attempt, evidence=evidence, **kwargs)
        batch(self.conn, self.completion_statements(row, evidence))
        return row["id"]


class SchemaTest(unittest.TestCase):
    def setUp(self):
        self.conn = open_database()
        self.w = World(self.conn)

    def tearDown(self):
        self.conn.close()

    def assertRefused(self, fn, *args, message=None, **kwargs):
        """fn(*args, **kwargs) raises IntegrityError (whose text contains `message`, if given)."""
        with self.assertRaises(sqlite3.IntegrityError) as caught:
            fn(*args, **kwargs)
        if message is not None:
            self.assertIn(message, str(caught.exception))
        return caught.exception

    def execute(self, sql, *params):
        return self.conn.execute(sql, params)

    def claimed_job(self, org=None, runner=None, **job_overrides):
        org = org or self.w.org()
        runner = runner or self.w.runner(org)
        job = self.w.job(org, **job_overrides)
        claim = self.w.grant(job, runner)
        return org, runner, job, claim


# =============================================================================================
# The migration itself
# =============================================================================================


class MigrationTests(SchemaTest):
    def test_migrations_apply_in_order_with_foreign_keys_enforced(self):
        self.assertTrue(MIGRATIONS, "no migrations/*.sql found")
        self.assertEqual(os.path.basename(MIGRATIONS[0]), "0001_init.sql")
        self.assertEqual(self.execute("PRAGMA foreign_keys").fetchone()[0], 1)
        self.assertEqual(self.execute("PRAGMA foreign_key_check").fetchall(), [])
        self.assertEqual(self.execute("PRAGMA integrity_check").fetchone()[0], "ok")

    def test_migrations_hold_no_pragma_or_top_level_transaction(self):
        # D1 runs each migration in its own transaction and refuses most PRAGMAs (the one it
        # documents for migrations, defer_foreign_keys, is allowed); BEGIN/END are only allowed
        # as the body delimiters of CREATE TRIGGER.
        for path in MIGRATIONS:
            with open(path, encoding="utf-8") as f:
                text = re.sub(r"--[^\n]*", "", f.read())
            text = re.sub(r"(?im)^\s*PRAGMA defer_foreign_keys = on;", "", text)
            with self.subTest(migration=os.path.basename(path)):
                self.assertIsNone(re.search(r"(?im)^\s*PRAGMA\b", text))
                self.assertIsNone(re.search(r"(?im)\bBEGIN\s+(TRANSACTION|IMMEDIATE|EXCLUSIVE|DEFERRED)\b", text))
                self.assertIsNone(re.search(r"(?im)\bBEGIN\s*;", text))
                self.assertIsNone(re.search(r"(?im)\b(COMMIT|ROLLBACK|END\s+TRANSACTION)\s*;", text))


    def test_the_hand_back_rebuild_keeps_every_row_and_every_foreign_key(self):
        # 0006 rebuilds jobs, job_claims, job_events and job_completions under D1's always-on
        # foreign keys. A database with rows in every table touched (and their children: chunks,
        # evidence) comes through it unchanged but for the new column.
        before = [p for p in MIGRATIONS if os.path.basename(p) < "0006"]
        rebuild = next(p for p in MIGRATIONS if os.path.basename(p).startswith("0006"))
        conn = open_database(before)
        w = World(conn)
        org = w.org()
        runner = w.runner(org, max_concurrent_jobs=5)
        run = w.evaluation_run(org)
        lost = w.job(org)
        w.grant(lost, runner)
        w.reap(lost, runner, counted="dispatch_attempt")
        done = w.job(org)
        claim = w.grant(done, runner)
        head = w.stream(done, claim, 1, 3)
        w.complete(done, claim, runner, 1, final_stream_checksum=head, evaluation_run_id=run,
                   evidence=[("test_result", w.test_result(org, run))])
        w.complete(done, claim, runner, 1, decision="duplicate", final_stream_checksum=head)
        held = w.job(org)
        w.grant(held, runner)
        queued = w.job(org)
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        columns = {t: ", ".join(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
        rows = {t: conn.execute(f"SELECT {columns[t]} FROM {t} ORDER BY rowid").fetchall() for t in tables}
        events_seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'job_events'").fetchone()

        apply_migration(conn, rebuild)

        self.assertEqual(conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        self.assertEqual(conn.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        for t in tables:
            with self.subTest(table=t):
                after = conn.execute(f"SELECT {columns[t]} FROM {t} ORDER BY rowid").fetchall()
                self.assertEqual(after, rows[t])
        self.assertEqual(conn.execute("SELECT DISTINCT released_attempts FROM jobs").fetchall(), [(0,)])
        self.assertEqual(conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'job_events'").fetchone(),
                         events_seq)
        self.assertEqual(conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'kept_%'").fetchall(), [])
        # The schema is the one a fresh database gets, and its guards are back.
        fresh = open_database([p for p in MIGRATIONS if os.path.basename(p) < "0007"])
        shape = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        self.assertEqual(conn.execute(shape).fetchall(), fresh.execute(shape).fetchall())  # through 0006
        fresh.close()
        w2 = World(conn)
        self.assertRaises(sqlite3.IntegrityError, conn.execute, "DELETE FROM jobs WHERE id = ?", (done,))
        self.assertRaises(sqlite3.IntegrityError, conn.execute, "UPDATE job_events SET reason = 'x'")
        self.assertRaises(sqlite3.IntegrityError, w2.grant, done, runner)
        self.assertEqual(w2.job_row(lost)[:2], ("queued", 1))
        w2.grant(lost, runner)
        self.assertEqual(w2.job_row(queued)[0], "queued")
        self.assertEqual(w2.job_row(held)[0], "claimed")
        conn.close()


# =============================================================================================
# CHECK constraints on every state and enum column
# =============================================================================================


def _update(table, column, key="id"):
    def mutate(test, row_id, value):
        test.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", value, row_id)

    return mutate


class EnumCheckTests(SchemaTest):
    def cases(self):
        """(table, column, good value, write) — write(value) performs the write under test."""
        w = self.w
        org = w.org()
        runner = w.runner(org, max_concurrent_jobs=5)
        state_runner = w.runner(org)
        _, _, job, claim = self.claimed_job(org=org, runner=runner)
        queued_job = w.job(org)
        run = w.evaluation_run(org)
        _, _, accepted_job, accepted_claim = self.claimed_job(org=org, runner=runner)
        # A row of the run its completion did not name: the enum case below attaches it.
        unnamed_result = w.test_result(org, run)
        accepted = w.complete(accepted_job, accepted_claim, runner, 1, evaluation_run_id=run)

        def insert_runner(**kw):
            return lambda value: w.runner(org, **{**kw, "identity_model": value})

        def chunk_kind(value):
            w.append(w.chunk(job, claim, 1, 0, None, kind=value))

        def completion(column):
            def write(value):
                row = w.completion_row(job, claim, runner, 1, **{"decision": "stale", column: value})
                w.insert("job_completions", row)

            return write

        # `run` is in custody of an accepted completion: new rows go to a run that is not.
        open_run = w.evaluation_run(org)

        def evidence_kind(value):
            self.execute(
                "INSERT INTO completion_evidence (evidence_kind, evidence_id, completion_id, job_id,"
                " organization_id, attached_at) VALUES (?, ?, ?, ?, ?, ?)",
                value, unnamed_result, accepted, accepted_job, org, NOW,
            )

        def archived(column):
            """An archived row with `column` = value, moved from a job pruned for it."""
            def write(value):
                moved = w.job(org)
                self.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, cancel_reason = 'x'"
                             " WHERE id = ?", NOW, moved)
                self.execute("UPDATE jobs SET archive_state = 'stored', bundle_sha256 = ?, bundle_bytes = 1,"
                             " stream_chunks = 0, stream_bytes = 0, archived_at = ? WHERE id = ?",
                             sha(moved), NOW, moved)
                self.execute("UPDATE jobs SET archive_state = 'pruned' WHERE id = ?", moved)
                number = w.one("SELECT number FROM organization_numbers WHERE organization_id = ?", org)[0]
                document = self.execute(
                    "INSERT INTO requirement_documents (organization_number, document, jobs)"
                    " SELECT ?, requirements, 1 FROM jobs WHERE id = ?"
                    " ON CONFLICT (organization_number, document) DO UPDATE SET jobs = jobs + 1"
                    " RETURNING id", number, moved).fetchone()[0]
                row = {"state": "cancelled", "subject_environment": "prod", column: value}
                self.execute(
                    "INSERT INTO archived_jobs (id, organization_number, idempotency_key, intent_hash,"
                    " subject_version_id, subject_environment, requirements_id, input_hash, state,"
                    " dispatch_attempt, released_attempts, created_at, updated_at, finished_at, archived_at,"
                    " bundle_sha256, bundle_bytes, stream_chunks, stream_bytes)"
                    " SELECT id, ?, idempotency_key, unhex(intent_hash), subject_version_id, ?, ?,"
                    " unhex(input_hash), ?, 0, 0, created_at, updated_at, finished_at, archived_at,"
                    " unhex(bundle_sha256), 1, 0, 0 FROM jobs WHERE id = ?",
                    number, row["subject_environment"], document, row["state"], moved)

            return write

        return [
            ("archived_jobs", "state", "failed", archived("state")),
            ("archived_jobs", "subject_environment", "dev", archived("subject_environment")),
            ("api_keys", "role", "member", lambda v: w.api_key(org, role=v)),
            ("organizations", "enrollment_policy", "token", lambda v: w.org(enrollment_policy=v)),
            ("runners", "state", "draining", lambda v: _update("runners", "state")(self, state_runner, v)),
            ("runners", "identity_model", "bootstrap", insert_runner()),
            ("runners", "external", 1, lambda v: _update("runners", "external")(self, runner, v)),
            ("runner_credentials", "issued_via", "bootstrap", lambda v: w.insert("runner_credentials", {
                "id": w.uid("cred"), "runner_id": runner, "organization_id": org, "credential_generation": 1,
                "issued_via": v, "scopes": '["runner:claim"]', "issued_at": NOW, "expires_at": NOW + 600_000})),
            ("release_artifacts", "kind", "scorer", lambda v: w.release(org, kind=v)),
            ("release_promotions", "environment", "staging",
             lambda v: w.promote(org, w.release(org, environments=())["version_id"], v)),
            ("jobs", "state", "cancelled",
             lambda v: self.execute("UPDATE jobs SET state = ?, finished_at = ? WHERE id = ?", v, NOW, queued_job)),
            ("jobs", "subject_kind", "agent", lambda v: w.job(org, subject_kind=v)),
            ("jobs", "subject_environment", "staging", lambda v: w.job(org, subject_environment=v)),
            ("jobs", "execution_kind", "tool", lambda v: w.job(org, execution_kind=v)),
            ("jobs", "external", 1, lambda v: w.job(org, external=v)),
            ("job_claims", "state", "active", lambda v: _update("job_claims", "state")(self, claim, v)),
            ("stream_chunks", "kind", "trajectory", chunk_kind),
            ("job_completions", "decision", "stale", completion("decision")),
            ("job_completions", "status", "failed", completion("status")),
            ("completion_evidence", "evidence_kind", "test_result", evidence_kind),
            ("evaluation_runs", "status", "completed", lambda v: w.evaluation_run(org, status=v)),
            ("test_results", "status", "skipped", lambda v: w.test_result(org, open_run, status=v)),
            ("cost_records", "category", "sandbox", lambda v: w.cost_record(org, open_run, category=v)),
            ("model_calls", "status", "failed", lambda v: w.model_call(org, open_run, status=v)),
            ("organization_counters", "name", "requeues",
             lambda v: self.execute(query("counters/add"), org, v, 1)),
            ("deployment_counters", "name", "reaper_passes",
             lambda v: self.execute("INSERT INTO deployment_counters (name, value) VALUES (?, 1)"
                                    " ON CONFLICT (name) DO UPDATE SET value = value + 1", v)),
        ]

    def test_every_state_and_enum_column_refuses_an_unknown_value(self):
        for table, column, good, write in self.cases():
            with self.subTest(table=table, column=column):
                write(good)
                bad = 7 if isinstance(good, int) else "bogus"
                self.assertRefused(write, bad)

    def test_every_enum_check_in_the_schema_is_covered_here(self):
        # A new enum column without a case above fails this test rather than going unproved.
        covered = {(t, c) for t, c, _, _ in self.cases()}
        declared = set()
        for table, sql in self.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
            for column in re.findall(r"CHECK \((\w+) IN \(", sql or ""):
                declared.add((table, column))
        self.assertEqual(declared - covered, set())


# =============================================================================================
# Enrollment policy and tokens (migration 0009)
# =============================================================================================


class EnrollmentPolicyTests(SchemaTest):
    def test_an_organization_is_open_unless_it_says_otherwise(self):
        org = self.w.org()
        self.assertEqual(self.w.one("SELECT enrollment_policy FROM organizations WHERE id = ?", org)[0], "open")
        self.execute("UPDATE organizations SET enrollment_policy = 'closed' WHERE id = ?", org)
        self.assertRefused(self.execute, "UPDATE organizations SET enrollment_policy = 'Open' WHERE id = ?", org,
                           message="CHECK constraint failed")

    def test_a_token_is_bounded_in_uses_and_lifetime(self):
        org = self.w.org()
        self.w.enrollment_token(org, max_uses=1)
        self.w.enrollment_token(org, max_uses=1000, expires_at=NOW + 2_592_000_000)
        for bad in ({"max_uses": 0}, {"max_uses": 1001}, {"expires_at": NOW},
                    {"expires_at": NOW + 2_592_000_001}, {"uses": 3}, {"uses": -1},
                    {"id": "tok_1"}, {"token_hash": "short"}, {"name": ""}):
            with self.subTest(bad=bad):
                self.assertRefused(self.w.enrollment_token, org, **bad, message="CHECK constraint failed")

    def test_a_token_hash_is_unique_across_organizations(self):
        org, other = self.w.org(), self.w.org()
        self.w.enrollment_token(org, token_hash=sha("same"))
        self.assertRefused(self.w.enrollment_token, other, token_hash=sha("same"), message="UNIQUE")

    def test_live_tokens_stop_at_100_per_organization(self):
        org, other = self.w.org(), self.w.org()
        for _ in range(100):
            self.w.enrollment_token(org)
        self.assertRefused(self.w.enrollment_token, org, message="enrollment_tokens_at_cap")
        # Another organization, and the dead ones, do not count.
        self.w.enrollment_token(other)
        first = self.w.one("SELECT id FROM enrollment_tokens WHERE organization_id = ? ORDER BY id", org)[0]
        self.execute("UPDATE enrollment_tokens SET revoked_at = ? WHERE id = ?", NOW, first)
        self.w.enrollment_token(org)
        self.assertRefused(self.w.enrollment_token, org, message="enrollment_tokens_at_cap")
        self.w.enrollment_token(org, created_at=NOW + 86_400_000, expires_at=NOW + 2 * 86_400_000)

    def test_a_token_cannot_be_unrevoked_rewound_or_rewritten(self):
        org = self.w.org()
        token = self.w.enrollment_token(org)
        self.execute("UPDATE enrollment_tokens SET uses = 1, last_used_at = ? WHERE id = ?", NOW, token)
        for sql in ("UPDATE enrollment_tokens SET uses = 0 WHERE id = ?",
                    "UPDATE enrollment_tokens SET max_uses = 5 WHERE id = ?",
                    "UPDATE enrollment_tokens SET expires_at = expires_at + 1 WHERE id = ?",
                    "UPDATE enrollment_tokens SET token_hash = '" + sha("other") + "' WHERE id = ?"):
            with self.subTest(sql=sql):
                self.assertRefused(self.execute, sql, token, message="enrollment_token_is_immutable")
        self.execute("UPDATE enrollment_tokens SET revoked_at = ? WHERE id = ?", NOW + 1, token)
        self.assertRefused(self.execute, "UPDATE enrollment_tokens SET revoked_at = NULL WHERE id = ?", token,
                           message="enrollment_token_is_immutable")

    def test_a_runner_admitted_by_a_token_spends_one_use_in_the_same_statement(self):
        org = self.w.org()
        token = self.w.enrollment_token(org, max_uses=2)
        self.w.keypair_runner(org, enrollment_token_id=token, enroll_network="203.0.113.7")
        self.assertEqual(self.w.one("SELECT uses, last_used_at FROM enrollment_tokens WHERE id = ?", token),
                         (1, NOW))
        self.w.keypair_runner(org, enrollment_token_id=token, enroll_network="203.0.113.7")
        # Used up: the third is refused and nothing is written.
        self.assertRefused(self.w.keypair_runner, org, enrollment_token_id=token, message="enrollment_token_invalid")
        self.assertEqual(self.w.one("SELECT uses FROM enrollment_tokens WHERE id = ?", token)[0], 2)
        self.assertEqual(self.w.one(
            "SELECT count(*) FROM runners WHERE enrollment_token_id = ?", token)[0], 2)

    def test_a_revoked_expired_or_foreign_token_admits_no_runner(self):
        org, other = self.w.org(), self.w.org()
        revoked = self.w.enrollment_token(org, revoked_at=NOW)
        expired = self.w.enrollment_token(org, created_at=NOW - 2 * 86_400_000, expires_at=NOW)
        foreign = self.w.enrollment_token(other)
        for token in (revoked, expired, foreign, "ent_unknown"):
            with self.subTest(token=token):
                self.assertRefused(self.w.keypair_runner, org, enrollment_token_id=token,
                                   message="enrollment_token_invalid")
        # The control: a live token of the organization admits one.
        self.w.keypair_runner(org, enrollment_token_id=self.w.enrollment_token(org))

    def test_a_runner_keeps_the_network_and_token_it_enrolled_with(self):
        org = self.w.org()
        runner = self.w.keypair_runner(org, enroll_network="203.0.113.7")
        self.assertRefused(self.execute, "UPDATE runners SET enroll_network = '198.51.100.1' WHERE id = ?", runner,
                           message="runner_enrollment_is_fixed")
        self.execute("UPDATE runners SET name = 'renamed' WHERE id = ?", runner)
        # Only a key-pair enrollment has a network or a token.
        self.assertRefused(self.w.runner, org, enroll_network="203.0.113.7", message="CHECK constraint failed")

    def test_pending_enrollments_stop_at_the_networks_share(self):
        org, other = self.w.org(), self.w.org()
        self.execute("UPDATE organizations SET max_pending_enrollments_per_network = 2 WHERE id = ?", org)
        first = self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64")
        self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64")
        self.assertRefused(self.w.keypair_runner, org, enroll_network="2001:db8:1:2::/64",
                           message="pending_enrollments_from_network_at_cap")
        # Another network, another organization, and a token's enrollments are not counted.
        self.w.keypair_runner(org, enroll_network="2001:db8:1:3::/64")
        self.w.keypair_runner(other, enroll_network="2001:db8:1:2::/64")
        self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64",
                              enrollment_token_id=self.w.enrollment_token(org))
        # Approving one frees its slot.
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, first)
        self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64")


    def test_pending_enrollments_stop_at_the_sites_share(self):
        # Migration 0012: one IPv6 /48 (or IPv4 address) has its own share, across its /64s.
        org, other = self.w.org(), self.w.org()
        self.execute("UPDATE organizations SET max_pending_enrollments_per_site = 2 WHERE id = ?", org)
        site = "2001:db8:1::/48"
        first = self.w.keypair_runner(org, enroll_network="2001:db8:1:1::/64", enroll_site=site)
        self.w.keypair_runner(org, enroll_network="2001:db8:1:2::/64", enroll_site=site)
        self.assertRefused(self.w.keypair_runner, org, enroll_network="2001:db8:1:3::/64", enroll_site=site,
                           message="pending_enrollments_from_site_at_cap")
        # Another site, another organization, and a token's enrollments are not counted.
        self.w.keypair_runner(org, enroll_network="2001:db8:2:1::/64", enroll_site="2001:db8:2::/48")
        self.w.keypair_runner(other, enroll_network="2001:db8:1:3::/64", enroll_site=site)
        self.w.keypair_runner(org, enroll_network="2001:db8:1:3::/64", enroll_site=site,
                              enrollment_token_id=self.w.enrollment_token(org))
        # Approving one frees its slot; the site an enrollment came from never changes.
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, first)
        self.w.keypair_runner(org, enroll_network="2001:db8:1:3::/64", enroll_site=site)
        self.assertRefused(self.execute, "UPDATE runners SET enroll_site = 'x' WHERE id = ?", first,
                           message="runner_enrollment_is_fixed")
        # Only a key-pair enrollment has a site.
        self.assertRefused(self.w.runner, org, enroll_site=site, message="CHECK constraint failed")

    def test_a_tokens_enrollments_neither_count_against_nor_stop_at_the_organizations_cap(self):
        org = self.w.org()
        self.execute("UPDATE organizations SET max_pending_enrollments = 2 WHERE id = ?", org)
        token = self.w.enrollment_token(org, max_uses=3)
        self.w.keypair_runner(org, enrollment_token_id=token)
        self.w.keypair_runner(org)
        self.w.keypair_runner(org)
        self.assertRefused(self.w.keypair_runner, org, message="pending_enrollments_at_cap")
        # The token still admits at the cap, and its runners did not take a slot.
        self.w.keypair_runner(org, enrollment_token_id=token)
        self.assertEqual(self.w.one(
            "SELECT count(*) FROM runners WHERE organization_id = ? AND state = 'pending_approval'", org)[0], 4)

    def delete_expired(self, cutoff, limit=500):
        moves = '{"pending_approval":"revoked"}'
        batch(self.conn, [
            (query("runners/delete_expired_enrollment_events"), (cutoff, limit, moves)),
            (query("runners/delete_expired_enrollment_files"), (cutoff, limit, moves)),
            (query("runners/delete_expired_enrollment_challenges"), (cutoff, limit, moves)),
            (query("runners/delete_expired_enrollments"), (cutoff, limit, moves)),
        ])

    def test_the_cron_pass_deletes_an_expired_enrollment_its_files_and_events_only(self):
        org = self.w.org()
        stale = self.w.keypair_runner(org, registered_at=NOW - 10, updated_at=NOW - 10)
        fresh = self.w.keypair_runner(org)
        approved = self.w.keypair_runner(org, registered_at=NOW - 10, updated_at=NOW - 10)
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, approved)
        for runner in (stale, fresh, approved):
            self.w.insert("runner_files", {"runner_id": runner, "organization_id": org, "name": "lscpu.txt",
                                           "content": "x86_64", "content_hash": sha("x86_64"),
                                           "uploaded_at": NOW})
            self.w.insert("job_events", {"organization_id": org, "runner_id": runner, "actor": "runner:" + runner,
                                         "type": "runner.enrolled", "at": NOW})
        self.delete_expired(cutoff=NOW)
        for table, column in (("runners", "id"), ("runner_files", "runner_id"), ("job_events", "runner_id")):
            counts = [self.w.one(f"SELECT count(*) FROM {table} WHERE {column} = ?", r)[0]
                      for r in (stale, fresh, approved)]
            self.assertEqual(counts, [0, 1, 1], table)
        # An approved runner's events stay append-only.
        self.assertRefused(self.execute, "DELETE FROM job_events WHERE runner_id = ?", approved,
                           message="job_events_are_append_only")

    def test_the_cron_pass_deletes_at_most_its_limit_of_expired_enrollments(self):
        org = self.w.org()
        runners = [self.w.keypair_runner(org, registered_at=NOW - 10 + i, updated_at=NOW) for i in range(3)]
        self.delete_expired(cutoff=NOW, limit=2)
        left = [r for r in runners if self.w.one("SELECT count(*) FROM runners WHERE id = ?", r)[0]]
        self.assertEqual(left, runners[2:])

    def test_an_api_key_ends_after_it_was_made_or_never(self):
        # Migration 0013: NULL (keys made before, and bootstrap-admin's) or after created_at.
        org = self.w.org()
        self.w.api_key(org)
        self.w.api_key(org, expires_at=NOW + 1)
        self.assertRefused(self.w.api_key, org, expires_at=NOW, message="CHECK constraint failed")
        # The insert the worker sends binds it.
        self.execute(query("api_keys/insert"), "key_x", org, "ci", "erk_01234567", sha("x"), "member",
                     '["runs:read"]', NOW, NOW + 90 * 86_400_000)
        self.assertEqual(self.w.one("SELECT expires_at FROM api_keys WHERE id = 'key_x'")[0], NOW + 90 * 86_400_000)

    def test_a_runners_events_page_newest_first_before_a_cursor(self):
        org, other_org = self.w.org(), self.w.org()
        runner, other = self.w.runner(org), self.w.runner(org)
        for r, o in ((runner, org), (other, org), (runner, org), (runner, org)):
            self.w.insert("job_events", {"organization_id": o, "runner_id": r, "actor": "system:test",
                                         "type": "runner.tags_changed", "at": NOW})
        ids = [row[0] for row in self.execute(
            "SELECT id FROM job_events WHERE runner_id = ? ORDER BY id DESC", runner).fetchall()]
        page = lambda org_id, before, limit: [row[0] for row in self.execute(
            query("events/for_runner"), org_id, runner, before, limit).fetchall()]
        self.assertEqual(page(org, 2**63 - 1, 2), ids[:2])
        self.assertEqual(page(org, ids[1], 2), ids[2:])
        self.assertEqual(page(other_org, 2**63 - 1, 10), [])

    def test_migration_0012_deletes_the_enrollments_the_cron_pass_revoked_before_it(self):
        before = [m for m in MIGRATIONS if os.path.basename(m) < "0012"]
        conn = open_database(before)
        w = World(conn)
        org = w.org()
        expired = w.keypair_runner(org, state="revoked", revoked_at=NOW,
                                   state_reason="enrollment expired before approval")
        by_admin = w.keypair_runner(org, state="revoked", revoked_at=NOW, state_reason="not ours")
        for runner in (expired, by_admin):
            w.insert("job_events", {"organization_id": org, "runner_id": runner, "actor": "system:cron",
                                    "type": "runner.enrollment_expired", "at": NOW})
        for path in MIGRATIONS[len(before):]:
            apply_migration(conn, path)
        self.assertEqual([w.one("SELECT count(*) FROM runners WHERE id = ?", r)[0] for r in (expired, by_admin)],
                         [0, 1])
        self.assertEqual([w.one("SELECT count(*) FROM job_events WHERE runner_id = ?", r)[0]
                          for r in (expired, by_admin)], [0, 1])
        conn.close()


# =============================================================================================
# Runners
# =============================================================================================


class RunnerTests(SchemaTest):
    def test_runner_active_claims_cannot_exceed_max_concurrent_jobs(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=2)
        self.execute("UPDATE runners SET active_claims = 2 WHERE id = ?", runner)
        # Named by a trigger (migration 0003), so the edge maps it by name.
        self.assertRefused(self.execute, "UPDATE runners SET active_claims = 3 WHERE id = ?", runner,
                           message="runner_at_capacity")
        # Lowering capacity below what is in flight is refused too: drain first.
        self.assertRefused(self.execute, "UPDATE runners SET max_concurrent_jobs = 1 WHERE id = ?", runner,
                           message="CHECK constraint failed")
        self.assertEqual(self.w.active_claims(runner), 2)

    def test_pending_enrollments_stop_at_the_organizations_cap(self):
        org, other = self.w.org(), self.w.org()
        self.execute("UPDATE organizations SET max_pending_enrollments = 2 WHERE id = ?", org)
        self.w.keypair_runner(org)
        self.w.keypair_runner(org)
        self.assertRefused(self.w.keypair_runner, org, message="pending_enrollments_at_cap")
        # Admin-registered runners and other organizations do not count against it.
        self.w.runner(org)
        self.w.keypair_runner(other)
        # Approving one makes room for one more.
        pending = self.execute(
            "SELECT id FROM runners WHERE organization_id = ? AND state = 'pending_approval' LIMIT 1", org
        ).fetchone()[0]
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, pending)
        self.w.keypair_runner(org)

    def test_runner_active_claims_cannot_go_negative(self):
        org = self.w.org()
        runner = self.w.runner(org)
        self.assertRefused(self.execute, "UPDATE runners SET active_claims = active_claims - 1 WHERE id = ?", runner,
                           message="CHECK constraint failed")

    def test_revoked_runner_cannot_be_reactivated(self):
        org = self.w.org()
        runner = self.w.runner(org)
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, runner)
        for state in ("active", "draining", "lost", "pending_approval"):
            with self.subTest(to=state):
                self.assertRefused(
                    self.execute, "UPDATE runners SET state = ?, revoked_at = NULL WHERE id = ?", state, runner,
                    message="runner_revocation_is_permanent",
                )
        # Bookkeeping on a revoked runner still works (the reaper releases its capacity).
        self.execute("UPDATE runners SET last_seen_at = ?, state = 'revoked' WHERE id = ?", NOW + 1, runner)
        self.assertEqual(self.one_state(runner), "revoked")

    def one_state(self, runner):
        return self.w.one("SELECT state FROM runners WHERE id = ?", runner)[0]

    def test_revocation_records_its_time(self):
        org = self.w.org()
        runner = self.w.runner(org)
        self.assertRefused(self.execute, "UPDATE runners SET state = 'revoked' WHERE id = ?", runner,
                           message="CHECK constraint failed")

    def test_runner_key_is_unique_per_organization_but_reusable_across_organizations(self):
        a, b = self.w.org(), self.w.org()
        self.w.runner(a, runner_key="worker-1")
        self.w.runner(b, runner_key="worker-1")
        self.assertRefused(self.w.runner, a, runner_key="worker-1", message="UNIQUE constraint failed")

    def test_fingerprint_is_unique_across_organizations(self):
        a, b = self.w.org(), self.w.org()
        self.w.keypair_runner(a, fingerprint="SHA256:abc")
        self.assertRefused(self.w.keypair_runner, b, fingerprint="SHA256:abc", message="UNIQUE constraint failed")

    def test_each_identity_model_holds_exactly_its_own_credentials(self):
        org = self.w.org()
        self.w.runner(org)
        self.w.keypair_runner(org)
        refused = [
            ("bootstrap runner without token hash", self.w.runner, {"bootstrap_token_hash": None}),
            ("bootstrap runner without runner key", self.w.runner, {"runner_key": None}),
            ("bootstrap runner with a key pair", self.w.runner, {"public_key": "pk", "fingerprint": "fp"}),
            ("bootstrap runner pending approval", self.w.runner, {"state": "pending_approval"}),
            ("keypair runner without public key", self.w.keypair_runner, {"public_key": None}),
            ("keypair runner without fingerprint", self.w.keypair_runner, {"fingerprint": None}),
            ("keypair runner with a bootstrap token", self.w.keypair_runner,
             {"bootstrap_token_hash": sha("token")}),
        ]
        for name, make, overrides in refused:
            with self.subTest(name):
                self.assertRefused(make, org, message="CHECK constraint failed", **overrides)

    def test_keypair_runner_works_only_after_approval(self):
        org = self.w.org()
        runner = self.w.keypair_runner(org)
        self.assertRefused(self.execute, "UPDATE runners SET state = 'active' WHERE id = ?", runner,
                           message="CHECK constraint failed")
        self.execute("UPDATE runners SET state = 'active', approved_at = ? WHERE id = ?", NOW, runner)
        self.assertEqual(self.one_state(runner), "active")

    def test_runner_key_pair_and_organization_are_immutable(self):
        a, b = self.w.org(), self.w.org()
        runner = self.w.keypair_runner(a)
        for column, value in (("public_key", "other"), ("fingerprint", "SHA256:other"),
                              ("organization_id", b), ("identity_model", "bootstrap")):
            with self.subTest(column=column):
                self.assertRefused(self.execute, f"UPDATE runners SET {column} = ? WHERE id = ?", value, runner,
                                   message="runner_identity_is_immutable")

    def test_credential_generation_only_moves_forward(self):
        org = self.w.org()
        runner = self.w.runner(org)
        self.execute("UPDATE runners SET credential_generation = credential_generation + 1 WHERE id = ?", runner)
        self.assertRefused(self.execute, "UPDATE runners SET credential_generation = 1 WHERE id = ?", runner,
                           message="runner_identity_is_immutable")

    def test_runner_file_is_size_capped_plainly_named_and_one_per_name(self):
        org = self.w.org()
        runner = self.w.runner(org)

        def upload(name, content):
            self.w.insert("runner_files", {"runner_id": runner, "organization_id": org, "name": name,
                                           "content": content, "content_hash": sha(content), "uploaded_at": NOW})

        upload("runner.log", "ok\n")
        upload("lscpu.txt", "é" * 131072)  # exactly 262144 bytes of UTF-8
        self.assertRefused(upload, "runner.log", "again", message="UNIQUE constraint failed")
        self.assertRefused(upload, "big.txt", "é" * 131072 + "x", message="CHECK constraint failed")
        for name in ("../etc/passwd", "a/b", ".hidden", "", "x" * 129):
            with self.subTest(name=name):
                self.assertRefused(upload, name, "x", message="CHECK constraint failed")
        other_org = self.w.org()
        self.assertRefused(self.w.insert, "runner_files", {
            "runner_id": runner, "organization_id": other_org, "name": "x.txt", "content": "x",
            "content_hash": sha("x"), "uploaded_at": NOW}, message="FOREIGN KEY constraint failed")

    def test_runner_credentials_live_at_most_ten_minutes(self):
        org = self.w.org()
        runner = self.w.runner(org)

        def issue(lifetime_ms, token_hash=None):
            self.w.insert("runner_credentials", {
                "id": self.w.uid("cred"), "runner_id": runner, "organization_id": org,
                "credential_generation": 1, "token_hash": token_hash, "issued_via": "bootstrap",
                "scopes": '["runner:claim"]', "issued_at": NOW, "expires_at": NOW + lifetime_ms})

        issue(600_000)
        issue(600_000, token_hash=sha("token-a"))
        self.assertRefused(issue, 600_001, message="CHECK constraint failed")
        self.assertRefused(issue, 0, message="CHECK constraint failed")

    def test_challenge_is_single_use_and_bound_to_the_runner_fingerprint(self):
        org = self.w.org()
        runner = self.w.keypair_runner(org)
        other = self.w.keypair_runner(org)
        fingerprint = self.w.one("SELECT fingerprint FROM runners WHERE id = ?", runner)[0]
        other_fp = self.w.one("SELECT fingerprint FROM runners WHERE id = ?", other)[0]

        def challenge(fp, secret):
            self.w.insert("runner_challenges", {
                "id": self.w.uid("chl"), "runner_id": runner, "organization_id": org, "fingerprint": fp,
                "challenge_hash": sha(secret), "issued_at": NOW, "expires_at": NOW + 60_000})

        challenge(fingerprint, "challenge-1")
        self.assertRefused(challenge, other_fp, "challenge-2", message="FOREIGN KEY constraint failed")
        consume = "UPDATE runner_challenges SET consumed_at = ? WHERE challenge_hash = ?"
        self.execute(consume, NOW + 1, sha("challenge-1"))
        self.assertRefused(self.execute, consume, NOW + 2, sha("challenge-1"), message="challenge_already_consumed")


# =============================================================================================
# Secrets are stored only as SHA-256
# =============================================================================================


class SecretTests(SchemaTest):
    def test_secret_columns_accept_only_lowercase_sha256_hex(self):
        org = self.w.org()
        raw = "erk_live_0123456789abcdef0123456789abcdef0123456789abcdef01234"
        cases = [
            ("api key", lambda h: self.w.api_key(org, key_hash=h)),
            ("bootstrap token", lambda h: self.w.runner(org, bootstrap_token_hash=h)),
            ("runner credential", lambda h: self.w.insert("runner_credentials", {
                "id": self.w.uid("cred"), "runner_id": self.w.runner(org), "organization_id": org,
                "credential_generation": 1, "token_hash": h, "issued_via": "bootstrap",
                "scopes": "[]", "issued_at": NOW, "expires_at": NOW + 1000})),
        ]
        for name, store in cases:
            with self.subTest(name):
                store(sha(name))
                self.assertRefused(store, raw, message="CHECK constraint failed")
                self.assertRefused(store, sha(name + "2").upper(), message="CHECK constraint failed")

    def test_api_key_and_credential_hashes_are_unique(self):
        org = self.w.org()
        self.w.api_key(org, key_hash=sha("k"))
        self.assertRefused(self.w.api_key, self.w.org(), key_hash=sha("k"), message="UNIQUE constraint failed")
        runner = self.w.runner(org)

        def credential():
            self.w.insert("runner_credentials", {
                "id": self.w.uid("cred"), "runner_id": runner, "organization_id": org, "credential_generation": 1,
                "token_hash": sha("t"), "issued_via": "bootstrap", "scopes": "[]",
                "issued_at": NOW, "expires_at": NOW + 1000})

        credential()
        self.assertRefused(credential, message="UNIQUE constraint failed: runner_credentials.token_hash")


# =============================================================================================
# Release registry and job subjects
# =============================================================================================


class ReleaseTests(SchemaTest):
    def test_release_version_content_is_immutable(self):
        org = self.w.org()
        version = self.w.release(org)["version_id"]
        for column, value in (("content", '{"entrypoint":"evil:run"}'), ("content_hash", sha("evil")),
                              ("artifact_id", "art_other"), ("created_at", NOW + 1)):
            with self.subTest(column=column):
                self.assertRefused(self.execute, f"UPDATE release_versions SET {column} = ? WHERE id = ?",
                                   value, version, message="release_version_is_immutable")

    def test_release_version_ids_are_increasing_integers(self):
        org = self.w.org()
        first = self.w.release(org)["version_id"]
        second = self.w.release(org)["version_id"]
        self.assertIsInstance(first, int)
        self.assertGreater(second, first)

    def test_promotion_is_once_per_version_and_environment(self):
        org = self.w.org()
        version = self.w.release(org, environments=("dev",))["version_id"]
        self.w.promote(org, version, "prod")
        self.assertRefused(self.w.promote, org, version, "dev", message="UNIQUE constraint failed")

    def test_job_binds_only_a_version_promoted_to_its_environment(self):
        org = self.w.org()
        release = self.w.release(org, environments=("dev",))
        self.w.job(org, release=release, subject_environment="dev")
        self.assertRefused(self.w.job, org, release=release, subject_environment="prod",
                           message="FOREIGN KEY constraint failed")

    def test_job_subject_is_the_version_artifact_kind_and_content_hash(self):
        org = self.w.org()
        release = self.w.release(org)
        other = self.w.release(org, kind="scorer")
        for name, overrides in (
            ("content hash of another version", {"subject_content_hash": other["content_hash"]}),
            ("artifact of another version", {"subject_artifact_id": other["artifact_id"], "subject_kind": "scorer"}),
            ("kind other than the artifact's", {"subject_kind": "tool"}),
        ):
            with self.subTest(name):
                self.assertRefused(self.w.job, org, release=release, message="FOREIGN KEY constraint failed",
                                   **overrides)

    def test_job_cannot_bind_another_organizations_version(self):
        mine, theirs = self.w.org(), self.w.org()
        release = self.w.release(theirs)
        self.assertRefused(self.w.job, mine, release=release, message="FOREIGN KEY constraint failed")

    def test_executable_target_key_is_unique_per_organization(self):
        a, b = self.w.org(), self.w.org()

        def target(org, key, **kw):
            row = {"id": self.w.uid("tgt"), "organization_id": org, "target_key": key, "repository": "repo",
                   "entrypoint": "main:run", "requirements": "{}", "created_at": NOW, "updated_at": NOW}
            row.update(kw)
            self.w.insert("executable_targets", row)

        target(a, "grader")
        target(b, "grader")
        self.assertRefused(target, a, "grader", message="UNIQUE constraint failed")
        release = self.w.release(a)
        target(a, "bound", version_id=release["version_id"], content_hash=release["content_hash"])
        self.assertRefused(target, a, "half-bound", version_id=release["version_id"], message="CHECK constraint failed")
        self.assertRefused(target, b, "foreign", version_id=release["version_id"],
                           content_hash=release["content_hash"], message="FOREIGN KEY constraint failed")


# =============================================================================================
# Jobs
# =============================================================================================


class JobTests(SchemaTest):
    def test_idempotency_key_is_unique_per_organization_but_reusable_across_organizations(self):
        a, b = self.w.org(), self.w.org()
        self.w.job(a, idempotency_key="nightly-42")
        self.w.job(b, idempotency_key="nightly-42")
        self.assertRefused(self.w.job, a, idempotency_key="nightly-42", message="UNIQUE constraint failed")

    def test_job_is_born_queued_at_attempt_zero(self):
        org = self.w.org()
        self.assertRefused(self.w.job, org, state="running", message="job_must_start_queued")
        self.assertRefused(self.w.job, org, dispatch_attempt=1, message="job_must_start_queued")

    def test_job_intent_is_immutable(self):
        org = self.w.org()
        job = self.w.job(org)
        for column, value in (("input", '{"question":"3+3"}'), ("input_hash", sha("x")),
                              ("requirements", "{}"), ("runtime", "nodejs20"), ("tags", '["gpu"]'),
                              ("idempotency_key", "other"), ("intent_hash", sha("y"))):
            with self.subTest(column=column):
                self.assertRefused(self.execute, f"UPDATE jobs SET {column} = ? WHERE id = ?", value, job,
                                   message="job_intent_is_immutable")

    def test_finished_job_never_changes_state(self):
        org = self.w.org()
        job = self.w.job(org)
        self.execute("UPDATE jobs SET state = 'cancelled', cancel_reason = 'x', finished_at = ? WHERE id = ?", NOW, job)
        self.assertRefused(self.execute, "UPDATE jobs SET state = 'queued', finished_at = NULL WHERE id = ?", job,
                           message="job_is_finished")

    def test_job_is_never_requeued_after_its_third_attempt(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        for attempt in (1, 2, 3):
            self.w.grant(job, runner)
            self.w.reap(job, runner)
        self.assertEqual(self.w.job_row(job)[:2], ("lost", 3))
        self.assertRefused(self.execute, "UPDATE jobs SET state = 'queued' WHERE id = ?", job,
                           message="CHECK constraint failed")
        self.assertRefused(self.w.grant, job, runner)  # no fourth claim either

    def test_a_free_hand_back_does_not_use_one_of_the_three_attempts(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        self.w.grant(job, runner)
        self.w.hand_back(job, runner)
        for _ in range(3):  # three counted attempts after the free one: 2, 3, 4
            self.w.grant(job, runner)
            self.w.reap(job, runner)
        self.assertEqual(self.w.job_row(job)[:2], ("lost", 4))
        self.assertRefused(self.execute, "UPDATE jobs SET state = 'queued' WHERE id = ?", job,
                           message="CHECK constraint failed")
        self.assertRefused(self.w.grant, job, runner)

    def test_a_job_gets_five_free_hand_backs_and_eight_dispatches_at_most(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        for _ in range(5):
            self.w.grant(job, runner)
            self.w.hand_back(job, runner)
        self.assertEqual(self.one_job(job), ("queued", 5, 5))
        self.w.grant(job, runner)
        self.assertRefused(self.w.hand_back, job, runner, message="CHECK constraint failed")  # a sixth free one
        self.w.hand_back(job, runner, free=False)  # counted: attempt 6 is the first of three
        self.w.grant(job, runner)
        self.w.hand_back(job, runner, free=False)
        self.assertEqual(self.one_job(job), ("queued", 7, 5))
        self.w.grant(job, runner)
        self.assertRefused(self.w.hand_back, job, runner, free=False, message="CHECK constraint failed")
        self.w.reap(job, runner)
        self.assertEqual(self.one_job(job), ("lost", 8, 5))
        self.assertRefused(self.w.grant, job, runner)
        self.assertRefused(self.execute, "UPDATE jobs SET dispatch_attempt = 9 WHERE id = ?", job,
                           message="CHECK constraint failed")

    def test_released_attempts_never_go_back_and_a_job_is_born_with_none(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        self.w.grant(job, runner)
        self.w.hand_back(job, runner)
        self.assertRefused(self.execute, "UPDATE jobs SET released_attempts = 0 WHERE id = ?", job,
                           message="job_dispatch_attempt_only_grows")
        self.assertRefused(self.execute, "UPDATE jobs SET released_attempts = 2 WHERE id = ?", job,
                           message="CHECK constraint failed")  # more than were dispatched
        self.assertRefused(self.w.job, org, released_attempts=1, message="job_must_start_queued")

    def test_the_bounds_are_the_protocol_crates(self):
        text = pathlib.Path(ROOT, "crates", "protocol", "src", "recovery.rs").read_text()
        consts = dict(re.findall(r"pub const (MAX_\w+): u32 = (\d+);", text))
        self.assertEqual(consts, {"MAX_DISPATCH_ATTEMPTS": "3", "MAX_FREE_HAND_BACKS": "5"})
        self.assertIn("MAX_DISPATCHES: u32 = MAX_DISPATCH_ATTEMPTS + MAX_FREE_HAND_BACKS", text)
        org = self.w.org()
        job = self.w.job(org)
        self.assertRefused(self.execute, "UPDATE jobs SET dispatch_attempt = 3 + 5 + 1 WHERE id = ?", job,
                           message="CHECK constraint failed")

    def one_job(self, job):
        return tuple(self.w.one("SELECT state, dispatch_attempt, released_attempts FROM jobs WHERE id = ?", job))

    def test_dispatch_attempt_never_goes_back(self):
        org, runner, job, _ = self.claimed_job()
        self.w.reap(job, runner)
        self.assertRefused(self.execute, "UPDATE jobs SET dispatch_attempt = 0 WHERE id = ?", job,
                           message="job_dispatch_attempt_only_grows")

    def test_job_holds_a_claim_and_lease_exactly_while_claimed_running_or_cancelling(self):
        org, runner, job, claim = self.claimed_job()
        queued = self.w.job(org)
        self.assertRefused(self.execute, "UPDATE jobs SET lease_expires_at = ? WHERE id = ?", NOW, queued,
                           message="CHECK constraint failed")
        self.assertRefused(self.execute, "UPDATE jobs SET lease_expires_at = NULL WHERE id = ?", job,
                           message="CHECK constraint failed")
        self.assertRefused(
            self.execute, "UPDATE jobs SET state = 'queued', lease_expires_at = NULL WHERE id = ?", job,
            message="CHECK constraint failed")  # still pointing at its claim
        self.assertRefused(self.execute, "UPDATE jobs SET state = 'cancel_requested' WHERE id = ?", job,
                           message="CHECK constraint failed")  # without a reason
        self.execute("UPDATE jobs SET state = 'cancel_requested', cancel_reason = 'user' WHERE id = ?", job)


# =============================================================================================
# Claims
# =============================================================================================


class ClaimTests(SchemaTest):
    def test_claim_for_queued_job_is_granted(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        claim = self.w.grant(job, runner)
        self.assertEqual(self.w.job_row(job)[:3], ("claimed", 1, claim))
        self.assertEqual(self.w.active_claims(runner), 1)
        self.w.start(job)
        self.assertEqual(self.w.job_row(job)[0], "running")

    def test_claim_refused_for_a_job_that_is_not_queued(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=10)

        def claimed():
            return self.claimed_job(org=org, runner=runner)[2]

        def running():
            job = claimed()
            self.w.start(job)
            return job

        def cancelling():
            job = claimed()
            self.execute("UPDATE jobs SET state = 'cancel_requested', cancel_reason = 'x' WHERE id = ?", job)
            return job

        def cancelled():
            job = self.w.job(org)
            self.execute("UPDATE jobs SET state = 'cancelled', finished_at = ? WHERE id = ?", NOW, job)
            return job

        def succeeded():
            _, _, job, claim = self.claimed_job(org=org, runner=runner)
            self.w.complete(job, claim, runner, 1)
            return job

        def lost():
            job = claimed()
            self.execute("UPDATE job_claims SET state = 'lost', ended_at = ? WHERE job_id = ?", NOW, job)
            self.execute("UPDATE jobs SET state = 'lost', active_claim_id = NULL, lease_expires_at = NULL"
                         " WHERE id = ?", job)
            return job

        for make in (claimed, running, cancelling, cancelled, succeeded, lost):
            with self.subTest(state=make.__name__):
                job = make()
                before = self.w.job_row(job)
                capacity = self.w.active_claims(runner)
                attempt = before[1] + 1 if before[1] < 3 else 3
                self.assertRefused(self.w.grant, job, runner, attempt=attempt,
                                   message="claim_requires_queued_job")
                self.assertEqual(self.w.job_row(job), before)
                self.assertEqual(self.w.active_claims(runner), capacity)

    def test_claim_refused_unless_it_is_the_next_attempt(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        for attempt in (0, 2, 3):
            with self.subTest(attempt=attempt):
                self.assertRefused(self.w.grant, job, runner, attempt=attempt, message="claim_requires_queued_job")
        self.assertEqual(self.w.job_row(job)[:2], ("queued", 0))

    def test_claim_refused_for_a_runner_that_is_not_active(self):
        org = self.w.org()
        job = self.w.job(org)
        pending = self.w.keypair_runner(org)
        draining = self.w.runner(org, state="draining")
        lost = self.w.runner(org, state="lost")
        revoked = self.w.runner(org, state="revoked", revoked_at=NOW)
        for runner in (pending, draining, lost, revoked):
            with self.subTest(runner=runner):
                self.assertRefused(self.w.grant, job, runner, message="claim_requires_active_runner")
        self.assertEqual(self.w.job_row(job)[:2], ("queued", 0))

    def test_one_active_claim_per_job(self):
        # A faulty requeue that forgets to end the claim: the job is queued again, so the next
        # grant passes the queued-job trigger, and only the partial unique index stops a second
        # active claim.
        org, runner, job, first = self.claimed_job()
        self.execute("UPDATE jobs SET state = 'queued', active_claim_id = NULL, lease_expires_at = NULL"
                     " WHERE id = ?", job)
        self.assertRefused(self.w.grant, job, runner, message="UNIQUE constraint failed: job_claims.job_id")
        self.assertEqual(self.w.job_row(job)[:3], ("queued", 1, None))
        self.assertEqual(self.w.active_claims(runner), 1)

    def test_one_claim_per_job_and_attempt(self):
        # Two claim rows for attempt 1 written before the job moves, the first already ended so
        # that the one-active-claim index is not what stops the second: UNIQUE (job_id,
        # dispatch_attempt) is.
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        first_id, first = self.w.grant_statements(job, runner, attempt=1)
        _, second = self.w.grant_statements(job, runner, attempt=1)
        end_first = ("UPDATE job_claims SET state = 'lost', ended_at = ? WHERE id = ?", (NOW, first_id))
        self.assertRefused(batch, self.conn, [first[0], end_first, second[0]],
                           message="UNIQUE constraint failed: job_claims.job_id, job_claims.dispatch_attempt")
        self.assertEqual(self.w.one("SELECT count(*) FROM job_claims")[0], 0)
        # And after a loss the old attempt's number cannot be granted again.
        self.w.grant(job, runner)
        self.w.reap(job, runner)
        self.assertRefused(self.w.grant, job, runner, attempt=1)
        self.w.grant(job, runner, attempt=2)

    def test_claim_nonce_is_never_reused(self):
        org = self.w.org()
        runner = self.w.runner(org)
        a, b = self.w.job(org), self.w.job(org)
        self.w.grant(a, runner, nonce="n" * 32)
        self.assertRefused(self.w.grant, b, runner, nonce="n" * 32, message="UNIQUE constraint failed: job_claims.nonce")
        self.assertEqual(self.w.job_row(b)[:2], ("queued", 0))

    def test_claim_cannot_join_a_job_and_a_runner_of_different_organizations(self):
        mine, theirs = self.w.org(), self.w.org()
        job = self.w.job(mine)
        foreign_runner = self.w.runner(theirs)
        _, grant = self.w.grant_statements(job, foreign_runner, org=mine)
        self.assertRefused(self.conn.execute, *grant[0], message="FOREIGN KEY constraint failed")  # the claim row alone
        self.assertRefused(self.w.grant, job, foreign_runner, org=theirs, message="claim_requires_queued_job")
        self.assertEqual(self.w.job_row(job)[:2], ("queued", 0))

    def test_ended_claim_is_never_reactivated_or_reassigned(self):
        org, runner, job, claim = self.claimed_job()
        other_runner = self.w.runner(org)
        self.execute("UPDATE job_claims SET runner_id = ? WHERE id = ? AND 0", other_runner, claim)  # no row: fine
        self.assertRefused(self.execute, "UPDATE job_claims SET runner_id = ? WHERE id = ?", other_runner, claim,
                           message="claim_is_over")
        self.w.reap(job, runner)
        self.assertRefused(self.execute, "UPDATE job_claims SET state = 'active', ended_at = NULL WHERE id = ?",
                           claim, message="claim_is_over")

    def test_job_points_only_at_its_own_active_claim_at_its_attempt(self):
        org, runner, job, claim = self.claimed_job()
        _, _, other_job, other_claim = self.claimed_job(org=org, runner=runner)
        self.assertRefused(self.execute, "UPDATE jobs SET active_claim_id = ? WHERE id = ?", other_claim, job,
                           message="job_claim_mismatch")
        self.w.reap(job, runner)  # claim lost, job queued at attempt 1
        self.assertRefused(
            self.execute,
            "UPDATE jobs SET state = 'claimed', active_claim_id = ?, lease_expires_at = ? WHERE id = ?",
            claim, NOW, job, message="job_claim_mismatch")

    def test_requeued_job_is_claimed_again_at_the_next_attempt(self):
        org, runner, job, first = self.claimed_job()
        self.w.reap(job, runner)
        self.assertEqual(self.w.job_row(job)[:3], ("queued", 1, None))
        second = self.w.grant(job, runner)
        self.assertEqual(self.w.job_row(job)[:3], ("claimed", 2, second))
        states = self.conn.execute("SELECT dispatch_attempt, state FROM job_claims WHERE job_id = ?"
                                   " ORDER BY dispatch_attempt", (job,)).fetchall()
        self.assertEqual(states, [(1, "lost"), (2, "active")])


# =============================================================================================
# Batches are all or nothing
# =============================================================================================


class BatchTests(SchemaTest):
    def test_failed_claim_insert_undoes_a_successful_job_update_in_the_same_batch(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        self.w.grant(self.w.job(org), runner, nonce="taken" * 4)
        before = self.w.job_row(job)
        _, grant = self.w.grant_statements(job, runner, nonce="taken" * 4)
        touch = ("UPDATE jobs SET updated_at = ? WHERE id = ? AND state = 'queued'", (NOW + 5, job))
        self.conn.execute("BEGIN")
        self.assertEqual(self.conn.execute(*touch).rowcount, 1)  # the job UPDATE succeeds…
        self.assertRefused(self.conn.execute, *grant[0])  # …and the claim INSERT fails,
        self.conn.execute("ROLLBACK")  # which D1 turns into a rollback of the batch
        self.assertEqual(self.w.job_row(job), before)
        # The same through the batch helper, in one call.
        self.assertRefused(batch, self.conn, [touch] + grant)
        self.assertEqual(self.w.job_row(job), before)

    def test_grant_in_job_first_order_is_refused_and_leaves_the_job_unchanged(self):
        # The contract puts the claim INSERT first; a batch that moves the job first is refused
        # (the job would point at a claim that does not exist yet) and nothing of it remains.
        org = self.w.org()
        runner = self.w.runner(org)
        job = self.w.job(org)
        before = self.w.job_row(job)
        _, grant = self.w.grant_statements(job, runner)
        claim_insert, job_update, runner_update, event = grant
        self.assertRefused(batch, self.conn, [job_update, claim_insert, runner_update, event],
                           message="job_claim_mismatch")
        self.assertEqual(self.w.job_row(job), before)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_claims")[0], 0)

    def test_grant_at_capacity_rolls_back_the_claim_and_the_job(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=1)
        self.w.grant(self.w.job(org), runner)
        job = self.w.job(org)
        before = self.w.job_row(job)
        events_before = self.w.one("SELECT count(*) FROM job_events")[0]
        # Claim INSERT and job UPDATE succeed; the runner's `active_claims + 1` meets the
        # named capacity guard.
        self.assertRefused(self.w.grant, job, runner, message="runner_at_capacity")
        self.assertEqual(self.w.job_row(job), before)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_claims WHERE job_id = ?", job)[0], 0)
        self.assertEqual(self.w.active_claims(runner), 1)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_events")[0], events_before)

    def test_guarded_update_that_matches_nothing_does_not_fail_a_batch(self):
        # Why the guards above are constraints: a WHERE guard alone lets the batch commit.
        org, runner, job, _ = self.claimed_job()
        batch(self.conn, [("UPDATE jobs SET updated_at = ? WHERE id = ? AND state = 'queued'", (NOW + 9, job))])
        self.assertEqual(self.w.job_row(job)[4], NOW)


# =============================================================================================
# Stream custody
# =============================================================================================


class StreamTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org, self.runner, self.job, self.claim = self.claimed_job()

    def chunk(self, sequence, previous, **kw):
        return self.w.chunk(self.job, self.claim, 1, sequence, previous, **kw)

    def test_a_gap_free_chain_is_stored(self):
        head = self.w.stream(self.job, self.claim, 1, 3)
        rows = self.conn.execute("SELECT sequence, checksum FROM stream_chunks WHERE job_id = ?"
                                 " ORDER BY sequence", (self.job,)).fetchall()
        self.assertEqual([r[0] for r in rows], [0, 1, 2])
        self.assertEqual(rows[-1][1], head)

    def test_first_chunk_has_no_previous_checksum_and_later_ones_do(self):
        self.assertRefused(self.w.append, self.chunk(0, sha("x")), message="CHECK constraint failed")
        c0 = self.w.append(self.chunk(0, None))
        self.assertRefused(self.w.append, self.chunk(1, None))  # the chain trigger fires before the CHECK
        self.w.append(self.chunk(1, c0))

    def test_chunk_after_a_gap_is_refused(self):
        c0 = self.w.append(self.chunk(0, None))
        self.assertRefused(self.w.append, self.chunk(2, c0), message="stream_chunk_breaks_chain")
        self.assertRefused(self.w.append, self.chunk(5, sha("anything")), message="stream_chunk_breaks_chain")

    def test_chunk_with_wrong_previous_checksum_is_refused(self):
        c0 = self.w.append(self.chunk(0, None))
        c1 = self.w.append(self.chunk(1, c0))
        self.assertRefused(self.w.append, self.chunk(2, c0), message="stream_chunk_breaks_chain")
        self.w.append(self.chunk(2, c1))

    def test_duplicate_sequence_is_refused(self):
        c0 = self.w.append(self.chunk(0, None))
        self.w.append(self.chunk(1, c0))
        self.assertRefused(self.w.append, self.chunk(1, c0, payload={"message": "forked"}),
                           message="UNIQUE constraint failed")
        self.assertRefused(self.w.append, self.chunk(0, None, payload={"message": "restart"}),
                           message="UNIQUE constraint failed")

    def test_duplicate_checksum_is_refused(self):
        c0 = self.w.append(self.chunk(0, None))
        c1 = self.w.append(self.chunk(1, c0))
        self.assertRefused(self.w.append, self.chunk(2, c1, checksum=c0),
                           message="UNIQUE constraint failed: stream_chunks.job_id, stream_chunks.checksum")

    def test_chunk_must_name_the_claim_of_its_job_and_attempt(self):
        _, _, other_job, other_claim = self.claimed_job(org=self.org, runner=self.runner)
        self.assertRefused(self.w.append, self.w.chunk(self.job, other_claim, 1, 0, None),
                           message="FOREIGN KEY constraint failed")
        self.assertRefused(self.w.append, self.w.chunk(self.job, self.claim, 2, 0, None),
                           message="FOREIGN KEY constraint failed")

    def test_chunk_refused_once_the_claim_has_ended(self):
        c0 = self.w.append(self.chunk(0, None))
        self.w.reap(self.job, self.runner)
        self.assertRefused(self.w.append, self.chunk(1, c0), message="stream_claim_not_active")

    def test_next_attempt_starts_its_own_chain_at_zero(self):
        self.w.stream(self.job, self.claim, 1, 2)
        self.w.reap(self.job, self.runner)
        second = self.w.grant(self.job, self.runner)
        self.assertRefused(self.w.append, self.w.chunk(self.job, second, 2, 1, sha("x")),
                           message="stream_chunk_breaks_chain")
        c0 = self.w.append(self.w.chunk(self.job, second, 2, 0, None))
        self.w.append(self.w.chunk(self.job, second, 2, 1, c0))

    def test_stored_chunks_are_immutable(self):
        self.w.append(self.chunk(0, None))
        self.assertRefused(self.execute, "UPDATE stream_chunks SET payload = '{}' WHERE job_id = ?", self.job,
                           message="stream_chunks_are_immutable")


# =============================================================================================
# Completions
# =============================================================================================


class CompletionTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org, self.runner, self.job, self.claim = self.claimed_job()

    def store(self, **kwargs):
        row = self.w.completion_row(self.job, self.claim, self.runner, 1, **kwargs)
        self.w.insert("job_completions", row)
        return row

    def test_accepted_completion_finalizes_job_releases_claim_and_capacity(self):
        head = self.w.stream(self.job, self.claim, 1, 2)
        self.w.complete(self.job, self.claim, self.runner, 1, final_stream_checksum=head)
        self.assertEqual(self.w.job_row(self.job)[:4], ("succeeded", 1, None, None))
        self.assertEqual(self.w.one("SELECT state FROM job_claims WHERE id = ?", self.claim)[0], "released")
        self.assertEqual(self.w.one("SELECT active_claims, completed_jobs FROM runners WHERE id = ?",
                                    self.runner), (0, 1))

    def test_one_accepted_completion_per_job_while_other_decisions_repeat(self):
        self.w.complete(self.job, self.claim, self.runner, 1)
        for decision in ("duplicate", "duplicate", "conflict", "conflict"):
            self.store(decision=decision)
        self.assertRefused(self.store, decision="accepted")
        # Even bypassing the trigger's preconditions, the partial unique index holds.
        index = self.w.one("SELECT sql FROM sqlite_master WHERE name = 'job_completions_one_accepted_per_job'")[0]
        self.assertIn("UNIQUE", index)
        self.assertIn("WHERE decision = 'accepted'", index)
        counts = dict(self.conn.execute("SELECT decision, count(*) FROM job_completions WHERE job_id = ?"
                                        " GROUP BY decision", (self.job,)).fetchall())
        self.assertEqual(counts, {"accepted": 1, "duplicate": 2, "conflict": 2})

    def test_second_accepted_completion_breaks_the_unique_index(self):
        # Two accepted rows inserted back to back while the job still holds the claim: the
        # trigger passes both, the partial unique index refuses the second.
        first = self.w.completion_row(self.job, self.claim, self.runner, 1)
        second = self.w.completion_row(self.job, self.claim, self.runner, 1, status="failed")
        stmts = self.w.completion_statements(first)[:1] + self.w.completion_statements(second)[:1]
        self.assertRefused(batch, self.conn, stmts,
                           message="UNIQUE constraint failed: job_completions.job_id")

    def test_stale_attempt_completion_is_recorded_not_applied(self):
        self.w.reap(self.job, self.runner)
        second = self.w.grant(self.job, self.runner)
        self.assertRefused(self.w.complete, self.job, self.claim, self.runner, 1,
                           message="completion_not_from_active_claim")
        self.store(decision="stale")
        self.store(decision="stale")
        self.assertEqual(self.w.job_row(self.job)[:3], ("claimed", 2, second))
        self.w.complete(self.job, second, self.runner, 2)
        self.assertEqual(self.w.job_row(self.job)[0], "succeeded")

    def test_accepted_completion_must_close_the_stream_head(self):
        c0 = self.w.append(self.w.chunk(self.job, self.claim, 1, 0, None))
        c1 = self.w.append(self.w.chunk(self.job, self.claim, 1, 1, c0))
        for name, final in (("not the head", c0), ("nothing streamed", None), ("unknown", sha("?"))):
            with self.subTest(name):
                self.assertRefused(self.w.complete, self.job, self.claim, self.runner, 1,
                                   final_stream_checksum=final, message="completion_does_not_close_stream")
                self.assertEqual(self.w.job_row(self.job)[0], "claimed")
        self.w.complete(self.job, self.claim, self.runner, 1, final_stream_checksum=c1)

    def test_accepted_completion_without_stream_has_no_final_checksum(self):
        self.w.complete(self.job, self.claim, self.runner, 1, final_stream_checksum=None)
        self.assertEqual(self.w.job_row(self.job)[0], "succeeded")

    def test_accepted_completion_must_carry_the_job_input_hash(self):
        self.assertRefused(self.w.complete, self.job, self.claim, self.runner, 1, input_hash=sha("other"),
                           message="completion_input_hash_mismatch")

    def test_completion_names_a_claim_of_that_job_attempt_and_runner(self):
        other_runner = self.w.runner(self.org)
        _, _, other_job, other_claim = self.claimed_job(org=self.org, runner=self.runner)
        for name, kwargs in (
            ("another job's claim", {"claim_id": other_claim}),
            ("another attempt", {"dispatch_attempt": 2}),
            ("another runner", {"runner_id": other_runner}),
        ):
            with self.subTest(name):
                self.assertRefused(self.store, decision="stale", message="FOREIGN KEY constraint failed", **kwargs)

    def test_completions_are_append_only(self):
        row = self.store(decision="conflict")
        self.assertRefused(self.execute, "UPDATE job_completions SET decision = 'accepted' WHERE id = ?", row["id"],
                           message="job_completions_are_append_only")
        self.assertRefused(self.execute, "DELETE FROM job_completions WHERE id = ?", row["id"],
                           message="job_completions_are_append_only")


# =============================================================================================
# Evidence custody
# =============================================================================================


class EvidenceTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.runner = self.w.runner(self.org, max_concurrent_jobs=5)
        self.run = self.w.evaluation_run(self.org)

    def test_evidence_row_is_attached_to_at_most_one_accepted_completion_across_jobs(self):
        tr = self.w.test_result(self.org, self.run)
        cost = self.w.cost_record(self.org, self.run)
        own = self.w.test_result(self.org, self.run)
        _, _, job_a, claim_a = self.claimed_job(org=self.org, runner=self.runner)
        _, _, job_b, claim_b = self.claimed_job(org=self.org, runner=self.runner)
        self.w.complete(job_a, claim_a, self.runner, 1, evaluation_run_id=self.run,
                        evidence=[("test_result", tr), ("cost_record", cost)])
        before_b = self.w.job_row(job_b)
        capacity = self.w.active_claims(self.runner)
        # Job B names A's run (the service attaches the run first) with a row of it A did not
        # name: the whole batch rolls back, including B's finalization, claim release and
        # capacity decrement.
        self.assertRefused(self.w.complete, job_b, claim_b, self.runner, 1, evaluation_run_id=self.run,
                           evidence=[("test_result", own)],
                           message="UNIQUE constraint failed: completion_evidence.evidence_kind")
        self.assertEqual(self.w.job_row(job_b), before_b)
        self.assertEqual(self.w.one("SELECT state FROM job_claims WHERE id = ?", claim_b)[0], "active")
        self.assertEqual(self.w.active_claims(self.runner), capacity)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job_b)[0], 0)
        self.assertEqual(self.w.one("SELECT count(*) FROM completion_evidence WHERE job_id = ?", job_b)[0], 0)
        # With a run of its own and that run's row, B completes.
        run_b = self.w.evaluation_run(self.org)
        own_b = self.w.test_result(self.org, run_b)
        self.w.complete(job_b, claim_b, self.runner, 1, evaluation_run_id=run_b,
                        evidence=[("test_result", own_b)])
        owners = self.conn.execute("SELECT evidence_id, job_id FROM completion_evidence ORDER BY job_id").fetchall()
        self.assertEqual(sorted(owners), sorted([(self.run, job_a), (tr, job_a), (cost, job_a),
                                                 (run_b, job_b), (own_b, job_b)]))

    def test_a_run_in_custody_takes_no_new_rows(self):
        # Before any accepted completion names the run, rows are added freely.
        self.w.test_result(self.org, self.run)
        _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
        self.w.complete(job, claim, self.runner, 1, evaluation_run_id=self.run)
        for kind, add in [
            ("test result", lambda: self.w.test_result(self.org, self.run)),
            ("cost record", lambda: self.w.cost_record(self.org, self.run)),
            ("model call", lambda: self.w.model_call(self.org, self.run)),
            ("trace", lambda: self.w.trace(self.org, self.run)),
        ]:
            with self.subTest(kind=kind):
                self.assertRefused(add, message="evidence_run_in_custody")
        # Another run of the same organization is unaffected.
        self.w.test_result(self.org, self.w.evaluation_run(self.org))

    def test_a_stale_completion_does_not_take_custody(self):
        _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
        self.w.insert("job_completions", self.w.completion_row(
            job, claim, self.runner, 1, decision="stale", evaluation_run_id=self.run))
        self.w.test_result(self.org, self.run)

    def test_every_evidence_kind_is_in_custody_once(self):
        items = [
            ("evaluation_run", self.run),
            ("test_result", self.w.test_result(self.org, self.run)),
            ("cost_record", self.w.cost_record(self.org, self.run)),
            ("model_call", self.w.model_call(self.org, self.run)),
            ("trace", self.w.trace(self.org, self.run)),
        ]
        _, _, job_a, claim_a = self.claimed_job(org=self.org, runner=self.runner)
        self.w.complete(job_a, claim_a, self.runner, 1, evaluation_run_id=self.run, evidence=items)
        for item in items:
            with self.subTest(kind=item[0]):
                _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
                self.assertRefused(self.w.complete, job, claim, self.runner, 1, evaluation_run_id=self.run,
                                   evidence=[item], message="UNIQUE constraint failed")
                self.assertEqual(self.w.job_row(job)[0], "claimed")

    def test_evidence_must_exist_in_the_completion_run_and_organization(self):
        other_run = self.w.evaluation_run(self.org)
        other_org = self.w.org()
        foreign_run = self.w.evaluation_run(other_org)
        cases = [
            ("missing row", ("test_result", "tr_missing")),
            ("row of another run", ("test_result", self.w.test_result(self.org, other_run))),
            ("another run itself", ("evaluation_run", other_run)),
            ("row of another organization", ("model_call", self.w.model_call(other_org, foreign_run))),
            ("id of the wrong kind", ("trace", self.w.test_result(self.org, self.run))),
        ]
        for name, item in cases:
            with self.subTest(name):
                _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
                self.assertRefused(self.w.complete, job, claim, self.runner, 1, evaluation_run_id=self.run,
                                   evidence=[item], message="evidence_not_in_completion_run")
                self.assertEqual(self.w.job_row(job)[0], "claimed")
                self.execute("UPDATE jobs SET state = 'cancel_requested', cancel_reason = 'test' WHERE id = ?", job)

    def test_only_an_accepted_completion_takes_custody(self):
        tr = self.w.test_result(self.org, self.run)
        _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
        row = self.w.completion_row(job, claim, self.runner, 1, decision="conflict", evaluation_run_id=self.run)
        self.assertRefused(batch, self.conn, self.w.completion_statements(row, [("test_result", tr)]),
                           message="evidence_needs_accepted_completion")
        self.assertEqual(self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job)[0], 0)

    def test_evidence_custody_is_permanent(self):
        tr = self.w.test_result(self.org, self.run)
        _, _, job, claim = self.claimed_job(org=self.org, runner=self.runner)
        self.w.complete(job, claim, self.runner, 1, evaluation_run_id=self.run, evidence=[("test_result", tr)])
        self.assertRefused(self.execute, "DELETE FROM completion_evidence WHERE evidence_id = ?", tr,
                           message="evidence_custody_is_permanent")
        self.assertRefused(self.execute, "UPDATE completion_evidence SET job_id = 'x' WHERE evidence_id = ?", tr,
                           message="evidence_custody_is_permanent")


# =============================================================================================
# Organization boundaries and time windows
# =============================================================================================


class BoundaryTests(SchemaTest):
    def test_rows_never_reference_another_organizations_rows(self):
        # Composite foreign keys (child_id, organization_id): a row of one organization cannot
        # point at a row of another, even with a valid id.
        w = self.w
        mine, theirs = w.org(), w.org()
        their_release = w.release(theirs, environments=())
        their_run = w.evaluation_run(theirs)
        their_runner = w.runner(theirs)
        _, my_runner, my_job, my_claim = self.claimed_job(org=mine)
        my_run = w.evaluation_run(mine)
        _, _, done_job, done_claim = self.claimed_job(org=mine, runner=my_runner)
        my_result = w.test_result(mine, my_run)
        done = w.complete(done_job, done_claim, my_runner, 1, evaluation_run_id=my_run)
        cases = [
            ("version of their artifact", lambda: w.insert("release_versions", {
                "artifact_id": their_release["artifact_id"], "organization_id": mine, "content": "{}",
                "content_hash": H({}), "created_at": NOW})),
            ("promotion of their version", lambda: w.promote(mine, their_release["version_id"], "dev")),
            ("credential for their runner", lambda: w.insert("runner_credentials", {
                "id": w.uid("cred"), "runner_id": their_runner, "organization_id": mine,
                "credential_generation": 1, "issued_via": "bootstrap", "scopes": "[]",
                "issued_at": NOW, "expires_at": NOW + 1000})),
            ("chunk filed under their organization", lambda: w.append(
                w.chunk(my_job, my_claim, 1, 0, None, organization_id=theirs))),
            ("completion filed under their organization", lambda: w.insert("job_completions", w.completion_row(
                my_job, my_claim, my_runner, 1, decision="stale", organization_id=theirs))),
            ("test result in their run", lambda: w.test_result(mine, their_run)),
            ("cost record in their run", lambda: w.cost_record(mine, their_run)),
            ("model call in their run", lambda: w.model_call(mine, their_run)),
            ("trace in their run", lambda: w.trace(mine, their_run)),
        ]
        for name, write in cases:
            with self.subTest(name):
                self.assertRefused(write, message="FOREIGN KEY constraint failed")
        # Custody names its completion's own job (a trigger since migration 0010: the custody
        # row outlives the completion row, so no foreign key can name it).
        self.assertRefused(lambda: w.insert("completion_evidence", {
            "evidence_kind": "test_result", "evidence_id": my_result, "completion_id": done,
            "job_id": my_job, "organization_id": mine, "attached_at": NOW}),
            message="evidence_needs_accepted_completion")

    def test_time_windows_and_end_times_are_recorded_in_order(self):
        w = self.w
        org, runner, job, claim = self.claimed_job()
        keypair = w.keypair_runner(org)
        fingerprint = w.one("SELECT fingerprint FROM runners WHERE id = ?", keypair)[0]

        def challenge(**kw):
            row = {"id": w.uid("chl"), "runner_id": keypair, "organization_id": org, "fingerprint": fingerprint,
                   "challenge_hash": sha(w.uid("c")), "issued_at": NOW, "expires_at": NOW + 60_000}
            row.update(kw)
            w.insert("runner_challenges", row)

        queued = w.job(org)
        cases = [
            ("claim envelope expiring when issued", lambda: self.execute(
                "UPDATE job_claims SET expires_at = issued_at WHERE id = ?", claim)),
            ("challenge expiring when issued", lambda: challenge(expires_at=NOW)),
            ("challenge consumed before issued", lambda: challenge(consumed_at=NOW - 1)),
            ("claim ended without an end time", lambda: self.execute(
                "UPDATE job_claims SET state = 'lost' WHERE id = ?", claim)),
            ("active claim with an end time", lambda: self.execute(
                "UPDATE job_claims SET ended_at = ? WHERE id = ?", NOW, claim)),
            ("job finished without a finish time", lambda: self.execute(
                "UPDATE jobs SET state = 'cancelled' WHERE id = ?", queued)),
        ]
        for name, write in cases:
            with self.subTest(name):
                self.assertRefused(write, message="CHECK constraint failed")

    def test_artifact_name_is_unique_per_organization_and_kind(self):
        a, b = self.w.org(), self.w.org()

        def artifact(org, kind, name):
            self.w.insert("release_artifacts", {"id": self.w.uid("art"), "organization_id": org, "kind": kind,
                                                "name": name, "created_at": NOW})

        artifact(a, "agent", "triage")
        artifact(a, "scorer", "triage")
        artifact(b, "agent", "triage")
        self.assertRefused(artifact, a, "agent", "triage", message="UNIQUE constraint failed")


# =============================================================================================
# Audit trail
# =============================================================================================


class AuditTests(SchemaTest):
    def test_job_events_are_append_only(self):
        org, runner, job, _ = self.claimed_job()
        event = self.w.one("SELECT id FROM job_events WHERE job_id = ?", job)[0]
        self.assertRefused(self.execute, "UPDATE job_events SET reason = 'edited' WHERE id = ?", event,
                           message="job_events_are_append_only")
        self.assertRefused(self.execute, "DELETE FROM job_events WHERE id = ?", event,
                           message="job_events_are_append_only")

    def test_admin_audit_events_need_no_job_and_types_are_dotted_lowercase(self):
        org = self.w.org()
        key = self.w.api_key(org)

        def event(kind, **kw):
            row = {"organization_id": org, "actor": "api_key:" + key, "type": kind, "at": NOW,
                   "detail": stable_json({"apiKeyId": key})}
            row.update(kw)
            self.w.insert("job_events", row)

        event("api_key.created")
        event("runner.revoked", runner_id=self.w.runner(org), reason="leaked")
        for bad in ("Runner.Revoked", "revoked", "runner revoked", ".x", "x."):
            with self.subTest(type=bad):
                self.assertRefused(event, bad, message="CHECK constraint failed")

    def test_event_cannot_reference_another_organizations_job_or_runner(self):
        mine, theirs = self.w.org(), self.w.org()
        job = self.w.job(theirs)
        runner = self.w.runner(theirs)
        for column, value in (("job_id", job), ("runner_id", runner)):
            with self.subTest(column=column):
                self.assertRefused(self.w.insert, "job_events", {
                    "organization_id": mine, column: value, "actor": "system:reaper", "type": "job.lost",
                    "at": NOW}, message="FOREIGN KEY constraint failed")


# =============================================================================================
# Query plans: every lookup the service makes goes through an index
# =============================================================================================


def query_plan(conn, sql, params):
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()]


class QueryPlanTests(SchemaTest):
    # The service's own statements, read from the files the worker compiles in, so that the
    # plans checked here are the plans that run.
    CLAIM_QUERY = (QUERIES / "claim_candidates.sql").read_text()
    REAPER_QUERY = (QUERIES / "expired_leases.sql").read_text()
    ORG_REAPER_QUERY = (QUERIES / "expired_leases_in_org.sql").read_text()

    def populate(self):
        # Some rows in every state, so that the plans are not about an empty table.
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=50)
        for _ in range(5):
            self.w.job(org)
        for _ in range(3):
            self.claimed_job(org=org, runner=runner)
        return org

    def index_on(self, table, columns):
        """The name of the index on exactly `columns` (SQLite names UNIQUE constraints' itself)."""
        for _, name, *_ in self.conn.execute(f"PRAGMA index_list({table})").fetchall():
            cols = tuple(r[2] for r in self.conn.execute(f"PRAGMA index_info({name})").fetchall())
            if cols == tuple(columns):
                return name
        self.fail(f"no index on {table}{tuple(columns)}")

    def assertUsesIndex(self, sql, params, index):
        if isinstance(index, tuple):
            index = self.index_on(*index)
        plan = query_plan(self.conn, sql, params)
        text = " | ".join(plan)
        self.assertTrue(any(f"USING INDEX {index} " in d or f"USING COVERING INDEX {index} " in d
                            or d.endswith(f"INDEX {index}") for d in plan), text)
        self.assertFalse(any(d.startswith("SCAN") for d in plan), text)
        self.assertFalse(any("TEMP B-TREE" in d for d in plan), text)

    def assertMergesRanges(self, sql, params, indexes):
        """A read of jobs and archived_jobs (migration 0018): a range of each of `indexes`, and
        nothing scanned or sorted but what those bounded ranges gave (each arm's page, at most
        its LIMIT; the jobs made in one millisecond, whose ids order them; a GROUP BY's states)."""
        plan = query_plan(self.conn, sql, params)
        text = " | ".join(plan)
        for index in indexes:
            self.assertTrue(any(f"INDEX {index} (" in d for d in plan), (index, text))
        for d in plan:
            if d.startswith("SCAN"):
                self.assertTrue(d.startswith("SCAN (subquery-"), text)
            if "TEMP B-TREE" in d:
                self.assertIn(d, ("USE TEMP B-TREE FOR ORDER BY", "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY",
                                  "USE TEMP B-TREE FOR GROUP BY"), text)

    def test_claim_matching_query_uses_the_queue_index_without_scan_or_sort(self):
        org = self.populate()
        first_page = (org, "agent", "python3.12", 0, -(2**62), "", 8)
        self.assertUsesIndex(self.CLAIM_QUERY, first_page, "jobs_queue")
        cursor = self.conn.execute(self.CLAIM_QUERY, first_page)
        created_at = [d[0] for d in cursor.description].index("created_at")
        rows = cursor.fetchall()
        self.assertEqual(len(rows), 5)  # the queued ones, not the claimed ones
        # The next page starts after the cursor (keyset pagination), still on the index.
        cursor = (org, "agent", "python3.12", 0, rows[1][created_at], rows[1][0], 8)
        self.assertUsesIndex(self.CLAIM_QUERY, cursor, "jobs_queue")
        self.assertEqual([r[0] for r in self.conn.execute(self.CLAIM_QUERY, cursor)], [r[0] for r in rows[2:]])

    def test_reaper_expired_lease_query_uses_the_lease_index(self):
        self.populate()
        self.assertUsesIndex(self.REAPER_QUERY, (NOW + LEASE_MS, 100), "jobs_lease_expiry")
        self.assertEqual(len(self.conn.execute(self.REAPER_QUERY, (NOW + LEASE_MS, 100)).fetchall()), 3)

    def test_organization_reaper_query_uses_its_lease_index(self):
        org = self.populate()
        self.assertUsesIndex(self.ORG_REAPER_QUERY, (org, NOW + LEASE_MS, 100), "jobs_lease_expiry_by_organization")

    # The panel's lists (migrations/0002_panel_reads.sql): keyset pages, never scan and sort.
    JOBS_PAGE = (QUERIES / "jobs_page.sql").read_text()
    JOBS_PAGE_IN_STATE = (QUERIES / "jobs_page_in_state.sql").read_text()
    JOB_STATE_COUNTS = (QUERIES / "job_state_counts.sql").read_text()
    RUNNERS_PAGE = (QUERIES / "runners_page.sql").read_text()
    RUNNER_CLAIMS = (QUERIES / "runner_claims.sql").read_text()
    RUNNER_STATE_COUNTS = (QUERIES / "runner_state_counts.sql").read_text()
    STREAM_PAGE = (QUERIES / "stream_page.sql").read_text()
    PAST_EVERY_JOB = (2**53 - 1, "~")

    def test_jobs_pages_walk_newest_first_on_the_index_without_overlap(self):
        org = self.populate()
        for n in range(4):
            self.w.job(org, created_at=NOW + 1000 + n)
        expected = [r[0] for r in self.execute(
            "SELECT id FROM jobs WHERE organization_id = ? ORDER BY created_at DESC, id DESC", org)]
        self.assertEqual(len(expected), 12)
        seen, cursor = [], self.PAST_EVERY_JOB
        for _ in range(10):  # bounded: 12 jobs in pages of 5
            params = (org, *cursor, 5)
            self.assertMergesRanges(self.JOBS_PAGE, params, ("jobs_by_organization", "archived_jobs_by_organization"))
            rows = self.execute(self.JOBS_PAGE, *params).fetchall()
            if not rows:
                break
            seen += [r[0] for r in rows]
            cursor = (rows[-1][17], rows[-1][0])  # created_at, id
        self.assertEqual(seen, expected)

    def test_jobs_page_of_one_state_uses_the_state_index(self):
        org = self.populate()
        params = (org, *self.PAST_EVERY_JOB, "queued", 50)
        self.assertMergesRanges(self.JOBS_PAGE_IN_STATE, params, ("jobs_by_organization_state", "archived_jobs_by_state"))
        rows = self.execute(self.JOBS_PAGE_IN_STATE, *params).fetchall()
        self.assertEqual(len(rows), 5)
        self.assertTrue(all(r[11] == "queued" for r in rows))

    def test_job_state_counts_read_only_the_covering_index(self):
        org = self.populate()
        self.assertMergesRanges(self.JOB_STATE_COUNTS, (org,), ("jobs_by_organization_state", "archived_jobs_by_state"))
        plan = " | ".join(query_plan(self.conn, self.JOB_STATE_COUNTS, (org,)))
        self.assertIn("COVERING INDEX jobs_by_organization_state", plan)
        self.assertIn("COVERING INDEX archived_jobs_by_state", plan)
        counts = dict(self.execute(self.JOB_STATE_COUNTS, org).fetchall())
        self.assertEqual(counts, {"queued": 5, "claimed": 3})

    def test_runners_pages_walk_registration_order_on_the_index(self):
        org = self.w.org()
        ids = [self.w.runner(org, registered_at=NOW + n // 2) for n in range(5)]  # ties on time
        expected = [r[0] for r in self.execute(
            "SELECT id FROM runners WHERE organization_id = ? ORDER BY registered_at, id", org)]
        self.assertEqual(sorted(expected), sorted(ids))
        seen, cursor = [], (-(2**62), "")
        for _ in range(10):
            params = (org, *cursor, 2)
            self.assertUsesIndex(self.RUNNERS_PAGE, params, "runners_page_order")
            rows = self.execute(self.RUNNERS_PAGE, *params).fetchall()
            if not rows:
                break
            seen += [r[0] for r in rows]
            cursor = (rows[-1][25], rows[-1][0])  # registered_at, id
        self.assertEqual(seen, expected)

    ARTIFACTS_PAGE = (QUERIES / "artifacts_page.sql").read_text()
    RUNNER_ACTIVE_CLAIMS = (QUERIES / "runner_active_claims.sql").read_text()

    def test_artifact_pages_walk_newest_first_on_the_index(self):
        org = self.w.org()
        for n in range(3):
            self.w.insert("release_artifacts", {"id": f"art_{n}", "organization_id": org,
                                                "kind": "prompt", "name": f"a{n}", "created_at": NOW + n})
        for params in [(org, None, None, None, 2), (org, "prompt", NOW + 2, "art_2", 2)]:
            plan = " | ".join(query_plan(self.conn, self.ARTIFACTS_PAGE, params))
            self.assertIn("release_artifacts_page_order", plan)
            self.assertNotIn("TEMP B-TREE", plan, "a page is a walk of the index, not a sort")
        first = [r[0] for r in self.execute(self.ARTIFACTS_PAGE, org, None, None, None, 2)]
        rest = [r[0] for r in self.execute(self.ARTIFACTS_PAGE, org, None, NOW + 1, "art_1", 2)]
        self.assertEqual((first, rest), (["art_2", "art_1"], ["art_0"]))

    def test_a_runners_held_claims_are_a_range_of_its_claim_index(self):
        org = self.populate()
        runner = self.execute("SELECT runner_id FROM job_claims WHERE state = 'active' LIMIT 1").fetchone()[0]
        params = (org, runner, 1000)
        self.assertUsesIndex(self.RUNNER_ACTIVE_CLAIMS, params, "job_claims_by_runner")
        rows = self.execute(self.RUNNER_ACTIVE_CLAIMS, *params).fetchall()
        self.assertTrue(rows and all(r[3] == "active" for r in rows), rows)

    def test_runner_counts_read_one_organizations_range(self):
        org, other = self.w.org(), self.w.org()
        self.w.runner(org, max_concurrent_jobs=3)
        self.w.runner(org, max_concurrent_jobs=2)
        self.w.runner(other, max_concurrent_jobs=7)
        # A range of the organization's entries; grouping its few states needs a small temp
        # b-tree (at most five groups), which is fine: what must never happen is a scan.
        # (organization_id, state) serves the range and the grouping: no scan, no temp b-tree.
        plan = query_plan(self.conn, self.RUNNER_STATE_COUNTS, (org,))
        self.assertTrue(any(d.startswith("SEARCH runners USING INDEX runners_by_organization_state") for d in plan), plan)
        self.assertFalse(any(d.startswith("SCAN") or "TEMP B-TREE" in d for d in plan), plan)
        rows = self.execute(self.RUNNER_STATE_COUNTS, org).fetchall()
        self.assertEqual(rows, [("active", 2, 0, 5)])

    def test_runner_claims_come_newest_first_from_their_index(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=50)
        for _ in range(3):
            self.claimed_job(org=org, runner=runner)
        params = (org, runner, 50)
        self.assertUsesIndex(self.RUNNER_CLAIMS, params, "job_claims_by_runner_issued")
        self.assertEqual(len(self.execute(self.RUNNER_CLAIMS, *params).fetchall()), 3)

    def test_stream_page_reads_the_key_range_and_stops_at_its_byte_budget(self):
        org, _, job, claim = self.claimed_job()
        previous = None
        for sequence in range(6):
            payload = {"lines": [{"stream": "stdout", "line": "x" * 1000}]}
            previous = self.w.append(self.w.chunk(job, claim, 1, sequence, previous, payload=payload))
        plan = " | ".join(query_plan(self.conn, self.STREAM_PAGE, (org, job, 0, -1, 1, 3, 100, 10**6)))
        self.assertIn("SEARCH stream_chunks USING INDEX sqlite_autoindex_stream_chunks_1", plan)
        self.assertNotIn("SCAN stream_chunks", plan)

        def page(after, limit, budget):
            return self.execute(self.STREAM_PAGE, org, job, *after, 1, 3, limit, budget).fetchall()

        everything = page((0, -1), 100, 10**6)
        self.assertEqual([r[1] for r in everything], list(range(6)))
        self.assertEqual({r[10] for r in everything}, {6})  # page_rows: the range held six
        # After a cursor, only what follows it.
        self.assertEqual([r[1] for r in page((1, 3), 100, 10**6)], [4, 5])
        # A budget of 2.5 chunks' bytes: chunks start while the bytes before them are under it,
        # so three come back, and page_rows says the range held more.
        size = len(everything[0][5].encode())
        cut = page((0, -1), 100, int(size * 2.5))
        self.assertEqual([r[1] for r in cut], [0, 1, 2])
        self.assertEqual(cut[0][10], 6)
        # The first chunk always comes, whatever the budget, so a reader always moves forward.
        self.assertEqual([r[1] for r in page((0, -1), 100, 1)], [0])
        # And the limit bounds the range read.
        self.assertEqual([r[1] for r in page((0, -1), 2, 10**6)], [0, 1])

    def test_service_lookups_use_an_index(self):
        self.populate()
        lookups = [
            ("api key by hash", "SELECT id, organization_id, role, scopes FROM api_keys"
             " WHERE key_hash = ? AND revoked_at IS NULL", ("h",), ("api_keys", ("key_hash",))),
            ("runner by fingerprint", "SELECT id, state FROM runners WHERE fingerprint = ?", ("fp",),
             ("runners", ("fingerprint",))),
            ("runner by key", "SELECT id FROM runners WHERE organization_id = ? AND runner_key = ?",
             ("o", "k"), ("runners", ("organization_id", "runner_key"))),
            ("runners of an organization", "SELECT id FROM runners WHERE organization_id = ?"
             " ORDER BY registered_at LIMIT 50", ("o",), "runners_page_order"),
            ("challenge by hash", "SELECT id, runner_id, expires_at, consumed_at FROM runner_challenges"
             " WHERE challenge_hash = ?", ("h",), ("runner_challenges", ("challenge_hash",))),
            ("credentials of a runner", "SELECT id FROM runner_credentials WHERE runner_id = ?"
             " AND credential_generation < ?", ("r", 3), "runner_credentials_by_runner"),
            ("job by idempotency key", "SELECT id, intent_hash FROM jobs WHERE organization_id = ?"
             " AND idempotency_key = ?", ("o", "k"), ("jobs", ("organization_id", "idempotency_key"))),
            ("jobs of an organization", "SELECT id FROM jobs WHERE organization_id = ?"
             " ORDER BY created_at DESC, id DESC LIMIT 50", ("o",), "jobs_by_organization"),
            ("active claims of a runner", "SELECT id, job_id FROM job_claims WHERE runner_id = ?"
             " AND state = 'active'", ("r",), "job_claims_by_runner"),
            ("claims of a runner", "SELECT id FROM job_claims WHERE runner_id = ? ORDER BY state, issued_at",
             ("r",), "job_claims_by_runner"),
            ("claims of a job", "SELECT id FROM job_claims WHERE job_id = ? ORDER BY dispatch_attempt",
             ("j",), ("job_claims", ("job_id", "dispatch_attempt"))),
            ("active claim of a job", "SELECT id FROM job_claims WHERE job_id = ? AND state = 'active'",
             ("j",), "job_claims_one_active_per_job"),
            ("events of a job", "SELECT * FROM job_events WHERE job_id = ? ORDER BY id", ("j",),
             "job_events_by_job"),
            ("events of a runner", "SELECT * FROM job_events WHERE runner_id = ? AND organization_id = ?"
             " ORDER BY id", ("r", "o"), "job_events_by_runner"),
            ("audit of an organization", "SELECT * FROM job_events WHERE organization_id = ?"
             " ORDER BY id DESC LIMIT 100", ("o",), "job_events_by_organization"),
            ("stream head", "SELECT sequence, checksum FROM stream_chunks WHERE job_id = ?"
             " AND dispatch_attempt = ? ORDER BY sequence DESC LIMIT 1", ("j", 1),
             ("stream_chunks", ("job_id", "dispatch_attempt", "sequence"))),
            ("chunks of a job", "SELECT * FROM stream_chunks WHERE job_id = ? ORDER BY dispatch_attempt, sequence",
             ("j",), ("stream_chunks", ("job_id", "dispatch_attempt", "sequence"))),
            ("completions of a job", "SELECT * FROM job_completions WHERE job_id = ? ORDER BY received_at",
             ("j",), "job_completions_by_job"),
            ("accepted completion of a job", "SELECT * FROM job_completions WHERE job_id = ?"
             " AND decision = 'accepted'", ("j",), "job_completions_one_accepted_per_job"),
            ("custody of a job", "SELECT * FROM completion_evidence WHERE job_id = ?", ("j",),
             "completion_evidence_by_job"),
            ("targets of an evaluation", "SELECT * FROM executable_targets WHERE organization_id = ?"
             " AND evaluation_id = ? ORDER BY created_at LIMIT 50", ("o", "e"),
             "executable_targets_by_evaluation"),
            ("versions of an artifact", "SELECT id FROM release_versions WHERE artifact_id = ? ORDER BY id",
             ("a",), "release_versions_by_artifact"),
            ("test results of a run", "SELECT id FROM test_results WHERE evaluation_run_id = ?", ("r",),
             "test_results_by_run"),
            ("cost records of a run", "SELECT id FROM cost_records WHERE evaluation_run_id = ?", ("r",),
             "cost_records_by_run"),
            ("model calls of a run", "SELECT id FROM model_calls WHERE evaluation_run_id = ?", ("r",),
             "model_calls_by_run"),
            ("traces of a run", "SELECT id FROM traces WHERE evaluation_run_id = ?", ("r",), "traces_by_run"),
            ("runs of an organization", "SELECT id FROM evaluation_runs WHERE organization_id = ?"
             " ORDER BY created_at DESC LIMIT 50", ("o",), "evaluation_runs_by_organization"),
            ("evidence of a job", "SELECT * FROM completion_evidence WHERE job_id = ?", ("j",),
             "completion_evidence_by_job"),
            # Migration 0019: an archived job holds its run in its row; the guards ask by run.
            ("archived holder of a run", "SELECT 1 FROM archived_jobs WHERE custody_run_id = ?"
             " AND expiring_at IS NULL", ("r",), "archived_jobs_by_custody_run"),
            ("api keys of an organization", "SELECT id, name, key_prefix FROM api_keys WHERE organization_id = ?"
             " ORDER BY created_at", ("o",), "api_keys_by_organization"),
            ("challenges of a runner", "SELECT id FROM runner_challenges WHERE runner_id = ?"
             " ORDER BY issued_at DESC LIMIT 5", ("r",), "runner_challenges_by_runner"),
            ("expired challenges to purge", "SELECT id FROM runner_challenges WHERE expires_at < ? LIMIT 500",
             (NOW,), "runner_challenges_by_expiry"),
            ("expired credentials to purge", "SELECT id FROM runner_credentials WHERE expires_at < ? LIMIT 500",
             (NOW,), "runner_credentials_by_expiry"),
        ]
        for name, sql, params, index in lookups:
            with self.subTest(name):
                self.assertUsesIndex(sql, params, index)


# =============================================================================================
# Per-job storage limits (migrations/0004_job_bounds.sql)
# =============================================================================================


MAX_CHUNKS_PER_ATTEMPT = 10_000
MAX_STREAM_BYTES_PER_ATTEMPT = 64 * 1024 * 1024
MAX_STORED_REFUSALS = 20


class JobBoundsTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org, self.runner, self.job, self.claim = self.claimed_job()

    def fake_stream(self, count, payload_bytes=2):
        """`count` chained chunks of one attempt written in one statement (fake checksums, exact
        running totals), as a head to append after; returns the last checksum."""
        self.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)"
            " INSERT INTO stream_chunks (job_id, organization_id, claim_id, dispatch_attempt, sequence, kind,"
            "   previous_checksum, payload, payload_hash, checksum, emitted_at, received_at, stream_bytes)"
            " SELECT ?, ?, ?, 1, i, 'log', CASE WHEN i = 0 THEN NULL ELSE printf('%064x', i) END,"
            "   '\"' || substr(hex(zeroblob(?)), 1, ? - 2) || '\"', printf('%064x', 0), printf('%064x', i + 1),"
            "   '2026-05-28T07:00:00Z', ?, (i + 1) * ? FROM n",
            count, self.job, self.org, self.claim, payload_bytes, payload_bytes, NOW, payload_bytes,
        )
        return "%064x" % count

    def test_each_chunk_carries_its_attempts_exact_running_byte_total(self):
        c0 = self.w.append(self.chunk(0, None))
        wrong = self.w.chunk(self.job, self.claim, 1, 1, c0)
        wrong["stream_bytes"] += 1
        self.assertRefused(self.w.append, wrong, message="stream_bytes_miscounted")
        row = self.w.chunk(self.job, self.claim, 1, 1, c0)
        self.w.append(row)
        first = len(stable_json({"message": "line 0"}).encode())
        self.assertEqual(row["stream_bytes"], first + len(row["payload"].encode()))

    def chunk(self, sequence, previous, **kw):
        return self.w.chunk(self.job, self.claim, 1, sequence, previous, **kw)

    def test_an_attempt_holds_at_most_ten_thousand_chunks(self):
        last = self.fake_stream(MAX_CHUNKS_PER_ATTEMPT - 1)
        last = self.w.append(self.chunk(MAX_CHUNKS_PER_ATTEMPT - 1, last))
        self.assertRefused(self.w.append, self.chunk(MAX_CHUNKS_PER_ATTEMPT, last), message="stream_chunk_limit")

    def test_an_attempt_holds_at_most_64_mib_of_payload(self):
        chunk_bytes = 256 * 1024
        last = self.fake_stream(MAX_STREAM_BYTES_PER_ATTEMPT // chunk_bytes, payload_bytes=chunk_bytes)
        total = self.w.one("SELECT max(stream_bytes) FROM stream_chunks WHERE job_id = ?", self.job)[0]
        self.assertEqual(total, MAX_STREAM_BYTES_PER_ATTEMPT)
        self.assertRefused(self.w.append, self.chunk(MAX_STREAM_BYTES_PER_ATTEMPT // chunk_bytes, last,
                                                      payload={}), message="stream_bytes_limit")

    def test_refused_decisions_are_stored_up_to_twenty_per_job_then_counted_on_the_job(self):
        self.w.complete(self.job, self.claim, self.runner, 1)
        for n in range(MAX_STORED_REFUSALS):
            self.w.insert("job_completions", self.w.completion_row(
                self.job, self.claim, self.runner, 1, decision="conflict", status="failed",
                completed_at=f"2026-05-28T07:01:{n:02d}Z"))
        extra = self.w.completion_row(self.job, self.claim, self.runner, 1, decision="duplicate")
        self.assertRefused(self.w.insert, "job_completions", extra, message="completion_decisions_at_cap")
        self.execute("UPDATE jobs SET unstored_decisions = unstored_decisions + 1, last_unstored_checksum = ?,"
                     " last_unstored_decision = 'duplicate', last_unstored_at = ? WHERE id = ?",
                     extra["completion_checksum"], NOW, self.job)
        self.assertEqual(self.w.one("SELECT unstored_decisions, last_unstored_checksum FROM jobs WHERE id = ?",
                                    self.job), (1, extra["completion_checksum"]))
        self.assertRefused(self.execute, "UPDATE jobs SET last_unstored_decision = 'accepted' WHERE id = ?",
                           self.job, message="CHECK constraint failed")


if __name__ == "__main__":
    unittest.main()


# =============================================================================================
# Batch assertions (migration 0007): what a warm job object's one write asserts
# =============================================================================================


class BatchAssertionTests(SchemaTest):
    # The statements the job object sends, read from the files the worker compiles in.
    CREDENTIAL = (QUERIES / "assert_credential_current.sql").read_text()
    CREDENTIAL_READ = (QUERIES / "credential_current.sql").read_text()
    JOB_AS_KNOWN = (QUERIES / "assert_job_as_known.sql").read_text()

    def heartbeat(self, job, claim, runner, generation, state="claimed", now=NOW + 1_000, lease_check=True):
        """A warm heartbeat's batch: both assertions, then the write they guard."""
        return [
            (self.CREDENTIAL, (runner, self.w.one("SELECT organization_id FROM runners WHERE id = ?", runner)[0],
                               generation, AUTHENTICATING_STATES)),
            (self.JOB_AS_KNOWN, (job, state, 1, claim, now if lease_check else None)),
            ("UPDATE jobs SET lease_expires_at = ?, updated_at = ? WHERE id = ?", (now + LEASE_MS, now, job)),
        ]

    def lease(self, job):
        return self.w.job_row(job)[3]

    def test_a_batch_whose_assertions_hold_commits_and_stores_nothing_for_them(self):
        org, runner, job, claim = self.claimed_job()
        batch(self.conn, self.heartbeat(job, claim, runner, 1))
        self.assertEqual(self.lease(job), NOW + 1_000 + LEASE_MS)
        self.assertEqual(self.execute("SELECT count(*) FROM batch_assertions").fetchone()[0], 0)

    def test_a_moved_credential_generation_aborts_the_whole_batch(self):
        org, runner, job, claim = self.claimed_job()
        before = self.lease(job)
        self.execute("UPDATE runners SET credential_generation = 2 WHERE id = ?", runner)  # a rotation
        self.assertRefused(batch, self.conn, self.heartbeat(job, claim, runner, 1), message="credential_revoked")
        self.assertEqual(self.lease(job), before)
        # The new generation passes.
        batch(self.conn, self.heartbeat(job, claim, runner, 2))

    def test_a_revoked_runner_fails_the_credential_assertion_at_its_own_generation(self):
        org, runner, job, claim = self.claimed_job()
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, runner)
        self.assertRefused(batch, self.conn, self.heartbeat(job, claim, runner, 1), message="credential_revoked")

    def test_the_credential_assertion_is_scoped_to_the_organization(self):
        org, runner, job, claim = self.claimed_job()
        other = self.w.org()
        statements = self.heartbeat(job, claim, runner, 1)
        statements[0] = (self.CREDENTIAL, (runner, other, 1, AUTHENTICATING_STATES))
        self.assertRefused(batch, self.conn, statements, message="credential_revoked")

    def test_the_credential_read_agrees_with_the_assertion(self):
        org, runner, job, claim = self.claimed_job()
        self.assertEqual(self.execute(self.CREDENTIAL_READ, runner, org, 1, AUTHENTICATING_STATES).fetchall(), [(1,)])
        self.assertEqual(self.execute(self.CREDENTIAL_READ, runner, org, 2, AUTHENTICATING_STATES).fetchall(), [])
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, runner)
        self.assertEqual(self.execute(self.CREDENTIAL_READ, runner, org, 1, AUTHENTICATING_STATES).fetchall(), [])

    def test_the_credential_statements_pass_exactly_the_states_that_may_authenticate(self):
        # A key pair awaiting approval (a bootstrap runner is never pending): no row, no pass.
        org = self.w.org()
        pending = self.w.keypair_runner(org, state="pending_approval")
        self.assertNotIn("pending_approval", json.loads(AUTHENTICATING_STATES))
        self.assertEqual(self.execute(self.CREDENTIAL_READ, pending, org, 1, AUTHENTICATING_STATES).fetchall(), [])
        self.assertRefused(batch, self.conn, [(self.CREDENTIAL, (pending, org, 1, AUTHENTICATING_STATES))],
                           message="credential_revoked")
        org, runner, job, claim = self.claimed_job()
        for state in ("active", "draining", "lost", "revoked"):
            self.execute("UPDATE runners SET state = ?, revoked_at = ? WHERE id = ?",
                         state, NOW if state == "revoked" else None, runner)
            passes = state in json.loads(AUTHENTICATING_STATES)
            read = self.execute(self.CREDENTIAL_READ, runner, org, 1, AUTHENTICATING_STATES).fetchall()
            self.assertEqual(read, [(1,)] if passes else [], state)
            if passes:
                batch(self.conn, self.heartbeat(job, claim, runner, 1))
            else:
                self.assertRefused(batch, self.conn, self.heartbeat(job, claim, runner, 1),
                                   message="credential_revoked")
            if state == "revoked":
                break  # permanent (runners_revocation_is_permanent); it is the last state

    def test_a_job_not_as_its_object_knew_it_aborts_the_batch(self):
        org, runner, job, claim = self.claimed_job()
        before = self.lease(job)
        # Another state, attempt or claim than the object believed.
        for state, attempt, held in (("running", 1, claim), ("claimed", 2, claim), ("claimed", 1, None)):
            statements = self.heartbeat(job, claim, runner, 1)
            statements[1] = (self.JOB_AS_KNOWN, (job, state, attempt, held, NOW + 1_000))
            self.assertRefused(batch, self.conn, statements, message="job_moved")
        self.assertEqual(self.lease(job), before)

    def test_a_lease_moved_into_the_past_in_d1_aborts_a_batch_that_relied_on_it(self):
        org, runner, job, claim = self.claimed_job()
        self.execute("UPDATE jobs SET lease_expires_at = ? WHERE id = ?", NOW, job)
        self.assertRefused(batch, self.conn, self.heartbeat(job, claim, runner, 1, now=NOW), message="job_moved")
        # A decision that did not rely on the lease is not held to it.
        batch(self.conn, self.heartbeat(job, claim, runner, 1, now=NOW, lease_check=False))

    def test_an_unknown_assertion_code_aborts(self):
        self.assertRefused(
            batch, self.conn, [("INSERT INTO batch_assertions (code, held) VALUES ('credential_revokd', 1)", ())],
            message="unknown_batch_assertion")

    RUNNER_AS_KNOWN = (QUERIES / "assert_runner_as_known.sql").read_text()

    def test_an_admin_change_decided_from_a_moved_runner_state_aborts_whole(self):
        org = self.w.org()
        runner = self.w.runner(org)
        tags = ("UPDATE runners SET tags = '[\"gpu\"]', updated_at = ? WHERE id = ? AND organization_id = ?",
                (NOW, runner, org))
        # A revocation landed between the change's read (active) and its write.
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, runner)
        self.assertRefused(batch, self.conn, [(self.RUNNER_AS_KNOWN, (runner, org, "active")), tags],
                           message="runner_moved")
        self.assertEqual(self.w.one("SELECT tags FROM runners WHERE id = ?", runner)[0], "[]")
        # Control: decided from the state the runner is in, the same batch commits.
        other = self.w.runner(org)
        batch(self.conn, [(self.RUNNER_AS_KNOWN, (other, org, "active")),
                          (tags[0], (NOW, other, org))])
        self.assertEqual(self.w.one("SELECT tags FROM runners WHERE id = ?", other)[0], '["gpu"]')


# =============================================================================================
# Claim request ids (migration 0008): a retried claim finds the claim it was granted
# =============================================================================================


class ClaimRequestIdTests(SchemaTest):
    CLAIM_BY_REQUEST = (QUERIES / "claim_by_request.sql").read_text()

    def granted_with(self, org, runner, request_id):
        job = self.w.job(org)
        claim = self.w.grant(job, runner)
        self.execute("UPDATE job_claims SET request_id = ? WHERE id = ?", request_id, claim)
        return job, claim

    def test_a_retried_request_finds_its_active_claim_and_only_that(self):
        org = self.w.org()
        runner = self.w.runner(org)
        job, claim = self.granted_with(org, runner, "req-1")
        rows = self.execute(self.CLAIM_BY_REQUEST, runner, "req-1").fetchall()
        self.assertEqual([r[0] for r in rows], [claim])
        self.assertEqual(self.execute(self.CLAIM_BY_REQUEST, runner, "req-2").fetchall(), [])
        other = self.w.runner(org)
        self.assertEqual(self.execute(self.CLAIM_BY_REQUEST, other, "req-1").fetchall(), [])

    def test_a_request_id_is_unique_among_the_runners_active_claims_only(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=5)
        job, claim = self.granted_with(org, runner, "req-1")
        self.assertRefused(self.granted_with, org, runner, "req-1", message="UNIQUE")
        # Another runner may use the same key.
        self.granted_with(org, self.w.runner(org), "req-1")
        # Once the claim ended, the key asks for a new job like any other claim.
        self.execute("UPDATE job_claims SET state = 'released', ended_at = ? WHERE id = ?", NOW, claim)
        self.execute("UPDATE jobs SET state = 'queued', active_claim_id = NULL, lease_expires_at = NULL"
                     " WHERE id = ?", job)
        self.granted_with(org, runner, "req-1")
        self.assertEqual(len(self.execute(self.CLAIM_BY_REQUEST, runner, "req-1").fetchall()), 1)

    def test_a_request_id_is_a_short_plain_token(self):
        org = self.w.org()
        runner = self.w.runner(org, max_concurrent_jobs=5)
        for bad in ("", "has space", "a" * 65, "emoji-\u00e9"):
            with self.subTest(bad=bad):
                self.assertRefused(self.granted_with, org, runner, bad, message="CHECK")
        self.granted_with(org, runner, "A1" * 30 + ".:_-")


# =============================================================================================
# The job object's own statements (src/store/queries, compiled into the worker), through a
# whole lifecycle: what the schema tests prove is what production runs
# =============================================================================================


def query(name):
    return (QUERIES / f"{name}.sql").read_text()


# The quota's allowances, as src/store/usage.rs has them (and migration 0015's estimate).
JOB_ROW_BYTES = 1024
ARCHIVED_JOB_BYTES = 512
CHUNK_ROW_BYTES = 256
VERSION_ROW_BYTES = 512


# The protocol's runner machine as the worker binds it into the statements that decide from a
# runner's live state. src/store/runners.rs builds them from the protocol crate, and its unit
# tests check that this file binds exactly what it builds.
LEASE_LOST_MOVES = '{"active":"lost"}'
LEASE_LOST_RETIRING = '["active"]'
AUTHENTICATING_STATES = '["active","draining","lost"]'
CLAIMING_STATES = '["active"]'
# runners::take_capacity: what the grant of an ephemeral runner's job moves it to (migration 0020).
EPHEMERAL_DRAINED = "draining"
EPHEMERAL_DRAINED_REASON = "ephemeral: took its one job"
SESSION_PROVEN_MOVES = '{"lost":"active"}'
SESSION_REASON = "session exchanged after loss"

# Every admin move that changes the state, with what it stamps: (from, input, to, approved_at
# set, revoked_at set, credential retired). src/store/runners.rs derives the same table from
# the protocol crate and checks that this one is it, row for row.
ADMIN_MOVES = (
    ("pending_approval", "approve", "active", True, False, False),
    ("pending_approval", "revoke", "revoked", False, True, True),
    ("active", "drain", "draining", False, False, False),
    ("active", "revoke", "revoked", False, True, True),
    ("draining", "activate", "active", False, False, False),
    ("draining", "revoke", "revoked", False, True, True),
    ("lost", "activate", "active", False, False, False),
    ("lost", "drain", "draining", False, False, False),
    ("lost", "revoke", "revoked", False, True, True),
)
RUNNER_STATES = ("pending_approval", "active", "draining", "lost", "revoked")


class ProductionStatementTests(SchemaTest):
    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.runner = self.w.runner(self.org)
        self.job = self.w.job(self.org)

    def known(self, state, attempt, claim, now=None):
        return (query("assert_job_as_known"), (self.job, state, attempt, claim, now))

    def credential(self, generation=1):
        return (query("assert_credential_current"), (self.runner, self.org, generation, AUTHENTICATING_STATES))

    def grant(self, attempt, at=NOW, request_id=None):
        claim = f"{self.job}-a{attempt}"
        lease = at + LEASE_MS
        batch(self.conn, [
            self.known("queued", attempt - 1, None),
            (query("grant_claim"), (claim, self.job, self.org, self.runner, attempt, sha("nonce" + claim),
                                    "kid", at, at + 300_000, lease, '{"signed": true}', request_id)),
            (query("grant_job"), (self.job, self.org, attempt, claim, lease, at)),
            (query("grant_runner"), (self.runner, at, CLAIMING_STATES, EPHEMERAL_DRAINED,
                                     EPHEMERAL_DRAINED_REASON)),
        ])
        return claim

    def heartbeat(self, claim, attempt, state, at, generation=1):
        lease = at + 2 * LEASE_MS
        batch(self.conn, [
            self.credential(generation),
            self.known(state, attempt, claim, at),
            (query("heartbeat_job"), (self.job, claim, attempt, lease, "running", at, state)),
            (query("heartbeat_claim"), (claim, lease, at)),
            (query("heartbeat_runner"), (self.runner, at)),
        ])
        return lease

    def end(self, claim, attempt, state, to, how, runner_statement, free=0, at=NOW):
        batch(self.conn, [
            self.known(state, attempt, claim),
            (query("end_claim"), (claim, at, how[0], how[1])),
            (query("free_job"), (self.job, claim, attempt, state, to, at, at if to == "cancelled" else None,
                                 "reason", free)),
            runner_statement,
        ])

    def active_claims(self):
        return self.w.active_claims(self.runner)

    def test_grant_heartbeat_recovery_hand_back_and_completion_in_production_statements(self):
        claim = self.grant(1)
        self.assertEqual(self.w.job_row(self.job)[:3], ("claimed", 1, claim))
        self.assertEqual(self.active_claims(), 1)
        # The same attempt cannot be granted twice.
        self.assertRefused(self.grant, 1, message="job_moved")
        self.heartbeat(claim, 1, "claimed", NOW + 1_000)
        self.assertEqual(self.w.job_row(self.job)[0], "running")

        # The lease lapses: recovery ends the claim, requeues the job, marks the runner lost.
        self.end(claim, 1, "running", "queued", ("lost", "lease expired"),
                 (query("recover_runner"), (self.runner, NOW, "job: lease expired", LEASE_LOST_MOVES,
                                            LEASE_LOST_RETIRING)))
        self.assertEqual(self.w.job_row(self.job)[:3], ("queued", 1, None))
        state, generation = self.w.one(
            "SELECT state, credential_generation FROM runners WHERE id = ?", self.runner)
        self.assertEqual((state, generation, self.active_claims()), ("lost", 2, 0))
        # Its old credential no longer passes; a fresh session brings it back.
        self.execute("UPDATE runners SET state = 'active' WHERE id = ?", self.runner)

        # Attempt 2, handed back (free): queued again with the hand-back counted as free.
        claim = self.grant(2, request_id="req-2")
        self.end(claim, 2, "claimed", "queued", ("released", "handed back: stopping"),
                 (query("hand_back_runner"), (self.runner, NOW)), free=1)
        self.assertEqual(self.w.one("SELECT released_attempts FROM jobs WHERE id = ?", self.job)[0], 1)
        self.assertEqual(self.active_claims(), 0)

        # Attempt 3, completed and accepted, with its evidence in custody.
        claim = self.grant(3)
        self.heartbeat(claim, 3, "claimed", NOW + 2_000, generation=2)
        run = self.w.evaluation_run(self.org)
        row = self.w.completion_row(self.job, claim, self.runner, 3, evaluation_run_id=run)
        completion = (query("completion_insert"), (
            row["id"], self.job, self.org, claim, self.runner, 3, "accepted", "accepted",
            row["completion_checksum"], "succeeded", row["input_hash"], row["result_hash"], None, run,
            row["evidence"], None, row["completed_at"], NOW, stable_json({"completion": True})))
        batch(self.conn, [
            self.credential(generation=2),
            self.known("running", 3, claim, NOW + 3_000),
            completion,
            (query("complete_job"), (self.job, claim, 3, "succeeded", NOW + 3_000)),
            (query("complete_claim"), (claim, NOW + 3_000)),
            (query("complete_runner"), (self.runner, NOW + 3_000)),
            (query("completion_evidence_insert"), ("evaluation_run", run, row["id"], self.job, self.org,
                                                   NOW + 3_000)),
        ])
        self.assertEqual(self.w.job_row(self.job)[:3], ("succeeded", 3, None))
        self.assertEqual(self.active_claims(), 0)
        # Whose custody the run is in, as a later completion naming it is told.
        holder = self.execute(query("evidence_holder"), self.org,
                              json.dumps([["test_result", "tr_x"], ["evaluation_run", run]])).fetchall()
        self.assertEqual(holder, [("evaluation_run", run, self.job)])
        self.assertEqual(self.execute(query("evidence_holder"), self.org, json.dumps([["evaluation_run", "evr_none"]]))
                         .fetchall(), [])

    def test_a_heartbeat_of_a_rotated_credential_changes_nothing(self):
        claim = self.grant(1)
        before = self.w.job_row(self.job)
        self.execute("UPDATE runners SET credential_generation = 2 WHERE id = ?", self.runner)
        self.assertRefused(self.heartbeat, claim, 1, "claimed", NOW + 1_000, message="credential_revoked")
        self.assertEqual(self.w.job_row(self.job), before)

    def presumed_heartbeat(self, claim, attempt, at, runner=None, org=None):
        """A cold job object's first heartbeat, decided from the claim id alone
        (job_do::presumed_first_heartbeat): its assertions, the writes, then the job read back."""
        runner = runner or self.runner
        lease = at + 2 * LEASE_MS
        batch(self.conn, [
            (query("assert_credential_current"), (runner, org or self.org, 1, AUTHENTICATING_STATES)),
            self.known("claimed", attempt, claim, at),
            (query("assert_claim_held"), (claim, runner, org or self.org)),
            (query("heartbeat_job"), (self.job, claim, attempt, lease, "running", at, "claimed")),
            (query("heartbeat_claim"), (claim, lease, at)),
            (query("heartbeat_runner"), (runner, at)),
        ])
        return lease

    def test_a_presumed_first_heartbeat_commits_only_on_the_claim_it_presumes(self):
        claim = self.grant(1)
        before = self.w.job_row(self.job)
        # Another runner of the organization naming the claim: not its claim.
        other = self.w.runner(self.org)
        self.assertRefused(self.presumed_heartbeat, claim, 1, NOW + 1_000, runner=other, message="job_moved")
        # The holder, presuming another attempt.
        self.assertRefused(self.presumed_heartbeat, f"{self.job}-a2", 2, NOW + 1_000, message="job_moved")
        # The holder, after its lease lapsed.
        self.assertRefused(self.presumed_heartbeat, claim, 1, NOW + LEASE_MS, message="job_moved")
        self.assertEqual(self.w.job_row(self.job), before)
        # The holder, as presumed: the first heartbeat's rows.
        lease = self.presumed_heartbeat(claim, 1, NOW + 1_000)
        self.assertEqual(self.w.job_row(self.job)[:4], ("running", 1, claim, lease))
        # A second heartbeat presumed first is refuted (the job runs), and changes nothing.
        self.assertRefused(self.presumed_heartbeat, claim, 1, NOW + 2_000, message="job_moved")
        self.assertEqual(self.w.job_row(self.job)[3], lease)

    def test_a_presumed_first_heartbeat_of_a_job_asked_to_cancel_is_refuted(self):
        claim = self.grant(1)
        batch(self.conn, [self.known("claimed", 1, claim),
                          (query("cancel_request_job"), (self.job, self.org, "claimed", "stop", NOW))])
        self.assertRefused(self.presumed_heartbeat, claim, 1, NOW + 1_000, message="job_moved")
        self.assertEqual(self.w.job_row(self.job)[0], "cancel_requested")

    def test_cancel_statements(self):
        batch(self.conn, [self.known("queued", 0, None),
                          (query("cancel_queued_job"), (self.job, self.org, "queued", "no longer needed", NOW))])
        self.assertEqual(self.w.job_row(self.job)[0], "cancelled")
        other = self.w.job(self.org)
        self.job = other
        claim = self.grant(1)
        batch(self.conn, [self.known("claimed", 1, claim),
                          (query("cancel_request_job"), (self.job, self.org, "claimed", "stop", NOW))])
        self.assertEqual(self.w.job_row(self.job)[0], "cancel_requested")

    def test_every_statement_file_is_exercised_by_these_tests(self):
        text = pathlib.Path(__file__).read_text()
        for path in sorted(QUERIES.glob("*.sql")):
            with self.subTest(query=path.name):
                self.assertTrue(f'query("{path.stem}")' in text or f'"{path.name}"' in text, path.name)

    def test_every_statement_the_worker_compiles_in_prepares_against_the_migrated_schema(self):
        # Every statement file, those of queries/*.sql (each tested for its behaviour in this
        # suite) and those of queries/<table group>/*.sql (the reads and plain writes behind the
        # store's typed functions, exercised end to end by the e2e suites on real D1): each
        # prepares against the schema the migrations build, with exactly the parameters it
        # numbers, so a column, table or placeholder that does not exist fails here.
        # bench_floor is the benchmark build's own table, created by scripts/bench.
        self.execute("CREATE TABLE bench_floor (id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL)")
        files = sorted(QUERIES.rglob("*.sql"))
        self.assertGreater(len(files), 100)
        for path in files:
            sql = path.read_text()
            code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
            numbered = [int(n) for n in re.findall(r"\?(\d+)", code)]
            with self.subTest(query=str(path.relative_to(QUERIES))):
                self.assertEqual(sorted(set(numbered)), list(range(1, max(numbered, default=0) + 1)),
                                 "placeholders are numbered from ?1 without a gap")
                self.assertNotIn("?", re.sub(r"\?\d+", "", re.sub(r"'[^']*'", "", code)),
                                 "every placeholder is numbered")
                self.conn.execute("EXPLAIN " + sql, [None] * max(numbered, default=0))


# =============================================================================================
# The runner statements that apply the protocol's runner machine: for a runner in every state,
# which rows change and how, column by column
# =============================================================================================


class RunnerMachineStatementTests(SchemaTest):
    COLUMNS = ("state", "state_reason", "active_claims", "credential_generation", "approved_at", "revoked_at",
               "key_id", "last_seen_at", "updated_at")

    def setUp(self):
        super().setUp()
        self.org = self.w.org()

    def runner_in(self, state):
        """A runner in `state` holding one claim, its generation moved on once, a reason on
        record, and every time column at a distinct past value."""
        common = {"active_claims": 1, "credential_generation": 2, "state_reason": "before",
                  "last_seen_at": NOW - 2, "updated_at": NOW - 1}
        if state == "pending_approval":
            return self.w.keypair_runner(self.org, **common)
        extra = {"state": state, "approved_at": NOW - 4}
        if state == "revoked":
            extra["revoked_at"] = NOW - 3
        return self.w.runner(self.org, **common, **extra)

    def row(self, runner):
        values = self.w.one(f"SELECT {', '.join(self.COLUMNS)} FROM runners WHERE id = ?", runner)
        return dict(zip(self.COLUMNS, values))

    def test_the_fixture_covers_every_runner_state(self):
        for state in RUNNER_STATES:
            with self.subTest(state=state):
                self.assertEqual(self.row(self.runner_in(state))["state"], state)
        self.assertRefused(self.runner_in, "retired", message="CHECK constraint failed")

    # -- recover_runner: the lease_lost move, from the runner's live state ---------------------

    def recover(self, runner, reason="job job_1: lease expired"):
        return self.execute(query("recover_runner"), runner, NOW, reason, LEASE_LOST_MOVES,
                            LEASE_LOST_RETIRING).rowcount

    def test_recovery_marks_only_an_active_runner_lost_and_frees_capacity_in_every_state(self):
        for state in RUNNER_STATES:
            with self.subTest(state=state):
                runner = self.runner_in(state)
                before = self.row(runner)
                self.assertEqual(self.recover(runner), 1)
                expected = dict(before, active_claims=0, updated_at=NOW)
                if state == "active":
                    expected.update(state="lost", state_reason="job job_1: lease expired",
                                    credential_generation=before["credential_generation"] + 1)
                self.assertEqual(self.row(runner), expected)

    def test_a_second_lost_lease_keeps_the_lost_runners_generation_and_first_reason(self):
        runner = self.runner_in("active")
        self.execute("UPDATE runners SET active_claims = 2, max_concurrent_jobs = 2 WHERE id = ?", runner)
        self.recover(runner, "job job_1: lease expired")
        self.recover(runner, "job job_2: lease expired")
        row = self.row(runner)
        self.assertEqual((row["state"], row["state_reason"], row["credential_generation"], row["active_claims"]),
                         ("lost", "job job_1: lease expired", 3, 0))

    # -- record_session: the session_proven move, guarded by who may authenticate -------------

    def session(self, runner, generation=2):
        return self.execute(query("record_session"), runner, NOW, generation, "kid-new", AUTHENTICATING_STATES,
                            SESSION_PROVEN_MOVES, SESSION_REASON).rowcount

    def test_a_session_returns_only_a_lost_runner_to_active_and_pending_or_revoked_ones_get_none(self):
        for state in RUNNER_STATES:
            with self.subTest(state=state):
                runner = self.runner_in(state)
                before = self.row(runner)
                if state in ("pending_approval", "revoked"):
                    self.assertEqual(self.session(runner), 0)
                    self.assertEqual(self.row(runner), before)
                    continue
                self.assertEqual(self.session(runner), 1)
                expected = dict(before, key_id="kid-new", last_seen_at=NOW, updated_at=NOW)
                if state == "lost":
                    expected.update(state="active", state_reason=SESSION_REASON)
                self.assertEqual(self.row(runner), expected)

    def test_a_session_decided_on_a_retired_generation_changes_nothing_in_any_state(self):
        for state in RUNNER_STATES:
            with self.subTest(state=state):
                runner = self.runner_in(state)
                before = self.row(runner)
                self.assertEqual(self.session(runner, generation=1), 0)
                self.assertEqual(self.row(runner), before)

    # -- change_runner_state: an admin's move, decided in Rust, guarded by its from-state -----

    def change(self, runner, move):
        from_state, _command, to, approves, revokes, retires = move
        return self.execute(query("change_runner_state"), self.org, runner, from_state, to, "operator", NOW,
                            None, NOW if approves else None, NOW if revokes else None, int(retires)).rowcount

    def test_every_admin_move_writes_exactly_its_stamps(self):
        for move in ADMIN_MOVES:
            from_state, command, to, approves, revokes, retires = move
            with self.subTest(from_state=from_state, command=command):
                runner = self.runner_in(from_state)
                before = self.row(runner)
                self.assertEqual(self.change(runner, move), 1)
                expected = dict(before, state=to, state_reason="operator", updated_at=NOW)
                if approves:
                    expected["approved_at"] = NOW
                if revokes:
                    expected["revoked_at"] = NOW
                if retires:
                    expected["credential_generation"] = before["credential_generation"] + 1
                self.assertEqual(self.row(runner), expected)

    def test_an_admin_move_decided_from_another_state_changes_nothing(self):
        for state in RUNNER_STATES:
            runner = self.runner_in(state)
            before = self.row(runner)
            for move in ADMIN_MOVES:
                if move[0] == state:
                    continue
                with self.subTest(state=state, move=move[:2]):
                    self.assertEqual(self.change(runner, move), 0)
                    self.assertEqual(self.row(runner), before)

    def test_an_approval_sets_the_key_id_it_is_given_and_keeps_it_otherwise(self):
        runner = self.runner_in("pending_approval")
        self.execute(query("change_runner_state"), self.org, runner, "pending_approval", "active", "ok", NOW,
                     "kid-approved", NOW, None, 0)
        self.assertEqual(self.row(runner)["key_id"], "kid-approved")
        self.change(runner, ADMIN_MOVES[2])  # active → draining, no key id
        self.assertEqual(self.row(runner)["key_id"], "kid-approved")


# =============================================================================================
# Archive on finish (migration 0010): a finished job's rows go only once its archive is
# stored, in bounded batches, down to the job row and its evidence custody
# =============================================================================================

TERMINAL = ("succeeded", "failed", "cancelled")
# A prune batch, in its order (store::archive::prune_batch).
# usage/job_pruned.sql before migration 0018, when a pruned job's row stayed in jobs whole.
LEGACY_JOB_PRUNED = """
UPDATE organization_usage
   SET jobs_live = jobs_live - 1, jobs_archived = jobs_archived + 1,
       d1_bytes = max(0, d1_bytes - (SELECT coalesce(stream_bytes, 0) + coalesce(stream_chunks, 0) * ?3
                                       FROM jobs WHERE id = ?2 AND organization_id = ?1))
 WHERE organization_id = ?1 AND changes() = 1
"""
# usage/evidence_freed.sql before migration 0019, when an archived job's run was held in
# completion_evidence as a live job's is.
LEGACY_EVIDENCE_FREED = """
UPDATE organization_usage
   SET d1_bytes = max(0, d1_bytes - (
           WITH runs AS (SELECT evidence_id AS id FROM completion_evidence
                          WHERE job_id = ?2 AND organization_id = ?1 AND evidence_kind = 'evaluation_run')
           SELECT (SELECT coalesce(sum(bytes), 0) FROM evaluation_run_bytes WHERE id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM test_result_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM cost_record_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM model_call_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))
                + (SELECT coalesce(sum(bytes), 0) FROM trace_bytes WHERE evaluation_run_id IN (SELECT id FROM runs))))
 WHERE organization_id = ?1 AND changes() = 1
"""
# archive/move_job.sql before migration 0019, when the run's custody row stayed behind.
LEGACY_MOVE_JOB = """
INSERT INTO archived_jobs (id, organization_number, idempotency_key, intent_hash,
    subject_version_id, subject_environment, requirements_id, input_hash, state,
    dispatch_attempt, released_attempts, cancel_reason, created_at, updated_at, finished_at,
    archived_at, bundle_sha256, bundle_bytes, stream_chunks, stream_bytes, stream_head,
    unstored_decisions, last_unstored_checksum, last_unstored_decision, last_unstored_at,
    held_at, held_by, held_reason, expiring_at)
SELECT j.id, n.number, j.idempotency_key, unhex(j.intent_hash), j.subject_version_id,
       j.subject_environment, d.id, unhex(j.input_hash), j.state, j.dispatch_attempt,
       j.released_attempts, j.cancel_reason, j.created_at, j.updated_at, j.finished_at,
       j.archived_at, unhex(j.bundle_sha256), j.bundle_bytes, j.stream_chunks, j.stream_bytes,
       unhex(j.stream_head), j.unstored_decisions, unhex(j.last_unstored_checksum),
       j.last_unstored_decision, j.last_unstored_at, j.held_at, j.held_by, j.held_reason,
       j.expiring_at
  FROM jobs AS j
  JOIN organization_numbers AS n ON n.organization_id = j.organization_id
  JOIN requirement_documents AS d ON d.organization_number = n.number AND d.document = j.requirements
 WHERE j.id = ?1 AND j.organization_id = ?2 AND j.archive_state = 'pruned'
"""
PRUNE_STATEMENTS = (query("archive_prune_chunks"), query("archive_prune_completions"),
                    query("archive_prune_events"), query("archive_prune_claims"))


class ArchiveWorld(SchemaTest):
    """Finished jobs and the archive statements, for the archive and retention tests."""
    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.runner = self.w.runner(self.org, max_concurrent_jobs=5)
        self.run = self.w.evaluation_run(self.org)

    def finished_job(self, chunks=3, lost_attempt=True, run=None, **job_overrides):
        """A job as the service leaves it: a first attempt lost with a stream, a second that
        streamed and completed with its evaluation run (`run`, or a new one) and a test result
        of it, and a duplicate completion after."""
        w = self.w
        run = run or w.evaluation_run(self.org)
        job = w.job(self.org, **job_overrides)
        if lost_attempt:
            first = w.grant(job, self.runner)
            w.stream(job, first, 1, 2)
            w.reap(job, self.runner)
        claim = w.grant(job, self.runner)
        attempt = 2 if lost_attempt else 1
        head = w.stream(job, claim, attempt, chunks)
        result = w.test_result(self.org, run)
        w.complete(job, claim, self.runner, attempt, final_stream_checksum=head,
                   evaluation_run_id=run, evidence=[("test_result", result)])
        w.complete(job, claim, self.runner, attempt, decision="duplicate", final_stream_checksum=head)
        return job, head

    def counts(self, job):
        return {t: self.w.one(f"SELECT count(*) FROM {t} WHERE job_id = ?", job)[0]
                for t in ("stream_chunks", "job_completions", "job_events", "job_claims", "completion_evidence")}

    def store(self, job, head, completions=None, unstored=0, **overrides):
        chunks, stream_bytes = self.w.one(
            "SELECT count(*), coalesce(sum(length(CAST(payload AS BLOB))), 0) FROM stream_chunks WHERE job_id = ?", job)
        if completions is None:
            completions = self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job)[0]
        params = {"bundle": sha("bundle " + job), "bytes": 4096,
                  "chunks": chunks, "stream_bytes": stream_bytes, "head": head, "at": NOW + 1}
        params.update(overrides)
        stored = self.execute(query("archive_store"), job, self.org, params["bundle"], params["bytes"],
                              params["chunks"], params["stream_bytes"], params["head"],
                              params["at"], completions, unstored).rowcount
        self.w.usage("archive_stored", self.org, params["bytes"])
        return stored

    def counted_batch(self, statements, params):
        """The statements as one D1 batch, each with `params`: the rows each changed."""
        self.conn.execute("BEGIN")
        try:
            changed = [self.conn.execute(sql, params).rowcount for sql in statements]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return changed

    def prune_batch(self, job, limit):
        return self.counted_batch(PRUNE_STATEMENTS, (job, self.org, limit))

    def rebuild_before(self, migration):
        """This test's world again, on the schema as it was before `migration` (its
        organization and a runner in it): the migrations from there on are the test's to apply
        ([`apply_from`]). What the service wrote before that migration is built with the
        statements of its time where they differ ([`mark_pruned`], [`expire`])."""
        self.pending = [m for m in MIGRATIONS if os.path.basename(m) >= migration]
        self.conn.close()
        self.conn = open_database([m for m in MIGRATIONS if m not in self.pending])
        self.w = World(self.conn)
        self.org = self.w.org()
        self.runner = self.w.runner(self.org, max_concurrent_jobs=5)

    def apply_from(self):
        """The migrations [`rebuild_before`] left out, in order."""
        for path in self.pending:
            apply_migration(self.conn, path)

    def has_archived_jobs(self):
        """Whether migration 0018 (archived_jobs) is applied: the tests of earlier migrations
        build their worlds before it."""
        return self.w.one("SELECT count(*) FROM sqlite_schema WHERE name = 'archived_jobs'")[0] == 1

    def mark_pruned(self, job):
        """store::archive::mark_pruned's batch: stage pruned and its counters, then (from
        migration 0018) the row's move to archived_jobs. The rows each statement changed."""
        self.conn.execute("BEGIN")
        try:
            changed = [self.execute(query("archive_mark_pruned"), job, self.org).rowcount]
            if self.has_archived_jobs():
                self.w.usage("job_pruned", self.org, job, CHUNK_ROW_BYTES, JOB_ROW_BYTES - ARCHIVED_JOB_BYTES)
            else:
                self.w.usage_sql(LEGACY_JOB_PRUNED, self.org, job, CHUNK_ROW_BYTES)
            if self.has_archived_jobs():
                changed += [self.execute(LEGACY_MOVE_JOB if step == "legacy_job" else query(f"archive/move_{step}"),
                                         job, self.org).rowcount
                            for step in self.move_steps()]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return changed

    def has_archived_custody(self):
        """Whether migration 0019 is applied: an archived job holds its run in its row."""
        return self.w.one("SELECT count(*) FROM sqlite_schema"
                          " WHERE name = 'archived_jobs_by_custody_run'")[0] == 1

    def move_steps(self):
        """The move's statements (archive/move_*), as the migrations applied have them: from
        0019 the run's custody row goes to the archived row."""
        if self.has_archived_custody():
            return ("requirements", "job", "custody", "delete")
        return ("requirements", "legacy_job", "delete")

    def job_row(self, job, columns):
        """`columns` of the job's row, wherever it is (jobs, or archived_job_rows)."""
        tables = ("jobs", "archived_job_rows") if self.has_archived_jobs() else ("jobs",)
        rows = [row for table in tables
                for row in self.conn.execute(f"SELECT {columns} FROM {table} WHERE id = ?", (job,))]
        self.assertLessEqual(len(rows), 1)
        return rows[0] if rows else None


class ArchiveTests(ArchiveWorld):
    def test_no_row_of_a_job_goes_before_its_archive_is_stored(self):
        _, _, live, live_claim = self.claimed_job(org=self.org, runner=self.runner)
        self.w.stream(live, live_claim, 1, 2)
        finished, _ = self.finished_job()
        for job in (live, finished):
            for table, message in (("stream_chunks", "stream_chunks_are_immutable"),
                                   ("job_completions", "job_completions_are_append_only"),
                                   ("job_events", "job_events_are_append_only"),
                                   ("job_claims", "claim_is_over")):
                if not self.w.one(f"SELECT count(*) FROM {table} WHERE job_id = ?", job)[0]:
                    continue
                with self.subTest(job=job, table=table):
                    self.assertRefused(self.execute, f"DELETE FROM {table} WHERE job_id = ?", job, message=message)
            with self.subTest(job=job, batch="prune"):
                self.assertRefused(self.prune_batch, job, 500)
        # Custody never goes, archived or not.
        self.assertRefused(self.execute, "DELETE FROM completion_evidence WHERE job_id = ?", finished,
                           message="evidence_custody_is_permanent")

    def test_only_a_finished_job_is_stored_and_only_with_its_whole_summary(self):
        _, _, live, claim = self.claimed_job(org=self.org, runner=self.runner)
        self.assertEqual(self.store(live, None), 0)  # the statement's guard: not finished
        self.assertRefused(self.execute, "UPDATE jobs SET archive_state = 'stored', bundle_sha256 = ?,"
                           " bundle_bytes = 1, stream_chunks = 0, stream_bytes = 0,"
                           " archived_at = ? WHERE id = ?", sha("b"), NOW, live,
                           message="job_archive_incomplete")
        job, head = self.finished_job()
        for missing in ("bundle_sha256", "bundle_bytes", "stream_chunks", "stream_bytes", "archived_at"):
            with self.subTest(missing=missing):
                self.assertRefused(self.execute, f"UPDATE jobs SET archive_state = 'stored', {missing} = NULL"
                                   " WHERE id = ?", job, message="job_archive_incomplete")
        # A stream head exactly when the stream has chunks.
        self.assertRefused(self.store, job, None, message="job_archive_incomplete")
        self.assertRefused(self.store, job, head, chunks=0, message="job_archive_incomplete")
        # A summary without its stage is refused too; a stage the schema does not know is.
        self.assertRefused(self.execute, "UPDATE jobs SET bundle_sha256 = ? WHERE id = ?", sha("b"), job,
                           message="job_archive_is_final")
        self.assertRefused(self.execute, "UPDATE jobs SET archive_state = 'archived', bundle_sha256 = ?,"
                           " bundle_bytes = 1, stream_chunks = 5, stream_bytes = 1,"
                           " stream_head = ?, archived_at = ? WHERE id = ?", sha("b"), head, NOW, job,
                           message="CHECK constraint failed")
        for column, bad, stream_head in (("bundle", "ABC", head), ("bundle", sha("b").upper(), head),
                                         ("bytes", 0, head), ("chunks", -1, None), ("stream_bytes", -1, head)):
            with self.subTest(column=column):
                self.assertRefused(self.store, job, stream_head, **{column: bad}, message="CHECK constraint failed")
        self.assertRefused(self.store, job, "x" * 64, message="CHECK constraint failed")
        self.assertEqual(self.store(job, head), 1)
        self.assertEqual(self.w.one("SELECT archive_state, stream_head FROM jobs WHERE id = ?", job),
                         ("stored", head))

    def test_the_store_is_guarded_by_the_decisions_its_bundle_was_read_with(self):
        job, head = self.finished_job()
        stored = self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job)[0]
        # A decision recorded after the bundle was read (stored, or counted on the row).
        self.assertEqual(self.store(job, head, completions=stored - 1), 0)
        self.assertEqual(self.store(job, head, unstored=1), 0)
        self.assertEqual(self.w.one("SELECT archive_state FROM jobs WHERE id = ?", job)[0], None)
        self.assertEqual(self.store(job, head), 1)
        # Storing again changes nothing (the stage guard), and the summary is final.
        self.assertEqual(self.store(job, head), 0)
        self.assertRefused(self.execute, "UPDATE jobs SET bundle_bytes = 1 WHERE id = ?", job,
                           message="job_archive_is_final")
        self.assertRefused(self.execute, "UPDATE jobs SET archive_state = NULL WHERE id = ?", job,
                           message="job_archive_is_final")

    def test_a_stored_job_is_pruned_in_bounded_batches_down_to_its_row_and_custody(self):
        job, head = self.finished_job(chunks=7)
        other, _ = self.finished_job()
        other_before = self.counts(other)
        before = self.counts(job)
        self.assertEqual(before, {"stream_chunks": 9, "job_completions": 2, "job_events": before["job_events"],
                                  "job_claims": 2, "completion_evidence": 2})
        self.assertGreater(before["job_events"], 3)
        self.assertEqual(self.store(job, head), 1)
        # Not pruned while anything is left.
        self.assertRefused(self.execute, query("archive_mark_pruned"), job, self.org, message="job_rows_remain")
        limit = 3
        batches = []
        for _ in range(20):  # bounded: 9 chunks at 3 a batch need 3 full batches and a short one
            deleted = self.prune_batch(job, limit)
            batches.append(deleted)
            if all(n < limit for n in deleted):  # archive::after_prune_batch
                break
        self.assertTrue(all(n <= limit for b in batches for n in b), batches)
        self.assertEqual(batches[0], [3, 2, 3, 0])  # claims wait for what names them
        self.assertEqual(sum(b[0] for b in batches), 9)
        self.assertEqual(sum(b[3] for b in batches), 2)
        self.assertEqual(self.execute(query("archive_mark_pruned"), job, self.org).rowcount, 1)
        self.assertEqual(self.counts(job), {"stream_chunks": 0, "job_completions": 0, "job_events": 0,
                                            "job_claims": 0, "completion_evidence": 2})
        # Running a step twice changes nothing: a batch finds nothing, the stage is pruned.
        self.assertEqual(self.prune_batch(job, limit), [0, 0, 0, 0])
        self.assertEqual(self.execute(query("archive_mark_pruned"), job, self.org).rowcount, 0)
        self.assertEqual(self.store(job, head, completions=0), 0)
        self.assertEqual(self.w.one("SELECT archive_state FROM jobs WHERE id = ?", job)[0], "pruned")
        self.assertRefused(self.execute, "UPDATE jobs SET archive_state = 'stored' WHERE id = ?", job,
                           message="job_archive_is_final")
        # Another job of the organization is untouched, and every key still holds.
        self.assertEqual(self.counts(other), other_before)
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])

    def test_statements_are_scoped_to_the_jobs_organization(self):
        job, head = self.finished_job()
        stranger = self.w.org()
        completions = self.w.one("SELECT count(*) FROM job_completions WHERE job_id = ?", job)[0]
        self.assertEqual(self.execute(query("archive_store"), job, stranger, sha("b"), 1, 5,
                                      10, head, NOW, completions, 0).rowcount, 0)
        self.assertEqual(self.store(job, head), 1)
        for sql in PRUNE_STATEMENTS:
            with self.subTest(sql=sql):
                self.assertEqual(self.execute(sql, job, stranger, 500).rowcount, 0)
        self.assertEqual(self.execute(query("archive_mark_pruned"), job, stranger).rowcount, 0)

    def test_an_archived_job_takes_no_new_rows_but_counts_late_decisions(self):
        job, head = self.finished_job()
        claim = self.w.one("SELECT id FROM job_claims WHERE job_id = ? AND dispatch_attempt = 2", job)[0]
        self.assertEqual(self.store(job, head), 1)
        late = self.w.completion_row(job, claim, self.runner, 2, decision="duplicate", final_stream_checksum=head)
        self.assertRefused(self.w.insert, "job_completions", late, message="job_is_archived")
        self.assertRefused(self.w.insert, "job_events", {
            "organization_id": self.org, "job_id": job, "actor": "runner:" + self.runner,
            "type": "job.completion_duplicate", "at": NOW}, message="job_is_archived")
        # The row's counters still move: that is how a late decision is recorded.
        self.execute("UPDATE jobs SET unstored_decisions = unstored_decisions + 1, last_unstored_checksum = ?,"
                     " last_unstored_decision = 'duplicate', last_unstored_at = ? WHERE id = ?",
                     late["completion_checksum"], NOW + 5, job)
        self.assertEqual(self.w.one("SELECT unstored_decisions, archive_state FROM jobs WHERE id = ?", job),
                         (1, "stored"))
        # Events without a job (the audit trail) are still written.
        self.w.insert("job_events", {"organization_id": self.org, "runner_id": self.runner,
                                     "actor": "system:reaper", "type": "runner.drained", "at": NOW})

    def test_custody_outlives_the_completion_row(self):
        job, head = self.finished_job(run=self.run)
        self.assertEqual(self.store(job, head), 1)
        for _ in range(10):
            if all(n < 500 for n in self.prune_batch(job, 500)):
                break
        self.assertEqual(self.execute(query("archive_mark_pruned"), job, self.org).rowcount, 1)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_completions WHERE evaluation_run_id = ?",
                                    self.run)[0], 0)
        # The run is still in custody: no row joins it, and no other completion takes it.
        for add in (self.w.test_result, self.w.cost_record, self.w.model_call, self.w.trace):
            with self.subTest(add=add.__name__):
                self.assertRefused(add, self.org, self.run, message="evidence_run_in_custody")
        _, _, other, other_claim = self.claimed_job(org=self.org, runner=self.runner)
        self.assertRefused(self.w.complete, other, other_claim, self.runner, 1, evaluation_run_id=self.run,
                           message="UNIQUE constraint failed: completion_evidence")
        held = self.conn.execute(query("evidence_holder"),
                                 (self.org, json.dumps([["evaluation_run", self.run]]))).fetchall()
        self.assertEqual(held, [("evaluation_run", self.run, job)])

    def test_the_archive_pass_finds_due_jobs_oldest_first_through_its_index(self):
        first, head_first = self.finished_job(lost_attempt=False)
        second, _ = self.finished_job(lost_attempt=False)
        self.execute("UPDATE jobs SET finished_at = ? WHERE id = ?", NOW - 10, second)
        _, _, live, _ = self.claimed_job(org=self.org, runner=self.runner)
        due = self.execute(query("archive_due"), NOW, 10).fetchall()
        self.assertEqual([row[0] for row in due], [second, first])
        self.assertEqual(due[0][1:], (self.org, "succeeded", NOW - 10, None))
        self.assertEqual([r[0] for r in self.execute(query("archive_due"), NOW - 1, 10).fetchall()], [second])
        self.assertEqual(len(self.execute(query("archive_due"), NOW, 1).fetchall()), 1)
        # A stored job stays due until it is pruned.
        self.assertEqual(self.store(first, head_first), 1)
        self.assertEqual([r[4] for r in self.execute(query("archive_due"), NOW, 10).fetchall()],
                         [None, "stored"])
        plan = " ".join(query_plan(self.conn, query("archive_due"), (NOW, 10)))
        self.assertIn("jobs_to_archive", plan)
        self.assertNotIn("TEMP B-TREE", plan)

    def test_deleting_a_claim_looks_up_what_names_it_by_index(self):
        # SQLite checks each foreign key naming a deleted claim with these lookups.
        for sql, index in (("SELECT 1 FROM job_events WHERE claim_id = ?", "job_events_by_claim"),
                           ("SELECT 1 FROM jobs WHERE active_claim_id = ?", "jobs_by_active_claim"),
                           ("SELECT 1 FROM stream_chunks WHERE claim_id = ? AND job_id = ? AND dispatch_attempt = ?",
                            "sqlite_autoindex_stream_chunks_1"),
                           # By its job, or (migration 0020) by its runner: a few rows either way,
                           # both pruned with the job's archive.
                           ("SELECT 1 FROM job_completions WHERE claim_id = ? AND job_id = ? AND dispatch_attempt = ?"
                            " AND runner_id = ?", ("job_completions_by_job", "job_completions_by_runner"))):
            with self.subTest(index=index):
                params = (None,) * sql.count("?")
                plan = " ".join(query_plan(self.conn, sql, params))
                self.assertTrue(any(name in plan for name in ((index,) if isinstance(index, str) else index)),
                                plan)
                self.assertNotIn("SCAN", plan)
        for sql in PRUNE_STATEMENTS:
            with self.subTest(statement=sql):
                self.assertNotIn("SCAN", " ".join(query_plan(self.conn, sql, ("j", "o", 500))))

    def test_migration_0010_keeps_every_custody_row_and_the_runs_in_custody(self):
        before = [p for p in MIGRATIONS if os.path.basename(p) < "0010"]
        archive = next(p for p in MIGRATIONS if os.path.basename(p).startswith("0010"))
        conn = open_database(before)
        w = World(conn)
        org = w.org()
        runner = w.runner(org, max_concurrent_jobs=5)
        run = w.evaluation_run(org)
        job = w.job(org)
        claim = w.grant(job, runner)
        head = w.stream(job, claim, 1, 2)
        w.complete(job, claim, runner, 1, final_stream_checksum=head, evaluation_run_id=run,
                   evidence=[("test_result", w.test_result(org, run)), ("cost_record", w.cost_record(org, run))])
        custody = conn.execute("SELECT * FROM completion_evidence ORDER BY rowid").fetchall()
        self.assertEqual(len(custody), 3)

        apply_migration(conn, archive)

        self.assertEqual(conn.execute("SELECT * FROM completion_evidence ORDER BY rowid").fetchall(), custody)
        self.assertEqual(conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        self.assertEqual(conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'kept_%'").fetchall(), [])
        self.assertRaises(sqlite3.IntegrityError, w.test_result, org, run)
        self.assertEqual(conn.execute("SELECT archive_state FROM jobs WHERE id = ?", (job,)).fetchone(), (None,))
        conn.close()


# =============================================================================================
# Retention (migration 0011): hold, expiry, and deletion with the job's evidence
# =============================================================================================

# The protocol's terminal states as the worker binds them into the hold statement.
TERMINAL_STATES = '["succeeded","failed","cancelled"]'
RETENTION_EVIDENCE_DELETES = tuple(query(f"retention/delete_{table}")
                                   for table in ("test_results", "cost_records", "model_calls", "traces"))
# The deletion batch (store::retention::delete_job), each statement with its parameters from
# (job, organization): from migration 0018 the archived row goes, with its requirements document
# when no other archived job names it.
RETENTION_JOB_DELETE = tuple((query(name), params) for name, params in (
    ("retention/count_deleted", lambda job, org: (job, org)),
    ("usage/job_deleted", lambda job, org: (job, org, ARCHIVED_JOB_BYTES)),
    ("retention/delete_runs", lambda job, org: (job, org)),
    ("retention/delete_custody", lambda job, org: (job, org)),
    ("retention/release_requirements", lambda job, org: (job, org)),
    ("retention/delete_job", lambda job, org: (job, org)),
    ("retention/drop_requirements", lambda job, org: (org,))))
# Its statement that deletes the job's row.
DELETES_THE_JOB = 5


class RetentionWorld(ArchiveWorld):
    """Archived jobs and the retention statements, for the retention and usage tests."""
    def archived_job(self, run=None, **job_overrides):
        """A finished job, stored and pruned, with its run and a test result in custody."""
        job, head = self.finished_job(run=run, **job_overrides)
        self.assertEqual(self.store(job, head), 1)
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.prune_batch(job, 500)):
                break
        self.assertEqual(self.mark_pruned(job)[0], 1)
        return job

    def hold(self, job, by="admin:key_1", reason="an audit", org=None):
        """store::retention::hold's writes: of jobs, then (from 0018) of archived_jobs, each
        with its counter; the rows they changed together."""
        org = org or self.org
        held = 0
        for name in ("hold", "hold_archived") if self.has_archived_jobs() else ("hold",):
            held += self.execute(query(f"retention/{name}"), job, org, NOW + 5, by, TERMINAL_STATES,
                                 reason).rowcount
            self.w.usage("job_held", org, 1)
        return held

    def release(self, job, org=None):
        org = org or self.org
        released = 0
        for name in ("release", "release_archived") if self.has_archived_jobs() else ("release",):
            released += self.execute(query(f"retention/{name}"), job, org).rowcount
            self.w.usage("job_held", org, -1)
        return released

    def expire(self, job, cut=NOW + 1):
        """1 when the job was marked (its row returned as the deletion needs it), else 0."""
        expire = query("retention/expire") if self.has_archived_jobs() else (
            # What the pass ran before migration 0018, when archived jobs stayed in jobs.
            "UPDATE jobs SET expiring_at = ?3 WHERE id = ?1 AND organization_id = ?2"
            " AND archive_state = 'pruned' AND held_at IS NULL AND expiring_at IS NULL"
            " AND finished_at < ?4 RETURNING id, organization_id, bundle_sha256")
        returned = self.execute(expire, job, self.org, NOW + 10, cut).fetchall()
        self.w.usage("job_expiring", self.org)
        if self.has_archived_custody():
            self.w.usage("evidence_freed", self.org, job)
        else:
            self.w.usage_sql(LEGACY_EVIDENCE_FREED, self.org, job)
        if returned:
            bundle = self.job_row(job, "bundle_sha256")[0]
            self.assertEqual(returned, [(job, self.org, bundle)])
        return len(returned)

    def delete_evidence(self, job, limit):
        return self.counted_batch(RETENTION_EVIDENCE_DELETES, (job, self.org, limit))

    def delete_expiring_job(self, job):
        """An expiring job's evidence in bounded batches, then its deletion batch: the rows
        that batch changed."""
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.delete_evidence(job, 500)):
                break
        return self.delete_job(job)

    def delete_job(self, job):
        self.conn.execute("BEGIN")
        try:
            changed = [self.conn.execute(sql, params(job, self.org)).rowcount
                       for sql, params in RETENTION_JOB_DELETE]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return changed



class RetentionTests(RetentionWorld):
    def test_an_organization_keeps_jobs_90_days_by_default_and_from_1_to_400(self):
        self.assertEqual(self.w.one("SELECT retention_days, retention_deleted_jobs FROM organizations"
                                    " WHERE id = ?", self.org), (90, 0))
        for days in (1, 400):
            self.execute("UPDATE organizations SET retention_days = ? WHERE id = ?", days, self.org)
        for days in (0, 401, None):
            with self.subTest(days=days):
                self.assertRefused(self.execute, "UPDATE organizations SET retention_days = ? WHERE id = ?",
                                   days, self.org)

    def test_only_a_finished_job_that_is_not_expiring_is_held_and_released(self):
        _, _, live, _ = self.claimed_job(org=self.org, runner=self.runner)
        self.assertEqual(self.hold(live), 0)
        self.assertRefused(self.execute, "UPDATE jobs SET held_at = ?, held_by = 'x' WHERE id = ?", NOW, live,
                           message="job_hold_needs_a_finished_job")
        # A finished job, not yet archived, is held where it is, and its hold moves with it.
        finished, head = self.finished_job()
        self.assertEqual(self.hold(finished), 1)
        self.assertEqual(self.store(finished, head), 1)
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.prune_batch(finished, 500)):
                break
        self.assertEqual(self.mark_pruned(finished), [1, 1, 1, 1, 1])
        self.assertEqual(self.job_row(finished, "held_at, held_by, held_reason"),
                         (NOW + 5, "admin:key_1", "an audit"))
        job = self.archived_job()
        self.assertRefused(self.execute, "UPDATE archived_jobs SET held_at = ? WHERE id = ?", NOW, job,
                           message="CHECK constraint failed")
        self.assertEqual(self.hold(job), 1)
        self.assertEqual(self.hold(job), 0)  # held already: nothing changes
        self.assertEqual(self.job_row(job, "held_at, held_by, held_reason"),
                         (NOW + 5, "admin:key_1", "an audit"))
        # A reason only with a hold.
        self.assertRefused(self.execute, "UPDATE jobs SET held_reason = 'x' WHERE id = ?", live,
                           message="job_hold_reason_needs_a_hold")
        # Held: never due, never expired, by the statement or by hand.
        self.assertEqual(self.execute(query("retention/due"), self.org, NOW + 1, 10).fetchall(), [])
        self.assertEqual(self.expire(job), 0)
        self.assertRefused(self.execute, "UPDATE archived_jobs SET expiring_at = ? WHERE id = ?", NOW, job,
                           message="CHECK constraint failed")
        self.assertEqual(self.release(job), 1)
        self.assertEqual(self.job_row(job, "held_at, held_by, held_reason"), (None, None, None))
        self.assertEqual(self.release(job), 0)
        # Another organization's admin holds nothing of this one, live or archived.
        other = self.w.org()
        self.assertEqual(self.hold(job, org=other), 0)
        self.assertEqual(self.hold(finished, org=other), 0)

    def test_only_an_archived_unheld_job_finished_before_the_cut_expires_and_for_good(self):
        unarchived, head = self.finished_job()
        self.assertEqual(self.expire(unarchived), 0)
        self.assertRefused(self.execute, "UPDATE jobs SET expiring_at = ? WHERE id = ?", NOW, unarchived,
                           message="job_expiry_needs_an_archived_unheld_job")
        job = self.archived_job()
        due = query("retention/due")
        # Finished at NOW: not before a cut at NOW, before one at NOW + 1.
        self.assertEqual(self.execute(due, self.org, NOW, 10).fetchall(), [])
        self.assertEqual(self.expire(job, cut=NOW), 0)
        self.assertEqual(self.execute(due, self.org, NOW + 1, 10).fetchall(), [(job, self.org, NOW + 1)])
        self.assertEqual(self.execute(due, self.w.org(), NOW + 1, 10).fetchall(), [])
        self.assertEqual(self.expire(job), 1)
        self.assertEqual(self.expire(job), 0)
        self.assertEqual(self.execute(due, self.org, NOW + 1, 10).fetchall(), [])
        bundle = self.job_row(job, "bundle_sha256")[0]
        self.assertEqual(self.execute(query("retention/expiring"), self.org, 10).fetchall(),
                         [(job, self.org, bundle)])
        self.assertEqual(self.execute(query("retention/expiring_all"), 10).fetchall(), [(job, self.org, bundle)])
        # Final: not moved, not cleared; an expiring job is not held.
        for value in (NOW + 99, None):
            self.assertRefused(self.execute, "UPDATE archived_jobs SET expiring_at = ? WHERE id = ?", value, job,
                               message="job_expiry_is_final")
        self.assertEqual(self.hold(job), 0)
        self.assertRefused(self.execute, "UPDATE archived_jobs SET held_at = ?, held_by = 'x' WHERE id = ?",
                           NOW, job, message="job_expiry_is_final")

    def test_nothing_of_a_job_is_deleted_before_it_expires(self):
        run = self.w.evaluation_run(self.org)
        job = self.archived_job(run=run)
        result = self.w.one("SELECT id FROM test_results WHERE evaluation_run_id = ?", run)[0]
        self.assertRefused(self.execute, "DELETE FROM test_results WHERE id = ?", result,
                           message="evidence_run_in_custody")
        self.assertRefused(self.execute, "DELETE FROM evaluation_runs WHERE id = ?", run,
                           message="evidence_run_in_custody")
        self.assertRefused(self.execute, "DELETE FROM completion_evidence WHERE job_id = ?", job,
                           message="evidence_custody_is_permanent")
        self.assertRefused(self.delete_evidence, job, 10, message="evidence_run_in_custody")
        self.assertRefused(self.delete_job, job, message="evidence_run_in_custody")
        self.assertEqual(self.w.one("SELECT retention_deleted_jobs FROM organizations WHERE id = ?", self.org)[0], 0)
        # A run in no custody is the organization's to keep or delete.
        free = self.w.evaluation_run(self.org)
        self.execute("DELETE FROM evaluation_runs WHERE id = ?", free)

    def test_an_expiring_job_goes_with_its_evidence_in_bounded_batches_and_is_counted_once(self):
        run = self.w.evaluation_run(self.org)
        for _ in range(4):
            self.w.test_result(self.org, run)
        job = self.archived_job(run=run)
        other_run = self.w.evaluation_run(self.org)
        other = self.archived_job(run=other_run)
        other_before = (self.counts(other), self.w.one("SELECT count(*) FROM test_results"
                                                        " WHERE evaluation_run_id = ?", other_run)[0])
        self.assertEqual(self.expire(job), 1)
        # The run's rows first, at most `limit` a batch; then the rest in one batch.
        batches = []
        for _ in range(10):  # bounded: 5 test results at 2 a batch
            deleted = self.delete_evidence(job, 2)
            batches.append(deleted)
            if all(n < 2 for n in deleted):
                break
        self.assertEqual([b[0] for b in batches], [2, 2, 1])
        # The other job names the same requirements document: it stays.
        self.assertEqual(self.delete_job(job), [1, 1, 1, 1, 1, 1, 0])
        for table, key in (("jobs", "id"), ("archived_jobs", "id"), ("completion_evidence", "job_id")):
            self.assertEqual(self.w.one(f"SELECT count(*) FROM {table} WHERE {key} = ?", job)[0], 0)
        self.assertEqual(self.w.one("SELECT count(*) FROM evaluation_runs WHERE id = ?", run)[0], 0)
        self.assertEqual(self.w.one("SELECT retention_deleted_jobs FROM organizations WHERE id = ?", self.org)[0], 1)
        # Run again (a pass that stopped after the batch): nothing changes, nothing is counted.
        self.assertEqual(self.delete_evidence(job, 2), [0, 0, 0, 0])
        self.assertEqual(self.delete_job(job), [0, 0, 0, 0, 0, 0, 0])
        self.assertEqual(self.w.one("SELECT retention_deleted_jobs FROM organizations WHERE id = ?", self.org)[0], 1)
        # The other job, its run and its custody are untouched; every key holds.
        self.assertEqual((self.counts(other), self.w.one("SELECT count(*) FROM test_results"
                                                         " WHERE evaluation_run_id = ?", other_run)[0]),
                         other_before)
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])

    def test_a_job_row_goes_only_after_its_custody(self):
        job = self.archived_job()
        self.assertEqual(self.expire(job), 1)
        self.assertRefused(self.execute, query("retention/delete_job"), job, self.org,
                           message="job_delete_needs_expiry")

    def test_the_cron_pass_finds_each_organizations_due_jobs_by_its_own_cut(self):
        kept_long = self.w.org()
        self.execute("UPDATE organizations SET retention_days = 400 WHERE id = ?", kept_long)
        job = self.archived_job()  # self.org keeps 90 days
        due_all = query("retention/due_all")
        day = 86_400_000
        self.assertEqual(self.execute(due_all, NOW + 90 * day, 10).fetchall(), [])
        self.assertEqual(self.execute(due_all, NOW + 90 * day + 1, 10).fetchall(),
                         [(job, self.org, NOW + 1)])
        # A held job is not due; the limit holds.
        self.assertEqual(self.hold(job), 1)
        self.assertEqual(self.execute(due_all, NOW + 400 * day, 10).fetchall(), [])
        self.assertEqual(self.release(job), 1)
        self.assertEqual(self.execute(due_all, NOW + 400 * day, 0).fetchall(), [])

    def test_the_retention_reads_go_through_their_indexes(self):
        for _ in range(3):
            self.archived_job()
        # Each walks or searches its index (the cron's walk of every organization's, one
        # organization at a time; the expiring ones, which are only those being deleted).
        for name, params, step in (
                ("due_all", (NOW, 10), "SEARCH a USING INDEX archived_jobs_to_expire"),
                ("expiring_all", (10,), "SCAN a USING INDEX archived_jobs_expiring"),
                ("due", (self.org, NOW + 1, 10), "SEARCH a USING INDEX archived_jobs_to_expire"),
                ("expiring", (self.org, 10), "SEARCH a USING INDEX archived_jobs_expiring"),
                ("expire", ("job_1", self.org, NOW, NOW), "SEARCH archived_jobs USING INDEX sqlite_autoindex_archived_jobs_1"),
                ("drop_requirements", (self.org,), "SEARCH requirement_documents USING INDEX requirement_documents_unused")):
            plan = " ".join(query_plan(self.conn, query(f"retention/{name}"), params))
            self.assertIn(step, plan, name)
            self.assertNotIn("SCAN archived_jobs", plan, name)


class UsageTests(RetentionWorld):
    """Migration 0014: the counters the usage view reads follow every job through its life,
    and always equal a count of the jobs table (what the view must never do per call)."""

    COUNTERS = ("jobs_live", "jobs_archived", "jobs_expiring", "jobs_held", "r2_objects", "r2_bytes",
                "d1_bytes")

    def counters(self, org=None):
        return dict(zip(self.COUNTERS, self.w.one(
            f"SELECT {', '.join(self.COUNTERS)} FROM organization_usage WHERE organization_id = ?",
            org or self.org)))

    def recount(self, org=None):
        org = org or self.org
        # Every job of the organization, live or archived, with what migration 0015's estimate
        # charges for its row: a live row, or (migration 0018) an archived one and its document.
        everywhere = (
            "SELECT archive_state, expiring_at, held_at, bundle_bytes,"
            "       ? + length(CAST(input AS BLOB)) + length(CAST(requirements AS BLOB)) AS charge"
            "  FROM jobs WHERE organization_id = ?")
        params = [JOB_ROW_BYTES, org]
        if self.has_archived_jobs():
            everywhere += (
                " UNION ALL SELECT archive_state, expiring_at, held_at, bundle_bytes,"
                "       ? + length(CAST(requirements AS BLOB))"
                "  FROM archived_job_rows WHERE organization_id = ?")
            params += [ARCHIVED_JOB_BYTES, org]
        one = lambda column, where: self.w.one(
            f"SELECT coalesce({column}, 0) FROM ({everywhere}) WHERE {where}", *params)[0]
        expiring = ("SELECT id FROM archived_jobs WHERE expiring_at IS NOT NULL" if self.has_archived_jobs()
                    else "SELECT id FROM jobs WHERE expiring_at IS NOT NULL")
        # From migration 0019 an archived job holds its run in its row.
        held_by_expiring = ("SELECT custody_run_id FROM archived_jobs WHERE expiring_at IS NOT NULL"
                            " AND custody_run_id IS NOT NULL" if self.has_archived_custody() else
                            "SELECT NULL WHERE 0")
        return {
            "jobs_live": one("count(*)", "archive_state IS NOT 'pruned' AND expiring_at IS NULL"),
            "jobs_archived": one("count(*)", "archive_state = 'pruned' AND expiring_at IS NULL"),
            "jobs_expiring": one("count(*)", "expiring_at IS NOT NULL"),
            "jobs_held": one("count(*)", "held_at IS NOT NULL"),
            "r2_objects": 2 * one("count(*)", "archive_state IS NOT NULL"),
            "r2_bytes": one("sum(bundle_bytes)", "archive_state IS NOT NULL"),
            # Migration 0015's estimate of what the organization's unbounded writes hold.
            "d1_bytes": one("sum(charge)", "1")
            + self.w.one(
                "SELECT (SELECT coalesce(sum(? + length(CAST(payload AS BLOB))), 0)"
                "          FROM stream_chunks WHERE organization_id = ?2)"
                "     + (SELECT coalesce(sum(? + length(CAST(content AS BLOB))), 0)"
                "          FROM release_versions WHERE organization_id = ?2)",
                CHUNK_ROW_BYTES, org, VERSION_ROW_BYTES)[0]
            # Its evidence, but for what an expiring job's custody holds (freed when marked).
            + sum(self.w.one(
                f"SELECT coalesce(sum(bytes), 0) FROM {view} WHERE organization_id = ?"
                f" AND evaluation_run_id NOT IN (SELECT ce.evidence_id FROM completion_evidence AS ce"
                f"   WHERE ce.evidence_kind = 'evaluation_run' AND ce.job_id IN ({expiring}))"
                f" AND evaluation_run_id NOT IN ({held_by_expiring})", org)[0]
                  for view in ("evaluation_run_bytes", "test_result_bytes", "cost_record_bytes",
                               "model_call_bytes", "trace_bytes")),
        }

    def assertCounted(self, **expected):
        counted = self.counters()
        self.assertEqual(counted, self.recount())
        for name, value in expected.items():
            self.assertEqual(counted[name], value, name)

    def test_migration_0014_counts_what_each_organization_held_before_it(self):
        self.rebuild_before("0014")
        self.w.job(self.org)  # queued
        self.finished_job()  # finished, not archived
        held = self.archived_job()
        self.execute("UPDATE jobs SET held_at = ?, held_by = 'admin:key_1' WHERE id = ?", NOW, held)
        self.archived_job()
        self.assertEqual(self.expire(self.archived_job()), 1)
        empty = self.w.org()
        self.apply_from()
        self.assertCounted(jobs_live=2, jobs_archived=2, jobs_expiring=1, jobs_held=1,
                           r2_objects=6, r2_bytes=3 * 4096)
        self.assertEqual(self.counters(empty), dict.fromkeys(self.COUNTERS, 0))

    def test_every_organization_has_its_counters_from_the_start(self):
        other = self.w.org()
        self.assertEqual(self.counters(other), dict.fromkeys(self.COUNTERS, 0))

    def test_the_counters_follow_a_job_from_enqueue_to_deletion(self):
        self.assertCounted(jobs_live=0)
        job, head = self.finished_job()
        self.assertCounted(jobs_live=1, r2_objects=0)
        self.assertEqual(self.store(job, head), 1)
        self.assertCounted(jobs_live=1, r2_objects=2, r2_bytes=4096)
        self.assertEqual(self.hold(job), 1)
        self.assertCounted(jobs_held=1)
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.prune_batch(job, 500)):
                break
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])
        self.assertCounted(jobs_live=0, jobs_archived=1, jobs_held=1)
        # Applied only after a statement that changed its row: marked again, nothing moves.
        self.assertEqual(self.mark_pruned(job), [0, 0, 0, 0, 0])
        self.assertCounted(jobs_live=0, jobs_archived=1)
        self.assertEqual(self.release(job), 1)
        self.assertCounted(jobs_held=0)
        self.assertEqual(self.expire(job), 1)
        self.assertCounted(jobs_archived=0, jobs_expiring=1, r2_objects=2)
        self.assertEqual(self.delete_expiring_job(job)[DELETES_THE_JOB], 1)
        self.assertCounted(jobs_live=0, jobs_archived=0, jobs_expiring=0, r2_objects=0, r2_bytes=0)
        # Another organization's counters never moved.
        self.assertEqual(self.counters(self.w.org()), dict.fromkeys(self.COUNTERS, 0))

    def test_the_usage_read_counts_due_jobs_to_its_bound_through_indexes(self):
        jobs = [self.archived_job() for _ in range(3)]
        self.assertEqual(self.hold(jobs[0]), 1)
        read = query("usage/read")
        day = 86_400_000
        columns = ("jobs_live", "jobs_archived", "jobs_expiring", "jobs_held", "r2_objects", "r2_bytes",
                   "d1_bytes", "d1_quota_override", "retention_days", "retention_deleted_jobs", "cut",
                   "oldest_job_at", "due_at_cut")
        row = dict(zip(columns, self.execute(read, self.org, NOW + 90 * day + 1, 10_000).fetchone()))
        oldest = self.w.one("SELECT min(created_at) FROM archived_job_rows WHERE organization_id = ?", self.org)[0]
        self.assertEqual(row, {"jobs_live": 0, "jobs_archived": 3, "jobs_expiring": 0, "jobs_held": 1,
                               "r2_objects": 6, "r2_bytes": 3 * 4096, "d1_bytes": self.recount()["d1_bytes"],
                               "d1_quota_override": None, "retention_days": 90,
                               "retention_deleted_jobs": 0, "cut": NOW + 1, "oldest_job_at": oldest,
                               "due_at_cut": 2})
        # Not yet due a millisecond earlier; counted to the bound and no further.
        self.assertEqual(self.execute(read, self.org, NOW + 90 * day, 10_000).fetchone()[-1], 0)
        self.assertEqual(self.execute(read, self.org, NOW + 90 * day + 1, 1).fetchone()[-1], 1)
        self.assertIsNone(self.execute(read, "org_unknown", NOW, 10).fetchone())
        plan = " ".join(query_plan(self.conn, read, (self.org, NOW, 10)))
        for index in ("archived_jobs_to_expire", "jobs_by_organization", "archived_jobs_by_organization"):
            self.assertIn(index, plan)
        self.assertNotIn("SCAN jobs", plan)
        self.assertNotIn("SCAN archived_jobs", plan)


class QuotaTests(RetentionWorld):
    """Migration 0015: an organization's live D1 bytes are charged on the write path and bounded
    by its quota, to the byte; a refused charge leaves nothing of its batch behind."""

    def d1_bytes(self, org=None):
        return self.w.one("SELECT d1_bytes FROM organization_usage WHERE organization_id = ?",
                          org or self.org)[0]

    def enqueue_batch(self, release, job_input, quota):
        """A job's insert and its charge as one batch (the enqueue's); refused whole past the
        quota."""
        row = {"question": job_input}
        self.conn.execute("BEGIN")
        try:
            self.w.insert("jobs", {
                "id": self.w.uid("job"), "organization_id": self.org, "idempotency_key": self.w.uid("idem"),
                "intent_hash": H(row), "subject_kind": release["kind"],
                "subject_artifact_id": release["artifact_id"], "subject_version_id": release["version_id"],
                "subject_content_hash": release["content_hash"], "subject_environment": "prod",
                "input": stable_json(row), "input_hash": H(row), "requirements": "{}",
                "execution_kind": "agent", "runtime": "python3.12", "external": 0,
                "created_at": NOW, "updated_at": NOW})
            self.execute(query("usage/job_enqueued"), self.org, self.w.one("SELECT id FROM jobs WHERE rowid ="
                                                                          " last_insert_rowid()")[0],
                         JOB_ROW_BYTES, quota)
        except sqlite3.IntegrityError:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def test_a_charge_is_held_to_the_quota_to_the_byte_and_a_refused_batch_leaves_nothing(self):
        release = self.w.release(self.org)
        cost = JOB_ROW_BYTES + len(stable_json({"question": "q"}).encode()) + len(b"{}")
        at = self.d1_bytes()
        jobs = lambda: self.w.one("SELECT count(*) FROM jobs")[0]
        before = jobs()
        # One byte past the quota: refused, and nothing of the batch is left.
        self.assertRefused(self.enqueue_batch, release, "q", at + cost - 1, message="organization_quota_exceeded")
        self.assertEqual((self.d1_bytes(), jobs()), (at, before))
        # Exactly at it: taken, charged to the byte.
        self.enqueue_batch(release, "q", at + cost)
        self.assertEqual((self.d1_bytes(), jobs()), (at + cost, before + 1))
        self.assertEqual(self.d1_bytes(), UsageTests.recount(self)["d1_bytes"])
        # And the next is refused.
        self.assertRefused(self.enqueue_batch, release, "q", at + cost, message="organization_quota_exceeded")

    def test_the_organizations_own_quota_wins_and_freeing_is_never_refused(self):
        job, _ = self.finished_job()
        at = self.d1_bytes()
        charge = query("usage/charge")

        def touch():  # a write that changed one row, as every charge follows
            self.execute("UPDATE jobs SET updated_at = updated_at WHERE id = ?", job)

        # The organization's own quota, not the deployment's default, bounds it.
        self.execute("UPDATE organizations SET d1_quota_bytes = ? WHERE id = ?", at + 10, self.org)
        touch()
        self.assertEqual(self.execute(charge, self.org, 10, 1 << 40).rowcount, 1)
        touch()
        self.assertRefused(self.execute, charge, self.org, 1, 1 << 40, message="organization_quota_exceeded")
        # Lowered below what is held: every charge is refused, freeing goes on.
        self.execute("UPDATE organizations SET d1_quota_bytes = 1 WHERE id = ?", self.org)
        self.execute("UPDATE organization_usage SET d1_bytes = d1_bytes - 100 WHERE organization_id = ?", self.org)
        self.assertEqual(self.d1_bytes(), at - 90)
        # Without one of its own, the default the charge names holds.
        self.execute("UPDATE organizations SET d1_quota_bytes = NULL WHERE id = ?", self.org)
        touch()
        self.assertRefused(self.execute, charge, self.org, 1, at - 90, message="organization_quota_exceeded")
        touch()
        self.assertEqual(self.execute(charge, self.org, 1, at - 89).rowcount, 1)
        # After a write that changed nothing, a charge does nothing.
        self.execute("UPDATE jobs SET updated_at = updated_at WHERE id = 'job_none'")
        self.assertEqual(self.execute(charge, self.org, 5, 1 << 40).rowcount, 0)
        self.assertEqual(self.d1_bytes(), at - 89)

    def test_pruning_frees_a_jobs_chunks_and_deleting_frees_its_row(self):
        base = self.d1_bytes()
        job, head = self.finished_job(chunks=4)
        chunks = self.w.one("SELECT coalesce(sum(? + length(CAST(payload AS BLOB))), 0) FROM stream_chunks"
                            " WHERE job_id = ?", CHUNK_ROW_BYTES, job)[0]
        row = self.w.one("SELECT ? + length(CAST(input AS BLOB)) + length(CAST(requirements AS BLOB))"
                         " FROM jobs WHERE id = ?", JOB_ROW_BYTES, job)[0]
        grown = self.d1_bytes() - base
        self.assertGreaterEqual(grown, chunks + row)  # and its release
        self.assertEqual(self.store(job, head), 1)
        for _ in range(10):  # bounded
            if all(n == 0 for n in self.prune_batch(job, 500)):
                break
        before_prune = self.d1_bytes()
        job_input = self.w.one("SELECT length(CAST(input AS BLOB)) FROM jobs WHERE id = ?", job)[0]
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])
        # Its chunks, its input and its live row's excess over the archived row it moved to.
        self.assertEqual(self.d1_bytes(), before_prune - chunks - job_input - (JOB_ROW_BYTES - ARCHIVED_JOB_BYTES))
        archived_row = self.w.one("SELECT ? + length(CAST(requirements AS BLOB)) FROM archived_job_rows"
                                  " WHERE id = ?", ARCHIVED_JOB_BYTES, job)[0]
        self.assertEqual(self.expire(job), 1)
        for _ in range(10):
            if all(n == 0 for n in self.delete_evidence(job, 500)):
                break
        before_delete = self.d1_bytes()
        self.assertEqual(self.delete_job(job)[DELETES_THE_JOB], 1)
        self.assertEqual(self.d1_bytes(), before_delete - archived_row)

    def test_evidence_is_charged_by_its_text_and_freed_when_its_job_is_marked(self):
        run = self.w.evaluation_run(self.org, metadata='{"k":"v"}')
        at = self.d1_bytes()
        self.w.test_result(self.org, run, name="x" * 100)
        self.assertEqual(self.d1_bytes() - at, 256 + 100)
        self.w.trace(self.org, run, name="t", spans='[{"a":1}]')
        self.assertEqual(self.d1_bytes() - at, 256 + 100 + 256 + 1 + len('[{"a":1}]'))
        # Past the quota: refused whole.
        self.execute("UPDATE organizations SET d1_quota_bytes = ? WHERE id = ?", self.d1_bytes() + 256 + 9,
                     self.org)
        self.conn.execute("BEGIN")
        self.assertRefused(self.w.test_result, self.org, run, name="y" * 10, message="organization_quota_exceeded")
        self.conn.execute("ROLLBACK")
        self.w.test_result(self.org, run, name="y" * 9)
        self.execute("UPDATE organizations SET d1_quota_bytes = NULL WHERE id = ?", self.org)
        # Taken into a job's custody, then marked: freed whole.
        job = self.archived_job(run=run)
        before = self.d1_bytes()
        run_bytes = sum(self.w.one(f"SELECT coalesce(sum(bytes), 0) FROM {view} WHERE evaluation_run_id = ?", run)[0]
                        for view in ("evaluation_run_bytes", "test_result_bytes", "cost_record_bytes",
                                     "model_call_bytes", "trace_bytes"))
        self.assertEqual(self.expire(job), 1)
        self.assertEqual(self.d1_bytes(), before - run_bytes)
        self.assertEqual(self.d1_bytes(), UsageTests.recount(self)["d1_bytes"])

    def test_the_charges_read_through_indexes(self):
        run = self.w.evaluation_run(self.org)
        self.w.test_result(self.org, run)
        for statement, params in ((query("usage/evidence_added"), (self.org, "test_result", "tr_1", 1)),
                                  (query("usage/evidence_freed"), (self.org, "job_1"))):
            plan = " ".join(query_plan(self.conn, statement, params))
            for table in ("evaluation_runs", "test_results", "cost_records", "model_calls", "traces"):
                self.assertNotIn(f"SCAN {table}", plan, plan)

    def test_migration_0015_counts_what_each_organization_held_before_it(self):
        self.rebuild_before("0015")
        self.finished_job(chunks=3)
        self.w.job(self.org)
        self.apply_from()
        expected = UsageTests.recount(self)["d1_bytes"]
        self.assertGreater(expected, 0)
        self.assertEqual(self.d1_bytes(), expected)


# =============================================================================================
# Migration 0016: queues
# =============================================================================================


class QueueTests(SchemaTest):
    """Each organization names at most 100 queues; a job past them is counted in q_overflow,
    and the queues view reads live jobs from one partial index only."""

    MAX_QUEUES = 100

    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.release = self.w.release(self.org)

    def enqueue(self, queue_id, org=None):
        """The enqueue's two statements, as src/routes/jobs.rs batches them: the queue named,
        then the job inserted into it (or into q_overflow). Returns the job's queue."""
        org = org or self.org
        self.execute(query("queues/register"), org, queue_id, f"queue {queue_id}",
                     '["agent","python3.12",false,null,["default"]]', NOW, self.MAX_QUEUES)
        release = self.release if org == self.org else self.w.release(org)
        job_input = {"q": queue_id}
        requirements = {"executionKind": "agent", "runtime": "python3.12"}
        job_id = self.w.uid("job")
        self.execute(query("jobs/insert"), job_id, org, self.w.uid("idem"),
                     H({"input": job_input}), release["kind"], release["artifact_id"],
                     release["version_id"], release["content_hash"], "prod", stable_json(job_input),
                     H(job_input), stable_json(requirements), "agent", "python3.12", 0, None, "[]",
                     NOW, queue_id).fetchall()
        return self.w.one("SELECT queue_id FROM jobs WHERE id = ?", job_id)[0]

    @staticmethod
    def qid(n):
        return "q_" + f"{n:016x}"

    def test_a_job_joins_its_queue_named_once_and_past_the_bound_the_overflow_queue(self):
        self.assertEqual(self.enqueue(self.qid(1)), self.qid(1))
        self.assertEqual(self.enqueue(self.qid(1)), self.qid(1), "the same queue, named once")
        self.assertEqual(self.w.one("SELECT count(*) FROM queues WHERE organization_id = ?", self.org)[0], 1)
        for n in range(2, self.MAX_QUEUES + 1):
            self.assertEqual(self.enqueue(self.qid(n)), self.qid(n))
        # The 101st queue is not named: its job is counted in q_overflow.
        self.assertEqual(self.enqueue(self.qid(1000)), "q_overflow")
        self.assertEqual(self.w.one("SELECT count(*) FROM queues WHERE organization_id = ?", self.org)[0],
                         self.MAX_QUEUES)
        # A queue the organization has keeps taking its jobs past the bound.
        self.assertEqual(self.enqueue(self.qid(7)), self.qid(7))
        # Another organization's bound is its own.
        other = self.w.org()
        self.assertEqual(self.enqueue(self.qid(1000), org=other), self.qid(1000))

    def test_a_queue_id_is_q_and_16_hex_digits(self):
        for bad in ("q_overflow", "q_" + "g" * 16, "x_" + "0" * 16, "q_" + "0" * 15):
            with self.subTest(bad=bad):
                self.assertRefused(self.execute, query("queues/register"), self.org, bad, "name", "[]", NOW, 100)
        self.enqueue(self.qid(1))
        self.assertRefused(self.execute, "UPDATE jobs SET queue_id = 'q_zz'")

    def test_the_live_read_counts_from_the_partial_index_alone(self):
        self.enqueue(self.qid(1))
        self.enqueue(self.qid(1))
        self.enqueue(self.qid(2))
        plan = query_plan(self.conn, query("queues/live"), (self.org, 50_000))
        text = " | ".join(plan)
        self.assertTrue(any("COVERING INDEX jobs_live_by_queue" in d for d in plan), text)
        self.assertFalse(any(d.startswith("SCAN jobs") for d in plan), text)
        rows = self.execute(query("queues/live"), self.org, 50_000).fetchall()
        self.assertEqual(sorted((q, s, n) for q, s, n, _ in rows),
                         [(self.qid(1), "queued", 2), (self.qid(2), "queued", 1)])
        # A finished job is not in the index, nor counted.
        self.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, cancel_reason = 'x' "
                     "WHERE queue_id = ?", NOW, self.qid(2))
        rows = self.execute(query("queues/live"), self.org, 50_000).fetchall()
        self.assertEqual([(q, n) for q, _, n, _ in rows], [(self.qid(1), 2)])
        # The bound holds: at most ?2 jobs are looked at.
        rows = self.execute(query("queues/live"), self.org, 1).fetchall()
        self.assertEqual(sum(n for _, _, n, _ in rows), 1)


class CounterTests(SchemaTest):
    """Migration 0017: counters only grow, one row per organization and name."""

    def test_a_counter_adds_up_and_never_falls(self):
        org, other = self.w.org(), self.w.org()
        for n in (1, 2, 3):
            self.execute(query("counters/add"), org, "stream_bytes", n)
        self.execute(query("counters/add"), other, "stream_bytes", 10)
        rows = self.execute(query("counters/read"), org).fetchall()
        self.assertIn(("stream_bytes", 6), rows)
        self.assertNotIn(("stream_bytes", 10), rows)
        self.assertRefused(self.execute, query("counters/add"), org, "stream_bytes", -7)
        self.assertEqual(self.w.one("SELECT value FROM organization_counters WHERE organization_id = ?"
                                    " AND name = 'stream_bytes'", org)[0], 6)
        self.execute(query("counters/add_deployment"), "reaper_passes")
        self.execute(query("counters/add_deployment"), "reaper_passes")
        self.assertIn(("reaper_passes", 2), self.execute(query("counters/read"), org).fetchall())



# =============================================================================================
# Migration 0018: archived jobs, compact
# =============================================================================================


JOB_ROW = ("id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id, "
           "subject_version_id, subject_content_hash, subject_environment, input_hash, requirements, "
           "state, dispatch_attempt, released_attempts, active_claim_id, lease_expires_at, cancel_reason, "
           "created_at, updated_at, finished_at, unstored_decisions, last_unstored_checksum, "
           "last_unstored_decision, last_unstored_at, held_at, held_by, held_reason")
ARCHIVE_SUMMARY = ("organization_id, state, finished_at, archive_state, bundle_sha256, bundle_bytes, "
                   "stream_chunks, stream_bytes, stream_head, archived_at")


class ArchivedJobTests(RetentionWorld):
    """A pruned job's row moves to archived_jobs in its prune's last batch, and every read of a
    job (by id, by key, by page, by state) finds it there as it was."""

    COUNTERS = UsageTests.COUNTERS

    def pruned_in_jobs(self, **job_overrides):
        """A finished job stored and pruned down to its row, not yet marked: its row as the
        reads gave it before the move."""
        job, head = self.finished_job(**job_overrides)
        self.assertEqual(self.store(job, head), 1)
        for _ in range(10):  # bounded: a handful of rows at 500 a batch
            if all(n == 0 for n in self.prune_batch(job, 500)):
                break
        return job

    def test_a_pruned_job_moves_whole_and_reads_as_it_was(self):
        job = self.pruned_in_jobs()
        # A late decision counted on the row before the move, and an admin's hold, move with it.
        self.execute(query("jobs/count_unstored_decision"), job, "duplicate", sha("late"), NOW + 3)
        self.assertEqual(self.hold(job), 1)
        before = self.w.one(f"SELECT {JOB_ROW} FROM jobs WHERE id = ?", job)
        summary = self.w.one(f"SELECT {ARCHIVE_SUMMARY} FROM jobs WHERE id = ?", job)
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])
        self.assertEqual(self.w.one("SELECT count(*) FROM jobs WHERE id = ?", job)[0], 0)
        reads = {
            "jobs/select_job": (job,),
            "jobs/by_idempotency_key": (self.org, before[2]),
        }
        for name, params in reads.items():
            self.assertEqual(self.execute(query(name), *params).fetchall(), [before], name)
        # The admin's read adds the artifact's name (last), from the artifact's row.
        name = self.w.one("SELECT name FROM release_artifacts WHERE id = ?", before[5])[0]
        self.assertEqual(self.execute(query("jobs/get"), self.org, job).fetchall(), [before + (name,)])
        self.assertEqual(self.execute(query("archive/row"), job).fetchall(),
                         [summary[:3] + ("pruned",) + summary[4:]])
        self.assertEqual(self.execute(query("archive/row_in_org"), self.org, job).fetchall(),
                         [summary[:3] + ("pruned",) + summary[4:]])
        self.assertEqual(self.execute(query("jobs/select_found"), self.org, job).fetchall(),
                         [(before[11], before[12])])
        # Another organization finds nothing of it.
        other = self.w.org()
        for name, params in (("jobs/get", (other, job)), ("jobs/by_idempotency_key", (other, before[2])),
                             ("archive/row_in_org", (other, job)), ("jobs/select_found", (other, job))):
            self.assertEqual(self.execute(query(name), *params).fetchall(), [], name)
        # An archived job holds no claim and no lease: the commit's assertion knows it so.
        self.execute(query("assert_job_as_known"), job, before[11], before[12], None, None)
        for args in ((job, before[11], before[12] + 1, None, None), (job, before[11], before[12], None, NOW),
                     (job, "running", before[12], None, None)):
            self.assertRefused(self.execute, query("assert_job_as_known"), *args, message="job_moved")

    def test_late_decisions_count_on_the_archived_row(self):
        job = self.archived_job()
        self.assertEqual(self.execute(query("jobs/count_unstored_decision_archived"), job, "stale",
                                      sha("late"), NOW + 9).rowcount, 1)
        self.assertEqual(self.job_row(job, "unstored_decisions, last_unstored_checksum,"
                                           " last_unstored_decision, last_unstored_at"),
                         (1, sha("late"), "stale", NOW + 9))
        # Nothing else of it changes, by the statements or by hand.
        for column, value in (("state", "failed"), ("bundle_bytes", 1), ("idempotency_key", "other"),
                              ("created_at", 1), ("requirements_id", 99)):
            with self.subTest(column=column):
                self.assertRefused(self.execute, f"UPDATE archived_jobs SET {column} = ? WHERE id = ?", value, job,
                                   message="archived_job_is_final")

    def test_only_a_pruned_job_moves_and_its_key_stays_taken(self):
        live = self.w.job(self.org)
        number = self.w.one("SELECT number FROM organization_numbers WHERE organization_id = ?", self.org)[0]
        # Not pruned: the move does nothing, and a hand-made archived row is refused.
        self.assertEqual(self.mark_pruned(live), [0, 0, 0, 0, 0])
        by_hand = lambda name: query(f"archive/move_{name}").replace("j.archive_state = 'pruned'", "1")
        self.execute(by_hand("requirements"), live, self.org)
        self.assertRefused(self.execute, by_hand("job"), live, self.org, message="archived_job_needs_a_pruned_job")
        self.assertRefused(self.execute, "DELETE FROM jobs WHERE id = ?", live,
                           message="job_delete_needs_the_archived_row")
        job = self.archived_job()
        key = self.job_row(job, "idempotency_key")[0]
        # Its key and id name no new job.
        self.assertRefused(self.w.job, self.org, idempotency_key=key, message="job_idempotency_key_taken")
        self.assertRefused(self.w.job, self.org, id=job, message="job_id_taken")
        self.w.job(self.w.org(), idempotency_key=key)  # another organization's own key
        # Not deleted before it expires; its document not while it is named.
        self.assertRefused(self.execute, "DELETE FROM archived_jobs WHERE id = ?", job,
                           message="job_delete_needs_expiry")
        self.assertRefused(self.execute, "DELETE FROM requirement_documents WHERE organization_number = ?",
                           number, message="requirement_document_is_named")

    def test_requirements_are_kept_once_per_document_of_an_organization(self):
        plain = self.archived_job()
        same = self.archived_job()
        tagged = self.archived_job(requirements=stable_json({"executionKind": "agent", "runtime": "python3.12",
                                                             "tags": ["gpu"]}))
        documents = lambda: self.conn.execute(
            "SELECT document, jobs FROM requirement_documents ORDER BY jobs DESC").fetchall()
        self.assertEqual(documents(), [('{"executionKind":"agent","runtime":"python3.12"}', 2),
                                       ('{"executionKind":"agent","runtime":"python3.12","tags":["gpu"]}', 1)])
        self.assertEqual(self.job_row(tagged, "requirements")[0],
                         '{"executionKind":"agent","runtime":"python3.12","tags":["gpu"]}')
        # Deleted with the last job that names it.
        for job, left in ((plain, [1, 1]), (tagged, [1]), (same, [])):  # counts, most first
            self.assertEqual(self.expire(job), 1)
            self.assertEqual(self.delete_expiring_job(job)[DELETES_THE_JOB], 1)
            self.assertEqual([n for _, n in documents()], left, job)

    def test_pages_and_counts_read_both_tables_in_order_without_overlap(self):
        archived = [self.archived_job() for _ in range(3)]
        live = [self.w.job(self.org, created_at=NOW + n) for n in range(3)]
        self.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, cancel_reason = 'x' WHERE id = ?",
                     NOW, live[0])
        everything = [r[0] for r in self.execute(
            f"SELECT id, created_at FROM jobs WHERE organization_id = ?1 UNION ALL"
            f" SELECT id, created_at FROM archived_job_rows WHERE organization_id = ?1"
            f" ORDER BY created_at DESC, id DESC", self.org)]
        self.assertEqual(sorted(everything), sorted(archived + live))
        seen, cursor = [], (2**53, "~")
        for _ in range(10):  # bounded: 6 jobs in pages of 4
            rows = self.execute(query("jobs_page"), self.org, *cursor, 4).fetchall()
            if not rows:
                break
            seen += [r[0] for r in rows]
            cursor = (rows[-1][17], rows[-1][0])
        self.assertEqual(seen, everything)
        in_state = self.execute(query("jobs_page_in_state"), self.org, 2**53, "~", "succeeded", 10).fetchall()
        self.assertEqual(sorted(r[0] for r in in_state), sorted(archived))
        self.assertEqual(dict(self.execute(query("job_state_counts"), self.org).fetchall()),
                         {"succeeded": 3, "cancelled": 1, "queued": 2})

    def test_migration_0018_moves_every_pruned_job_and_keeps_the_counts(self):
        self.rebuild_before("0018")
        self.w.job(self.org)  # queued
        self.finished_job()  # finished, not archived
        held = self.archived_job()
        self.assertEqual(self.hold(held), 1)
        rows = {job: self.w.one(f"SELECT {JOB_ROW} FROM jobs WHERE id = ?", job)
                for job in (held, self.archived_job())}
        expiring = self.archived_job()
        self.assertEqual(self.expire(expiring), 1)
        self.apply_from()
        self.assertEqual(self.w.one("SELECT count(*) FROM jobs WHERE archive_state = 'pruned'")[0], 0)
        self.assertEqual(self.w.one("SELECT count(*) FROM archived_jobs")[0], 3)
        for job, row in rows.items():
            self.assertEqual(self.execute(query("jobs/get"), self.org, job).fetchall()[0][:-1], row)
        self.assertEqual(self.execute(query("jobs/get"), self.org, expiring).fetchall(), [])
        self.assertEqual(UsageTests.counters(self), UsageTests.recount(self))
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        # And the expiring one goes on to its deletion.
        self.assertEqual(self.delete_expiring_job(expiring)[DELETES_THE_JOB], 1)


class ArchivedCustodyTests(RetentionWorld):
    """Migration 0019: an archived job holds the run its completion took into custody in its
    own row, and every check and read of that custody finds it there as it found the custody
    row before."""

    COUNTERS = UsageTests.COUNTERS
    pruned_in_jobs = ArchivedJobTests.pruned_in_jobs

    def custody_reads(self, job, run):
        """What the service reads of a job's custody: the job's evidence, the holder of its
        run, the run with its holder."""
        wanted = json.dumps([["evaluation_run", run], ["test_result", "tr_none"]])
        return {
            "jobs/evidence": self.execute(query("jobs/evidence"), self.org, job).fetchall(),
            "evidence_holder": self.execute(query("evidence_holder"), self.org, wanted).fetchall(),
            "evidence/get_run": self.execute(query("evidence/get_run"), self.org, run).fetchall(),
        }

    def test_the_move_carries_the_runs_custody_into_the_archived_row_and_reads_as_before(self):
        run = self.w.evaluation_run(self.org)
        job = self.pruned_in_jobs(run=run)
        custody = self.w.one("SELECT evidence_id, completion_id, attached_at FROM completion_evidence"
                             " WHERE job_id = ? AND evidence_kind = 'evaluation_run'", job)
        self.assertEqual(custody[0], run)
        before = self.custody_reads(job, run)
        self.assertEqual(before["evidence_holder"], [("evaluation_run", run, job)])
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])
        self.assertEqual(self.w.one("SELECT custody_run_id, custody_completion_id, custody_attached_at"
                                    " FROM archived_jobs WHERE id = ?", job), custody)
        # The run's custody row went; the test result's (evidence named besides the run) stays.
        self.assertEqual(self.execute("SELECT evidence_kind FROM completion_evidence WHERE job_id = ?",
                                      job).fetchall(), [("test_result",)])
        self.assertEqual(self.custody_reads(job, run), before)
        # Another organization reads none of it.
        other = self.w.org()
        self.assertEqual(self.execute(query("jobs/evidence"), other, job).fetchall(), [])
        self.assertEqual(self.execute(query("evidence_holder"), other,
                                      json.dumps([["evaluation_run", run]])).fetchall(), [])

    def test_a_run_an_archived_job_holds_is_final_and_taken(self):
        run = self.w.evaluation_run(self.org)
        job = self.archived_job(run=run)
        result = self.w.one("SELECT id FROM test_results WHERE evaluation_run_id = ?", run)[0]
        # Nothing of the run changes: no new rows, none deleted, the run stays.
        self.assertRefused(self.w.test_result, self.org, run, message="evidence_run_in_custody")
        self.assertRefused(self.execute, "DELETE FROM test_results WHERE id = ?", result,
                           message="evidence_run_in_custody")
        self.assertRefused(self.execute, "DELETE FROM evaluation_runs WHERE id = ?", run,
                           message="evidence_run_in_custody")
        # The hold is final.
        for change in ("custody_run_id = NULL, custody_completion_id = NULL, custody_attached_at = NULL",
                       "custody_attached_at = custody_attached_at + 1"):
            self.assertRefused(self.execute, f"UPDATE archived_jobs SET {change} WHERE id = ?", job,
                               message="archived_job_is_final")
        # Another job's completion naming the run is refused: its batch leaves nothing behind.
        other = self.w.job(self.org)
        claim = self.w.grant(other, self.runner)
        head = self.w.stream(other, claim, 1, 1)
        rows_before = self.counts(other)
        self.assertRefused(self.w.complete, other, claim, self.runner, 1, final_stream_checksum=head,
                           evaluation_run_id=run, message="evidence_run_held_by_archived_job")
        self.assertEqual(self.counts(other), rows_before)
        # Once expiring, its evidence goes; the archived row last, and only once the run went.
        self.assertEqual(self.expire(job), 1)
        for _ in range(10):  # bounded: one test result at 500 a batch
            if all(n == 0 for n in self.delete_evidence(job, 500)):
                break
        self.execute(query("retention/delete_custody"), job, self.org)
        self.assertRefused(self.execute, "DELETE FROM archived_jobs WHERE id = ?", job,
                           message="job_delete_needs_expiry")
        self.assertEqual(self.delete_job(job)[DELETES_THE_JOB], 1)
        self.assertEqual(self.w.one("SELECT count(*) FROM evaluation_runs WHERE id = ?", run)[0], 0)

    def test_a_moving_job_takes_exactly_the_custody_its_completion_took(self):
        job = self.pruned_in_jobs()
        move = query("archive/move_job")
        taken = "ce.evidence_id, ce.completion_id, ce.attached_at"
        self.assertIn(taken, move)
        stranger = self.w.evaluation_run(self.org)
        for wrong in ("NULL, NULL, NULL", f"'{stranger}', ce.completion_id, ce.attached_at",
                      "ce.evidence_id, ce.completion_id, ce.attached_at + 1"):
            self.conn.execute("BEGIN")
            try:
                self.execute(query("archive_mark_pruned"), job, self.org)
                self.execute(query("archive/move_requirements"), job, self.org)
                self.assertRefused(self.execute, move.replace(taken, wrong), job, self.org,
                                   message="archived_job_takes_its_runs_custody")
            finally:
                self.conn.execute("ROLLBACK")
        # A custody row goes only with the move that carries it.
        self.assertRefused(self.execute, "DELETE FROM completion_evidence WHERE job_id = ?"
                           " AND evidence_kind = 'evaluation_run'", job,
                           message="evidence_custody_is_permanent")
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 1, 1])

    def test_the_reads_by_run_ask_the_index_of_runs_held(self):
        for name, params in (("evidence_holder", ("o", '[["evaluation_run", "r"]]')),
                             ("evidence/get_run", ("o", "r"))):
            plan = query_plan(self.conn, query(name), params)
            held = [d for d in plan if d.startswith(("SEARCH a ", "SCAN a"))]
            self.assertEqual(held, ["SEARCH a USING INDEX archived_jobs_by_custody_run (custody_run_id=?)"]
                             if name == "evidence_holder" else
                             ["SEARCH a USING INDEX archived_jobs_by_custody_run (custody_run_id=?) LEFT-JOIN"],
                             " | ".join(plan))

    def test_a_job_whose_completion_took_no_run_moves_holding_none(self):
        job = self.pruned_in_jobs()
        # As a job archived before custody was taken would be (written past its guards).
        self.execute("DROP TRIGGER completion_evidence_is_permanent_delete")
        self.execute("DELETE FROM completion_evidence WHERE job_id = ?", job)
        self.assertEqual(self.mark_pruned(job), [1, 1, 1, 0, 1])
        self.assertEqual(self.w.one("SELECT custody_run_id, custody_completion_id, custody_attached_at"
                                    " FROM archived_jobs WHERE id = ?", job), (None, None, None))
        self.assertEqual(self.execute(query("jobs/evidence"), self.org, job).fetchall(), [])

    def test_migration_0019_moves_the_runs_archived_jobs_hold(self):
        self.rebuild_before("0019")
        runs = [self.w.evaluation_run(self.org) for _ in range(3)]
        live, _ = self.finished_job(run=runs[0])
        archived = self.archived_job(run=runs[1])
        expiring = self.archived_job(run=runs[2])
        self.assertEqual(self.expire(expiring), 1)
        custody = {job: self.w.one("SELECT evidence_id, completion_id, attached_at FROM completion_evidence"
                                   " WHERE job_id = ? AND evidence_kind = 'evaluation_run'", job)
                   for job in (live, archived, expiring)}
        self.apply_from()
        self.assertEqual(self.w.one("SELECT count(*) FROM completion_evidence"
                                    " WHERE evidence_kind = 'evaluation_run'")[0], 1)
        for job in (archived, expiring):
            self.assertEqual(self.w.one("SELECT custody_run_id, custody_completion_id, custody_attached_at"
                                        " FROM archived_jobs WHERE id = ?", job), custody[job])
        for job, run in ((live, runs[0]), (archived, runs[1]), (expiring, runs[2])):
            reads = self.custody_reads(job, run)
            self.assertEqual(reads["evidence_holder"], [("evaluation_run", run, job)])
            self.assertEqual(reads["evidence/get_run"][0][6:], (custody[job][1], job, custody[job][2]))
            self.assertIn(("evaluation_run", run, custody[job][1]), reads["jobs/evidence"])
        self.assertEqual(UsageTests.counters(self), UsageTests.recount(self))
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        # The expiring one goes on to its deletion, run and all; the other's run stays held.
        self.assertEqual(self.delete_expiring_job(expiring)[DELETES_THE_JOB], 1)
        self.assertEqual(self.w.one("SELECT count(*) FROM evaluation_runs WHERE id = ?", runs[2])[0], 0)
        self.assertRefused(self.execute, "DELETE FROM evaluation_runs WHERE id = ?", runs[1],
                           message="evidence_run_in_custody")


class EphemeralRunnerTests(SchemaTest):
    """Migration 0020: an ephemeral runner takes one job. Its grant drains it, nothing makes it
    active again, and the cron pass finds it once its claim ended."""

    def setUp(self):
        super().setUp()
        self.org = self.w.org()
        self.runner = self.w.runner(self.org)
        self.job = self.w.job(self.org)

    # The grant as the production statements write it (not their tests, which run there).
    known = ProductionStatementTests.known
    grant = ProductionStatementTests.grant

    def make_ephemeral(self):
        """This world's runner from now on: an ephemeral one (whether a runner is ephemeral
        never changes, so a new one)."""
        self.runner = self.w.runner(self.org, ephemeral=1, max_concurrent_jobs=1)

    def runner_state(self):
        return self.w.one("SELECT state, state_reason, active_claims FROM runners WHERE id = ?", self.runner)

    def spent(self):
        return self.execute(query("runners/spent_ephemeral"), 100).fetchall()

    def test_only_a_one_claim_bootstrap_runner_is_ephemeral(self):
        self.assertRefused(self.w.runner, self.org, ephemeral=1, max_concurrent_jobs=2,
                           message="CHECK constraint failed")
        one = self.w.runner(self.org, ephemeral=1, max_concurrent_jobs=1)
        self.assertEqual(self.w.one("SELECT ephemeral FROM runners WHERE id = ?", one)[0], 1)
        # Decided at registration, once.
        self.assertRefused(self.execute, "UPDATE runners SET ephemeral = 0 WHERE id = ?", one,
                           message="runner_ephemeral_is_final")
        self.execute("UPDATE runners SET ephemeral = 1 WHERE id = ?", one)  # the same value: no change

    def test_the_grant_drains_an_ephemeral_runner_and_no_other(self):
        self.grant(1)
        self.assertEqual(self.runner_state(), ("active", None, 1))
        self.job = self.w.job(self.org)
        self.make_ephemeral()
        self.grant(1)
        self.assertEqual(self.runner_state(), (EPHEMERAL_DRAINED, EPHEMERAL_DRAINED_REASON, 1))
        # Spent: it takes no second job.
        other = self.w.job(self.org)
        self.assertEqual(self.execute(query("grant_runner"), self.runner, NOW, CLAIMING_STATES,
                                      EPHEMERAL_DRAINED, EPHEMERAL_DRAINED_REASON).rowcount, 0)
        self.assertNotEqual(other, None)

    def test_a_drained_ephemeral_runner_is_never_active_again_and_is_found_once_its_claim_ended(self):
        self.make_ephemeral()
        claim = self.grant(1)
        self.assertEqual(self.spent(), [])  # it holds its claim
        for state in ("active", "lost", "pending_approval"):
            self.assertRefused(self.execute, "UPDATE runners SET state = ? WHERE id = ?", state, self.runner,
                               message="ephemeral_runner_is_spent")
        # Its claim ends (released, as a completion or a hand-back leaves it).
        self.execute("UPDATE job_claims SET state = 'released', end_reason = 'completed', ended_at = ?"
                     " WHERE id = ?", NOW, claim)
        self.execute("UPDATE runners SET active_claims = 0 WHERE id = ?", self.runner)
        self.assertEqual(self.spent(), [(self.runner, self.org)])
        # The cron pass's revoke (change_runner_state.sql, as an admin's).
        self.assertEqual(self.execute(query("change_runner_state"), self.org, self.runner, "draining", "revoked",
                                      "ephemeral: its one job ended", NOW, None, None, NOW, 1).rowcount, 1)
        self.assertEqual(self.spent(), [])
        # A runner that stays may come back from draining as before.
        stays = self.w.runner(self.org)
        self.execute("UPDATE runners SET state = 'draining' WHERE id = ?", stays)
        self.execute("UPDATE runners SET state = 'active' WHERE id = ?", stays)

    def retired_deletes(self, cutoff):
        """store::runners::delete_retired_ephemeral's batch: the rows each statement deleted."""
        return [self.execute(query(f"runners/{name}"), cutoff, 100).rowcount for name in (
            "delete_retired_ephemeral_events", "delete_retired_ephemeral_files",
            "delete_retired_ephemeral_challenges", "delete_retired_ephemeral_credentials",
            "delete_retired_ephemeral")]

    def retire(self, runner, at=NOW):
        self.assertEqual(self.execute(query("change_runner_state"), self.org, runner, "draining", "revoked",
                                      "ephemeral: its one job ended", at, None, None, at, 1).rowcount, 1)

    def runner_event(self, runner, kind="runner.revoked"):
        self.w.insert("job_events", {"organization_id": self.org, "runner_id": runner,
                                     "actor": "system:cron", "type": kind, "at": NOW})

    def test_a_retired_ephemeral_runner_goes_after_its_time_once_nothing_of_its_job_names_it(self):
        # One that never took a job: drained, then retired, with its own events.
        idle = self.w.runner(self.org, ephemeral=1, max_concurrent_jobs=1)
        self.execute("UPDATE runners SET state = 'draining' WHERE id = ?", idle)
        self.runner_event(idle, "runner.registered")
        # Its events stay while it is not retired.
        self.assertRefused(self.execute, "DELETE FROM job_events WHERE runner_id = ?", idle,
                           message="job_events_are_append_only")
        self.retire(idle)
        self.runner_event(idle)
        # One that took its job: its claim still names it (its job not archived).
        self.make_ephemeral()
        claim = self.grant(1)
        self.execute("UPDATE job_claims SET state = 'released', end_reason = 'completed', ended_at = ?"
                     " WHERE id = ?", NOW, claim)
        self.execute("UPDATE runners SET active_claims = 0 WHERE id = ?", self.runner)
        self.retire(self.runner)
        # And a runner that stays, revoked: never deleted by this pass.
        stays = self.w.runner(self.org)
        self.execute("UPDATE runners SET state = 'revoked', revoked_at = ? WHERE id = ?", NOW, stays)
        # Not yet its time: nothing goes.
        self.assertEqual(self.retired_deletes(NOW), [0, 0, 0, 0, 0])
        # Its time: the idle one goes with its two events; the one its claim names stays.
        self.assertEqual(self.retired_deletes(NOW + 1), [2, 0, 0, 0, 1])
        remaining = {r[0] for r in self.execute("SELECT id FROM runners WHERE organization_id = ?", self.org)}
        self.assertNotIn(idle, remaining)
        self.assertTrue({self.runner, stays} <= remaining)
        self.assertEqual(self.w.one("SELECT count(*) FROM job_events WHERE runner_id = ?", idle)[0], 0)
        self.assertEqual(self.conn.execute("PRAGMA foreign_key_check").fetchall(), [])
        # Again: nothing more (bounded and idempotent).
        self.assertEqual(self.retired_deletes(NOW + 1), [0, 0, 0, 0, 0])

    def test_the_pass_reads_the_index_of_spent_runners(self):
        plan = query_plan(self.conn, query("runners/spent_ephemeral"), (100,))
        self.assertEqual(plan, ["SCAN runners USING INDEX runners_ephemeral_spent"], plan)
        plan = query_plan(self.conn, query("runners/delete_retired_ephemeral"), (NOW, 100))
        self.assertIn("SEARCH runners USING INDEX runners_ephemeral_retired (revoked_at<?)", plan, plan)
        self.assertFalse([d for d in plan if d.startswith("SCAN")], plan)


# =============================================================================================
# Migration 0021: queue history, sampled by the cron pass
# =============================================================================================


class QueueHistoryTests(SchemaTest):
    """Each organization's five-minute buckets: peaks, slot sums, finished jobs, a day at most."""

    BUCKET = 300_000
    SAMPLE = query("history/sample")
    READ = query("history/read")

    def sample(self, at, seen_since=None, organizations=1000):
        bucket = at - at % self.BUCKET
        self.execute(self.SAMPLE, bucket, NOW - 900_000 if seen_since is None else seen_since, organizations)
        return bucket

    def rows(self, org):
        return self.execute(self.READ, org, 0, 1000).fetchall()

    def finish(self, org, n=1, name="completions_succeeded"):
        self.execute(query("counters/add"), org, name, n)

    def test_a_bucket_keeps_its_peaks_sums_its_slots_and_counts_what_finished_in_it(self):
        org = self.w.org()
        busy = self.w.runner(org, max_concurrent_jobs=3, last_seen_at=NOW, active_claims=0)
        self.w.runner(org, max_concurrent_jobs=1, last_seen_at=NOW - 3_600_000)  # offline: not counted
        jobs = [self.w.job(org) for _ in range(3)]
        self.finish(org, 5)  # before the first sample: history before it is not this bucket's
        bucket = self.sample(NOW)
        self.assertEqual(self.rows(org), [(bucket, 1, 3, 0, 0, 3, 5, 5)])
        # A claim: 2 queued, 1 held; then it finishes (and one more fails out of attempts).
        self.w.grant(jobs[0], busy)
        self.sample(NOW + 60_000)
        self.finish(org, 1)
        self.finish(org, 1, "attempts_exhausted")
        self.finish(org, 4, "completions_duplicate")  # a refused completion finishes nothing
        self.sample(NOW + 120_000)
        [(at, samples, queued, running, busy_slots, slots, base, total)] = self.rows(org)
        self.assertEqual((at, samples, queued, running), (bucket, 3, 3, 1))
        self.assertEqual((busy_slots, slots), (1 + 1, 3 * 3), "busy and total slots summed over samples")
        self.assertEqual(total - base, 2, "two jobs finished in the bucket")
        # The next bucket's base is this one's last total: nothing counted twice.
        following = self.sample(bucket + self.BUCKET)
        self.assertEqual(self.rows(org)[-1][0], following)
        self.assertEqual(self.rows(org)[-1][6:], (7, 7))

    def test_an_organization_with_nothing_to_show_gets_no_row_and_others_are_apart(self):
        idle, busy = self.w.org(), self.w.org()
        self.w.runner(idle, last_seen_at=NOW - 3_600_000)  # offline, no jobs
        self.w.job(busy)
        self.sample(NOW)
        self.assertEqual(self.rows(idle), [])
        self.assertEqual(len(self.rows(busy)), 1)
        # Its counter moved: a row. Its first row starts the count (what finished before any
        # sample, e.g. before migration 0021, is no bucket's); the next finish is its bucket's.
        self.finish(idle, 2)
        self.sample(NOW + self.BUCKET)
        self.assertEqual([r[6:] for r in self.rows(idle)], [(2, 2)])
        self.finish(idle, 1)
        self.sample(NOW + 2 * self.BUCKET)
        self.assertEqual([r[6:] for r in self.rows(idle)], [(2, 2), (2, 3)])

    def test_an_organization_keeps_a_day_of_buckets_at_most(self):
        org = self.w.org()
        self.w.job(org)
        start = NOW - NOW % self.BUCKET
        for n in range(300):  # bounded: past a day by 12 buckets
            self.sample(start + n * self.BUCKET)
        rows = self.rows(org)
        self.assertEqual(len(rows), 288)
        self.assertEqual(rows[0][0], start + 12 * self.BUCKET)
        self.assertEqual(rows[-1][0], start + 299 * self.BUCKET)

    def test_a_pass_samples_at_most_its_bound_of_organizations(self):
        orgs = sorted(self.w.org() for _ in range(3))
        for org in orgs:
            self.w.job(org)
        self.sample(NOW, organizations=2)
        self.assertEqual([len(self.rows(org)) for org in orgs], [1, 1, 0])

    def test_a_bucket_is_five_minutes_on_the_clock_and_its_numbers_are_never_negative(self):
        org = self.w.org()
        row = {"organization_id": org, "bucket_at": NOW - NOW % self.BUCKET + 1, "samples": 1,
               "queued": 0, "running": 0, "busy_slots": 0, "slots": 0, "finished_base": 0,
               "finished_total": 0}
        self.assertRefused(self.w.insert, "queue_history", row)
        row["bucket_at"] -= 1
        self.assertRefused(self.w.insert, "queue_history", {**row, "queued": -1})
        self.assertRefused(self.w.insert, "queue_history", {**row, "finished_base": 2, "finished_total": 1})
        self.w.insert("queue_history", row)

    def test_the_sample_and_the_read_use_their_indexes(self):
        org = self.w.org()
        self.w.job(org)
        plan = " | ".join(query_plan(self.conn, self.SAMPLE, (NOW, NOW, 1000)))
        for index in ("jobs_by_organization_state", "runners_by_organization_state"):
            self.assertIn(index, plan)
        self.assertNotIn("SCAN j", plan)
        self.assertNotIn("SCAN r", plan)
        self.assertNotIn("SCAN c", plan)
        self.assertNotIn("SCAN h", plan)
        read = " | ".join(query_plan(self.conn, self.READ, (org, 0, 288)))
        self.assertIn("SEARCH queue_history USING PRIMARY KEY", read)
        self.assertNotIn("TEMP B-TREE", read)
