"""GET /metrics read as Prometheus reads it: parsed by the Prometheus project's own Python
parser (`prometheus_client.parser.text_string_to_metric_families`), and every sample checked
against the server's own records (the queues view, the job list's counts, the runner list).

Run against a live local server (scripts/test sets the environment, in its lane "metrics"):

    BASE_URL=http://127.0.0.1:PORT EDGERUNNER_STATE_DIR=DIR \\
        .venv/bin/python -m unittest discover -s tests/metrics -p 'test_*.py'

Every test fails (never skips) when BASE_URL or EDGERUNNER_STATE_DIR is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import unittest
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "python3.12"
LIMITS = {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1048576}


def required_env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise AssertionError(f"{name} is not set: run the metrics suite through scripts/test")
    return value


def call(method: str, path: str, key: str | None, body: Any = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        required_env("BASE_URL").rstrip("/") + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={**({"Authorization": f"Bearer {key}"} if key else {}),
                 **({"Content-Type": "application/json"} if body is not None else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def ok(method: str, path: str, key: str, body: Any = None) -> Any:
    status, _, data = call(method, path, key, body)
    if status not in (200, 201):
        raise AssertionError(f"{method} {path} answered {status}: {data[:500]!r}")
    return json.loads(data)


def bootstrap_org(name: str) -> dict[str, str]:
    for _attempt in range(3):
        result = subprocess.run(
            [str(ROOT / "scripts" / "bootstrap-admin"), "--org", f"{name}-{uuid.uuid4().hex[:8]}",
             "--state", required_env("EDGERUNNER_STATE_DIR")],
            cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode == 0 or "SQLITE_BUSY" not in result.stdout + result.stderr:
            break
    if result.returncode != 0:
        raise AssertionError(f"bootstrap-admin failed: {result.stdout}\n{result.stderr}")
    return json.loads([line for line in result.stdout.splitlines() if line.strip()][-1])


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, by name and labels (sorted)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


class MetricsTests(unittest.TestCase):
    def setUp(self) -> None:
        org = bootstrap_org("metrics")
        self.org_id, self.key = org["organizationId"], org["apiKey"]
        artifact = ok("POST", "/api/releases/artifacts", self.key,
                      {"kind": "prompt", "name": f"metrics-{uuid.uuid4().hex[:8]}"})
        version = ok("POST", f"/api/releases/artifacts/{artifact['id']}/versions", self.key,
                     {"content": {"template": "{{q}}"}})
        ok("POST", f"/api/releases/versions/{version['id']}/promote", self.key, {"environment": "staging"})
        self.subject = {"kind": "prompt", "artifactId": artifact["id"], "versionId": version["id"],
                        "environment": "staging"}

    def enqueue(self, tags: list[str]) -> dict[str, Any]:
        return ok("POST", "/api/remote-runners/jobs", self.key, {
            "idempotencyKey": f"metrics-{uuid.uuid4().hex}", "subject": self.subject, "input": {"tags": tags},
            "requirements": {"executionKind": "prompt", "runtime": RUNTIME, "limits": LIMITS, "tags": tags}})

    def test_every_sample_is_what_the_server_records(self) -> None:
        for tags in ([], [], ["gpu"]):
            self.enqueue(tags)
        registered = ok("POST", "/api/remote-runners", self.key, {
            "name": "metrics", "runnerKey": f"metrics-{uuid.uuid4().hex}", "maxConcurrentJobs": 2,
            "capabilities": {"executionKinds": ["prompt"], "runtimes": [RUNTIME]}})
        ok("POST", "/api/remote-runners/session", None,
           {"runnerId": registered["runner"]["id"], "bootstrapToken": registered["bootstrapToken"]})
        scraper = ok("POST", "/api/developer/api-keys", self.key,
                     {"name": "scraper", "scopes": ["metrics:read"]})["apiKey"]

        status, headers, body = call("GET", "/metrics", scraper)
        self.assertEqual(status, 200, body[:300])
        content_type = {k.lower(): v for k, v in headers.items()}["content-type"]
        self.assertTrue(content_type.startswith("text/plain; version=0.0.4"), content_type)
        text = body.decode()
        found = samples(text)

        # The server's records: the queues view, read after the scrape (nothing moved between).
        view = ok("GET", "/api/remote-runners/queues", scraper)
        self.assertEqual(len(view["queues"]), 2, view)
        expected: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for queue in view["queues"]:
            q = queue["id"]
            expected[("edgerunner_queue_info", (("name", queue["name"]), ("queue", q)))] = 1
            for state, field in (("queued", "queued"), ("claimed", "claimed"), ("running", "running"),
                                 ("cancel_requested", "cancelRequested")):
                expected[("edgerunner_jobs", (("queue", q), ("state", state)))] = queue["jobs"][field]
            expected[("edgerunner_queue_oldest_queued_age_seconds", (("queue", q),))] = None
            for state in ("idle", "busy", "draining", "offline"):
                expected[("edgerunner_queue_runners", (("queue", q), ("state", state)))] = queue["runners"][state]
            expected[("edgerunner_queue_suggested_runners", (("queue", q),))] = queue["suggestedRunners"]
        runners = ok("GET", "/api/remote-runners", self.key)
        self.assertEqual(len(runners["runners"]), 1)
        for state in ("idle", "busy", "draining", "offline"):
            expected[("edgerunner_runners", (("state", state),))] = 1 if state == "idle" else 0
        expected[("edgerunner_read_capped", ())] = 0
        # Counters: nothing was claimed, streamed or completed in this organization.
        for name in ("claims_granted", "leases_lost", "requeues", "attempts_exhausted", "stream_bytes"):
            expected[(f"edgerunner_{name}_total", ())] = 0
        for outcome in ("succeeded", "failed", "cancelled", "duplicate", "conflict", "stale"):
            expected[("edgerunner_completions_total", (("outcome", outcome),))] = 0
        # The deployment's reaper passes: whatever the cron trigger ran on this server.
        expected[("edgerunner_reaper_passes_total", ())] = None
        self.assertEqual(set(found), set(expected), text)
        for sample, value in expected.items():
            if value is None:
                # An age (at least 0, no older than the test) or the deployment's pass count.
                self.assertTrue(0 <= found[sample] <= (600 if "age" in sample[0] else 10**9),
                                (sample, found[sample]))
            else:
                self.assertEqual(found[sample], value, sample)

        # And against the jobs themselves: 3 queued, 2 of them in the untagged queue.
        listed = ok("GET", "/api/remote-runners/jobs?state=queued", self.key)
        self.assertEqual(listed["counts"]["queued"], 3)
        queued = {q: v for (name, labels), v in found.items() if name == "edgerunner_jobs"
                  for q in [dict(labels)["queue"]] if dict(labels)["state"] == "queued"}
        self.assertEqual(sorted(queued.values()), [1, 2])
        self.assertEqual(sum(queued.values()), listed["counts"]["queued"])
        # The idle runner serves the untagged queue only; it takes 2 jobs at once.
        untagged = next(q for q in view["queues"] if q["routing"][4] == ["default"])
        self.assertEqual(found[("edgerunner_queue_runners", (("queue", untagged["id"]), ("state", "idle")))], 1)
        self.assertEqual(found[("edgerunner_queue_suggested_runners", (("queue", untagged["id"]),))], 1)

    def test_only_a_reading_key_scrapes(self) -> None:
        status, _, _ = call("GET", "/metrics", None)
        self.assertEqual(status, 401)
        status, _, body = call("GET", "/metrics", "erk_" + "0" * 64)
        self.assertEqual(status, 401, body)
        writer = ok("POST", "/api/developer/api-keys", self.key, {"name": "writer", "scopes": ["runs:write"]})
        status, _, body = call("GET", "/metrics", writer["apiKey"])
        self.assertEqual((status, json.loads(body)["error"]["code"]), (403, "FORBIDDEN"))
        # An admin key reads it too; the organization's own queues only (none yet).
        status, _, body = call("GET", "/metrics", self.key)
        self.assertEqual(status, 200)
        self.assertNotIn("edgerunner_jobs{", body.decode())


if __name__ == "__main__":
    unittest.main()
