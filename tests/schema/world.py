"""The rows the schema suites build: organizations, runners, releases, jobs, claims, chunks and
completions, each legal by default and overridable field by field."""

from db import *  # noqa: F401,F403


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
        # As the service does (objects/job/complete.rs, `attachments`): an accepted completion takes
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
