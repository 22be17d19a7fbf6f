"""The published EvalGate SDK, unmodified, runs a job on our server end to end.

`RemoteRunnerWorker` exchanges its bootstrap token, claims (verifying the signed envelope
itself: key id, organization, claim identity, served target, validity window, payload hash,
HMAC, nonce), heartbeats, streams chunks made by `create_remote_runner_stream_chunk` and
completes with `create_remote_runner_completion`. The server must accept exactly what the SDK
makes, byte for byte: unicode, floats written the Python way (`1e-07`, `1e+16`), microsecond
timestamps.

Run against a live local server (scripts/test sets the environment):

    BASE_URL=http://127.0.0.1:PORT EDGERUNNER_STATE_DIR=DIR \\
        .venv/bin/python -m unittest discover -s tests/interop -p 'test_*.py'

Every test fails (never skips) when BASE_URL or EDGERUNNER_STATE_DIR is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import unittest
import uuid
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
from evalgate_sdk.remote_runner import (
    RemoteRunnerProtocolError,
    RemoteRunnerWorker,
    create_remote_runner_completion,
    create_remote_runner_stream_chunk,
    hash_remote_runner_payload,
)

ROOT = Path(__file__).resolve().parents[2]
SDK_VERSION = "3.15.0"
RUNTIME = "python3.12"


def required_env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise AssertionError(f"{name} is not set: run the interop suite through scripts/test")
    return value


def base_url() -> str:
    return required_env("BASE_URL").rstrip("/")


def bootstrap_org(name: str) -> dict[str, str]:
    """scripts/bootstrap-admin --org NAME --state $EDGERUNNER_STATE_DIR -> {organizationId, apiKey}."""
    # wrangler d1 execute shares the SQLite file with the running server; a write that meets
    # the server's write lock fails with SQLITE_BUSY and is simply run again (at most 3 times).
    for _attempt in range(3):
        result = subprocess.run(
            [str(ROOT / "scripts" / "bootstrap-admin"), "--org", f"{name}-{uuid.uuid4().hex[:8]}",
             "--state", required_env("EDGERUNNER_STATE_DIR")],
            cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False,
        )
        if result.returncode == 0 or "SQLITE_BUSY" not in result.stdout + result.stderr:
            break
    if result.returncode != 0:
        raise AssertionError(f"bootstrap-admin failed: {result.stdout}\n{result.stderr}")
    line = [line for line in result.stdout.splitlines() if line.strip()][-1]
    parsed = json.loads(line)
    return {"organizationId": parsed["organizationId"], "apiKey": parsed["apiKey"]}


def admin_post(api_key: str, path: str, body: Any, expect: tuple[int, ...] = (200, 201)) -> dict[str, Any]:
    response = httpx.post(
        f"{base_url()}{path}", json=body, headers={"Authorization": f"Bearer {api_key}"}, timeout=30
    )
    if response.status_code not in expect:
        raise AssertionError(f"POST {path} answered {response.status_code}: {response.text}")
    return response.json()


def admin_get(api_key: str, path: str) -> dict[str, Any]:
    response = httpx.get(f"{base_url()}{path}", headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    if response.status_code != 200:
        raise AssertionError(f"GET {path} answered {response.status_code}: {response.text}")
    return response.json()


def new_version(api_key: str, artifact_id: str, content: Any, environment: str) -> dict[str, Any]:
    version_record = admin_post(api_key, f"/api/releases/artifacts/{artifact_id}/versions", {"content": content})
    if version_record["contentHash"] != hash_remote_runner_payload(content):
        raise AssertionError(f"contentHash is not H(content): {version_record}")
    admin_post(api_key, f"/api/releases/versions/{version_record['id']}/promote", {"environment": environment})
    return {"versionId": version_record["id"], "contentHash": version_record["contentHash"]}


def register_runner(api_key: str) -> dict[str, Any]:
    return admin_post(
        api_key,
        "/api/remote-runners",
        {
            "name": "sdk-jobs",
            "runnerKey": f"sdk-jobs-{uuid.uuid4().hex}",
            "capabilities": {"executionKinds": ["prompt"], "runtimes": [RUNTIME]},
            "maxConcurrentJobs": 1,
        },
        expect=(201,),
    )


def evidence(api_key: str) -> dict[str, Any]:
    """A real evaluation run with one row of every kind, as the completion's evidence."""
    run = admin_post(api_key, "/api/evidence/runs", {"evaluationId": f"sdk-{uuid.uuid4().hex[:8]}"})
    run_id = run["id"]

    def row(path: str, body: dict[str, Any]) -> Any:
        return admin_post(api_key, f"/api/evidence/runs/{run_id}/{path}", body)["id"]

    return {
        "evaluationRunId": run_id,
        "testResultIds": [row("test-results", {"name": "sdk-case", "status": "passed", "score": 0.5})],
        "costRecordIds": [row("cost-records", {"category": "model", "amountMicros": 990, "currency": "USD"})],
        "modelCallIds": [row("model-calls", {"provider": "e2e", "model": "e2e-model", "inputTokens": 3})],
        "traceId": row("traces", {"name": "sdk-trace", "spans": []}),
    }


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class SdkJobsTest(unittest.TestCase):
    def test_sdk_is_the_pinned_version(self) -> None:
        self.assertEqual(version("evalgate-sdk"), SDK_VERSION)

    def test_sdk_runs_a_job_end_to_end(self) -> None:
        org = bootstrap_org("sdk-jobs")
        key = org["apiKey"]
        content = {"template": "Réponds: {{q}}", "temperature": 0.25}
        artifact = admin_post(key, "/api/releases/artifacts", {"kind": "prompt", "name": f"sdk-{uuid.uuid4().hex[:8]}"})
        served = new_version(key, artifact["id"], content, "staging")
        other = new_version(key, artifact["id"], {"template": "other", "temperature": 0.5}, "staging")

        job_input = {"question": "héllo 🌍", "weights": [0.1, 1e-07, 1e16], "n": 3}
        job = admin_post(
            key,
            "/api/remote-runners/jobs",
            {
                "idempotencyKey": f"sdk-{uuid.uuid4().hex}",
                "subject": {"kind": "prompt", "artifactId": artifact["id"], "versionId": served["versionId"],
                            "environment": "staging"},
                "input": job_input,
                "requirements": {
                    "executionKind": "prompt", "runtime": RUNTIME,
                    "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1048576},
                    "network": {"mode": "deny_all"}, "streaming": True, "cancellation": True,
                },
            },
            expect=(201,),
        )
        self.assertEqual(job["inputHash"], hash_remote_runner_payload(job_input))
        registered = register_runner(key)
        runner_id = registered["runner"]["id"]
        token = registered["bootstrapToken"]
        run_evidence = evidence(key)

        async def scenario() -> None:
            # A worker serving only another version is offered nothing (204 -> None).
            async with RemoteRunnerWorker(
                base_url=base_url(), runner_id=runner_id, bootstrap_token=token, served_targets=[other]
            ) as elsewhere:
                self.assertIsNone(await elsewhere.claim())

            async with RemoteRunnerWorker(
                base_url=base_url(), runner_id=runner_id, bootstrap_token=token, served_targets=[other, served]
            ) as worker:
                claims = await worker.exchange_credential()
                self.assertEqual(claims["runnerId"], runner_id)
                self.assertEqual(claims["organizationId"], org["organizationId"])

                assignment = await worker.claim()  # verified by the SDK itself
                self.assertIsNotNone(assignment)
                assert assignment is not None
                envelope = assignment["signedJob"]["envelope"]
                claim = assignment["claim"]
                self.assertEqual(envelope["jobId"], job["id"])
                self.assertEqual(envelope["inputHash"], hash_remote_runner_payload(job_input))
                self.assertEqual(envelope["subject"]["versionId"], served["versionId"])
                self.assertEqual(envelope["subject"]["contentHash"], served["contentHash"])
                self.assertEqual(envelope["subject"]["environment"], "staging")
                self.assertEqual(envelope["runnerId"], runner_id)

                # The job-bound reads, with the credential the SDK holds.
                session = worker._session  # noqa: SLF001 - the credential the SDK uses
                assert session is not None
                auth = {"Authorization": f"Bearer {session['token']}"}
                async with httpx.AsyncClient(base_url=base_url(), timeout=30) as http:
                    read = await http.get(f"/api/remote-runners/jobs/{job['id']}/input", headers=auth)
                    self.assertEqual(read.status_code, 200, read.text)
                    self.assertEqual(read.json(), job_input)
                    self.assertEqual(hash_remote_runner_payload(read.json()), envelope["inputHash"])
                    art = await http.get(f"/api/remote-runners/jobs/{job['id']}/artifact", headers=auth)
                    self.assertEqual(art.status_code, 200, art.text)
                    self.assertEqual(art.json()["content"], content)

                beat = await worker.heartbeat(claim["id"])
                self.assertIs(beat["cancelRequested"], False)

                previous = None
                payloads = [
                    ("log", {"message": "héllo 🌍", "score": 0.1, "tiny": 1e-07, "big": 1e16}),
                    ("trajectory", {"step": 1, "args": {"q": "日本語 \"quoted\"\n", "t": 0.7}, "ok": True}),
                    ("log", {"message": "done ✓", "values": [1.0, -0.0, 2.5e-05], "none": None}),
                ]
                for sequence, (kind, payload) in enumerate(payloads):
                    chunk = create_remote_runner_stream_chunk(
                        job_id=envelope["jobId"],
                        claim_id=claim["id"],
                        dispatch_attempt=claim["dispatchAttempt"],
                        sequence=sequence,
                        kind=kind,
                        previous_checksum=previous,
                        payload=payload,
                    )
                    answer = await worker.stream(chunk)
                    self.assertIs(answer.get("accepted"), True, answer)
                    self.assertEqual(answer.get("sequence"), sequence, answer)
                    self.assertEqual(answer.get("checksum"), chunk["checksum"], answer)
                    previous = chunk["checksum"]

                completion = create_remote_runner_completion(
                    jobId=envelope["jobId"],
                    claimId=claim["id"],
                    runnerId=runner_id,
                    organizationId=envelope["organizationId"],
                    dispatchAttempt=claim["dispatchAttempt"],
                    status="succeeded",
                    inputHash=envelope["inputHash"],
                    resultHash=hash_remote_runner_payload({"answer": "très bien", "score": 0.95}),
                    finalStreamChecksum=previous,
                    evidence=run_evidence,
                    completedAt=now_iso(),
                )
                accepted = await worker.complete(completion)
                self.assertEqual(accepted["decision"], "accepted", accepted)
                self.assertEqual(accepted["jobState"], "succeeded", accepted)

                duplicate = await worker.complete(completion)
                self.assertEqual(duplicate["decision"], "duplicate", duplicate)

                # A different completion after acceptance is a conflict the SDK reports as 409.
                different = create_remote_runner_completion(
                    **{**{k: v for k, v in completion.items() if k != "completionChecksum"},
                       "completedAt": now_iso(), "status": "failed", "resultHash": None}
                )
                with self.assertRaises(RemoteRunnerProtocolError) as raised:
                    await worker.complete(different)
                self.assertEqual(raised.exception.status, 409)
                self.assertEqual(raised.exception.code, "COMPLETION_CONFLICT")

                # Nothing else to run.
                self.assertIsNone(await worker.claim())

        asyncio.run(scenario())

        stored = admin_get(key, f"/api/remote-runners/jobs/{job['id']}")
        self.assertEqual(stored["state"], "succeeded")
        self.assertEqual([row["checksum"] for row in stored["stream"]][-1], previous_checksum(stored))
        self.assertEqual(len(stored["stream"]), 3)
        self.assertEqual([c["decision"] for c in stored["completions"]], ["accepted", "duplicate", "conflict"])
        kinds = sorted(row["kind"] for row in stored["evidence"])
        self.assertEqual(kinds, ["cost_record", "evaluation_run", "model_call", "test_result", "trace"])
        runner = admin_get(key, f"/api/remote-runners/{runner_id}")
        self.assertEqual(runner["activeClaims"], 0)
        self.assertEqual(runner["completedJobs"], 1)


def previous_checksum(job: dict[str, Any]) -> str:
    """The checksum the accepted completion closed."""
    accepted = [c for c in job["completions"] if c["decision"] == "accepted"]
    return str(accepted[0]["finalStreamChecksum"])


if __name__ == "__main__":
    unittest.main()
