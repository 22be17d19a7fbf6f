"""The published EvalGate SDK, unmodified, exchanges a bootstrap token with our server.

Run against a live local server (scripts/test sets the environment):

    BASE_URL=http://127.0.0.1:PORT EDGERUNNER_STATE_DIR=DIR \\
        .venv/bin/python -m unittest discover -s tests/interop -p 'test_*.py'

Every test fails (never skips) when BASE_URL or EDGERUNNER_STATE_DIR is missing: a suite that
passes without a server proves nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import unittest
import uuid
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
from evalgate_sdk.remote_runner import RemoteRunnerProtocolError, RemoteRunnerWorker

ROOT = Path(__file__).resolve().parents[2]
SDK_VERSION = "3.15.0"
RUNNER_SCOPES = {"runner:claim", "runner:heartbeat", "runner:stream", "runner:complete", "runner:self"}


def required_env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise AssertionError(f"{name} is not set: run the interop suite through scripts/test")
    return value


def base_url() -> str:
    return required_env("BASE_URL").rstrip("/")


def bootstrap_org(name: str) -> dict[str, str]:
    """scripts/bootstrap-admin --org NAME --state $EDGERUNNER_STATE_DIR -> {organizationId, apiKey}."""
    result = subprocess.run(
        [str(ROOT / "scripts" / "bootstrap-admin"), "--org", f"{name}-{uuid.uuid4().hex[:8]}",
         "--state", required_env("EDGERUNNER_STATE_DIR")],
        cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"bootstrap-admin failed: {result.stdout}\n{result.stderr}")
    line = [line for line in result.stdout.splitlines() if line.strip()][-1]
    parsed = json.loads(line)
    return {"organizationId": parsed["organizationId"], "apiKey": parsed["apiKey"]}


def register_runner(api_key: str) -> dict[str, Any]:
    """POST /api/remote-runners -> {"runner": Runner, "bootstrapToken"}."""
    body = {
        "name": "sdk-interop",
        "runnerKey": f"sdk-interop-{uuid.uuid4().hex}",
        "capabilities": {"executionKinds": ["prompt"], "runtimes": ["python3.12"]},
    }
    response = httpx.post(
        f"{base_url()}/api/remote-runners",
        json=body,
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=30,
    )
    if response.status_code != 201:
        raise AssertionError(f"registration answered {response.status_code}: {response.text}")
    return response.json()


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def exchange(runner_id: str, token: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    async with RemoteRunnerWorker(base_url=base_url(), runner_id=runner_id, bootstrap_token=token) as worker:
        claims = await worker.exchange_credential()
        return claims, worker._session  # noqa: SLF001 - the session the SDK will sign with


class SdkSessionTest(unittest.TestCase):
    def test_sdk_is_the_pinned_version(self) -> None:
        self.assertEqual(version("evalgate-sdk"), SDK_VERSION)

    def test_sdk_exchanges_a_bootstrap_token(self) -> None:
        org = bootstrap_org("sdk-session")
        registered = register_runner(org["apiKey"])
        runner_id = registered["runner"]["id"]
        token = registered["bootstrapToken"]

        before = datetime.now(timezone.utc)
        claims, session = asyncio.run(exchange(runner_id, token))
        self.assertEqual(claims["runnerId"], runner_id)
        self.assertEqual(claims["organizationId"], org["organizationId"])
        self.assertEqual(set(claims["scopes"]), RUNNER_SCOPES)
        expires = parse_time(claims["expiresAt"])
        self.assertTrue(claims["expiresAt"].endswith("Z"), claims)
        self.assertGreater(expires, datetime.now(timezone.utc))
        self.assertLessEqual(expires, before + timedelta(minutes=10, seconds=5))

        self.assertIsNotNone(session)
        assert session is not None
        signing = session["jobSigning"]
        self.assertEqual(signing["algorithm"], "hmac-sha256")
        self.assertTrue(signing["keyId"].startswith("rk_"), signing)
        self.assertTrue(signing["secret"], signing)

        # The credential the SDK holds works on the runner's own record.
        me = httpx.get(
            f"{base_url()}/api/remote-runners/self",
            headers={"Authorization": f"Bearer {session['token']}"},
            timeout=30,
        )
        self.assertEqual(me.status_code, 200, me.text)
        self.assertEqual(me.json()["id"], runner_id)

    def test_sdk_reports_a_wrong_token_as_401(self) -> None:
        org = bootstrap_org("sdk-wrong-token")
        registered = register_runner(org["apiKey"])
        runner_id = registered["runner"]["id"]

        with self.assertRaises(RemoteRunnerProtocolError) as raised:
            asyncio.run(exchange(runner_id, "erb_" + "0" * 64))
        self.assertEqual(raised.exception.status, 401)
        self.assertEqual(raised.exception.code, "AUTHENTICATION_FAILED")

        # Control: the real token works for the same runner.
        claims, _ = asyncio.run(exchange(runner_id, registered["bootstrapToken"]))
        self.assertEqual(claims["runnerId"], runner_id)


if __name__ == "__main__":
    unittest.main()
