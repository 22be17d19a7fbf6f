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

Every wait is a poll with a deadline; sleeps only pace polls and retries.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import hashlib
import http.client
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "python3.12"
TERMINAL = ("succeeded", "failed", "cancelled")
UNFINISHED = ("queued", "claimed", "running", "cancel_requested", "lost")


# ------------------------------------------------------------------------------------------------
# Hashing, time
# ------------------------------------------------------------------------------------------------

def stable_json(value: Any) -> str:
    """The protocol's canonical JSON (the SDK's json.dumps settings); our values hold no floats."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def H(value: Any) -> str:
    return hashlib.sha256(stable_json(value).encode("utf-8")).hexdigest()


def now_rfc3339() -> str:
    now = dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def parse_time(text: str | None) -> float | None:
    """RFC 3339 (as the server writes it) to Unix seconds."""
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def log(message: str) -> None:
    t = time.strftime("%H:%M:%S")
    print(f"[chaos {t}] {message}", file=sys.stderr, flush=True)


def poll(what: str, limit: float, check: Callable[[], Any], every: float = 0.25) -> Any:
    """Calls `check` until it returns something truthy, at most `limit` seconds; raises Timeout."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise Timeout(f"{what}: not within {limit:.0f} s")
        time.sleep(every)


class Timeout(Exception):
    pass


def pct(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


# ------------------------------------------------------------------------------------------------
# HTTP
# ------------------------------------------------------------------------------------------------

class NoAnswer(Exception):
    """The request got no HTTP answer (connection refused or reset, timeout)."""


def request(base: str, method: str, path: str, body: Any = None, bearer: str | None = None,
         timeout: float = 30.0) -> tuple[int, Any]:
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    headers = {"accept": "application/json"}
    data = None
    if body is not None:
        data = stable_json(body).encode("utf-8")
        headers["content-type"] = "application/json"
    if bearer:
        headers["authorization"] = f"Bearer {bearer}"
    try:
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
    except (OSError, http.client.HTTPException) as error:
        raise NoAnswer(f"{method} {path}: {error!r}") from error
    finally:
        conn.close()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode("utf-8", "replace")
    return response.status, parsed


def error_code(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"].get("code")
    return None


# ------------------------------------------------------------------------------------------------
# The server
# ------------------------------------------------------------------------------------------------

class Server:
    """A `wrangler dev` on state `state`, started through scripts/lib.sh. `url` is workerd's own
    socket, which moves on every restart; clients read it per request."""

    def __init__(self, state: Path):
        self.state = state
        self.dev_vars = state / "dev.vars"
        self.pid: int | None = None
        self.url = ""
        self.starts = 0
        self.served_at = 0.0
        self.lock = threading.Lock()
        state.mkdir(parents=True, exist_ok=True)
        if not self.dev_vars.exists():
            self.dev_vars.write_text(
                f"REMOTE_RUNNER_SIGNING_SECRET={os.urandom(32).hex()}\nCRON_SECRET={os.urandom(32).hex()}\n")

    def start(self) -> float:
        """Starts the server and waits until it serves; returns how long that took (seconds)."""
        started = time.monotonic()
        old_log = self.state / "wrangler-dev.log"
        if old_log.exists():
            old_log.rename(self.state / f"wrangler-dev.{self.starts}.log")
        script = (
            'source scripts/lib.sh\n'
            'EDGERUNNER_DEV_VARS="$3" start_local_server "$1" "$2"\n'
            'find_direct_url\n'
            'echo "CHAOS-SERVER $SERVER_PID ${DIRECT_URL:-$BASE_URL}"\n')
        port = free_port()
        out = subprocess.run(["bash", "-c", script, "chaos", str(self.state), str(port), str(self.dev_vars)],
                             cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
        line = next((l for l in out.stdout.splitlines() if l.startswith("CHAOS-SERVER ")), None)
        if out.returncode != 0 or not line:
            raise RuntimeError(f"the server did not start: {out.stdout}\n{out.stderr}")
        _, pid, url = line.split()
        with self.lock:
            self.pid, self.url = int(pid), url
            self.starts += 1
            self.served_at = time.time()
        (self.state / "server.pid").write_text(pid)
        return time.monotonic() - started

    def processes(self) -> list[int]:
        """Every process in the server's session (wrangler, node, workerd)."""
        if self.pid is None:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) == self.pid:
                        found.append(int(entry))
                except OSError:
                    pass
        return found

    def kill(self) -> float:
        """SIGKILLs the whole server (process group and session) and waits until every process of
        it is gone. Returns the kill's time."""
        assert self.pid is not None
        at = time.time()
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        poll("the killed server's processes to exit", 30, lambda: not self.processes(), every=0.1)
        return at

    def stop(self) -> None:
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, signal.SIGTERM)
            poll("the server to stop", 5, lambda: not self.processes(), every=0.1)
        except (ProcessLookupError, Timeout):
            pass
        try:
            self.kill()
        except Timeout:
            pass
        self.pid = None

    def sql(self, query: str) -> list[dict[str, Any]]:
        """Rows of one SELECT, read with `wrangler d1 execute --local` on the server's state."""
        script = ('source scripts/lib.sh\n'
                  'wrangler d1 execute DB --local --persist-to "$1" --json --command "$2"\n')
        last = ""
        for attempt in range(8):
            out = subprocess.run(["bash", "-c", script, "chaos", str(self.state), query], cwd=ROOT,
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
            if out.returncode == 0:
                start = out.stdout.find("[")
                return json.loads(out.stdout[start:])[0]["results"]
            last = out.stdout + out.stderr
            time.sleep(0.5 + attempt)  # SQLITE_BUSY against the server's own writes: back off
        raise RuntimeError(f"wrangler d1 execute failed: {last}")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------
# An organization, its release, its jobs (API key)
# ------------------------------------------------------------------------------------------------

BOOTSTRAP_LOCK = threading.Lock()


class Org:
    def __init__(self, server: Server, name: str):
        self.server = server
        # bootstrap-admin writes the D1 file beside the running server: one at a time, and again
        # (bounded) when it meets the server's own transaction (SQLITE_BUSY).
        with BOOTSTRAP_LOCK:
            for attempt in range(8):
                out = subprocess.run([str(ROOT / "scripts/bootstrap-admin"), "--org", name, "--state", str(server.state)],
                                     cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
                if out.returncode == 0:
                    break
                time.sleep(0.5 + attempt)
            else:
                raise RuntimeError(f"bootstrap-admin failed 8 times: {out.stdout}{out.stderr}")
        answer = json.loads(out.stdout.strip().splitlines()[-1])
        self.id, self.key = answer["organizationId"], answer["apiKey"]
        artifact = self.expect("POST", "/api/releases/artifacts", {"kind": "prompt", "name": f"{name}-prompt"}, 201)
        version = self.expect("POST", f"/api/releases/artifacts/{artifact['id']}/versions",
                              {"content": {"template": "chaos {{n}}"}}, 201)
        self.expect("POST", f"/api/releases/versions/{version['id']}/promote", {"environment": "staging"}, 200)
        self.subject = {"kind": "prompt", "artifactId": artifact["id"], "versionId": version["id"],
                        "environment": "staging"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """An admin request; retried (bounded) when it got no answer or a 5xx."""
        last: Any = None
        for attempt in range(20):
            try:
                status, answer = request(self.server.url, method, path, body, self.key)
            except NoAnswer as error:
                last = error
            else:
                if status < 500:
                    return status, answer
                last = (status, answer)
            time.sleep(0.25 * (attempt + 1))
        raise RuntimeError(f"{method} {path}: no usable answer: {last}")

    def counters(self) -> dict[str, float]:
        """The organization's counters as GET /metrics says them: each `*_total` sample (its
        labels included in the key) and its value."""
        status, text = self.call("GET", "/metrics")
        if status != 200 or not isinstance(text, str):
            raise RuntimeError(f"GET /metrics -> {status} {str(text)[:200]}")
        found = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            if sample.split("{")[0].endswith("_total"):
                found[sample] = float(value)
        return found

    def expect(self, method: str, path: str, body: Any, status: int) -> Any:
        got, answer = self.call(method, path, body)
        if got != status and not (status == 201 and got == 200):
            raise RuntimeError(f"{method} {path} → {got} {answer}, expected {status}")
        return answer

    def register(self, name: str, capacity: int) -> tuple[str, str]:
        answer = self.expect("POST", "/api/remote-runners", {
            "name": name, "runnerKey": name, "maxConcurrentJobs": capacity,
            "capabilities": {"executionKinds": ["prompt"], "runtimes": [RUNTIME]}}, 201)
        return answer["runner"]["id"], answer["bootstrapToken"]

    def enqueue(self, keys: list[str], wall_seconds: int = 120) -> list[str]:
        requirements = {
            "executionKind": "prompt", "runtime": RUNTIME,
            "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": wall_seconds, "outputBytes": 1048576},
            "network": {"mode": "deny_all"}, "streaming": True, "cancellation": True}

        def one(key: str) -> str:
            job = self.expect("POST", "/api/remote-runners/jobs", {
                "idempotencyKey": key, "subject": self.subject, "input": {"key": key},
                "requirements": requirements}, 201)
            return job["id"]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            return list(pool.map(one, keys))

    def job(self, job_id: str) -> dict[str, Any]:
        return self.expect("GET", f"/api/remote-runners/jobs/{job_id}", None, 200)

    def jobs(self, job_ids: list[str]) -> dict[str, dict[str, Any]]:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            return dict(zip(job_ids, pool.map(self.job, job_ids)))

    def counts(self) -> dict[str, int]:
        return self.expect("GET", "/api/remote-runners/jobs?limit=1", None, 200)["counts"]

    def stream(self, job_id: str, attempt: int) -> list[dict[str, Any]]:
        """Every stored chunk of one attempt, read page by page."""
        chunks, after = [], "0.-1"
        for _ in range(1000):
            page = self.expect("GET", f"/api/remote-runners/jobs/{job_id}/stream?attempt={attempt}&limit=500&after={after}",
                               None, 200)
            chunks.extend(page["chunks"])
            if not page["more"]:
                return chunks
            after = page["cursor"]
        raise RuntimeError(f"the stream of {job_id} did not end within 1000 pages")

    def bundle(self, job_id: str) -> bytes:
        url = urllib.parse.urlsplit(self.server.url)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        try:
            conn.request("GET", f"/api/remote-runners/jobs/{job_id}/bundle",
                         headers={"authorization": f"Bearer {self.key}"})
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"bundle of {job_id}: {response.status} {body[:300]!r}")
        return body


def event_detail(event: dict[str, Any]) -> dict[str, Any]:
    detail = event.get("detail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            return {}
    return detail if isinstance(detail, dict) else {}


# ------------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------------

class Report:
    def __init__(self) -> None:
        self.sections: list[tuple[str, list[str]]] = []
        self.promises: list[tuple[str, str, bool, str]] = []  # scenario, promise, held, detail
        self.lock = threading.Lock()

    def promise(self, scenario: str, what: str, held: bool, detail: str = "") -> bool:
        """Records a promise; any broken one fails the run."""
        with self.lock:
            self.promises.append((scenario, what, bool(held), detail))
        label = "ok" if held else "BROKEN"
        log(f"{scenario}: {label}: {what}{(' — ' + detail) if detail else ''}")
        return bool(held)

    def section(self, title: str, lines: list[str]) -> None:
        with self.lock:
            self.sections.append((title, lines))

    def broken(self) -> list[tuple[str, str, bool, str]]:
        return [p for p in self.promises if not p[2]]

    def markdown(self, header: list[str]) -> str:
        out = ["# Chaos run", ""] + header + [""]
        for title, lines in self.sections:
            out += [f"## {title}", ""] + lines + [""]
        out += ["## Promises", "", "| scenario | promise | held | detail |", "|---|---|---|---|"]
        for scenario, what, held, detail in self.promises:
            cell = detail.replace("|", "\\|").replace("\n", " ")
            if len(cell) > 600:
                cell = cell[:600] + " …"
            verdict = "yes" if held else "**NO**"
            out.append(f"| {scenario} | {what} | {verdict} | {cell} |")
        broken = self.broken()
        out += ["", f"**{len(self.promises) - len(broken)} of {len(self.promises)} promises held.**", ""]
        return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# CLI runners (`edgerunner runner start`)
# ------------------------------------------------------------------------------------------------

def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


class CliRunner:
    def __init__(self, ctx: "Context", runner_id: str, token: str, name: str, command: str, lease: int = 15):
        self.ctx, self.runner_id, self.token, self.name, self.command, self.lease = ctx, runner_id, token, name, command, lease
        self.dir = ctx.scratch / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        (self.dir / "work").mkdir(exist_ok=True)
        env = {"PATH": os.environ.get("PATH", ""), "XDG_CONFIG_HOME": str(self.dir / "xdg"),
               "EVALGATE_BASE_URL": self.ctx.server.url, "EVALGATE_RUNNER_ID": self.runner_id,
               "EVALGATE_RUNNER_BOOTSTRAP_TOKEN": self.token, "RUST_LOG": "warn,edgerunner=info"}
        stderr = open(self.dir / f"runner.{self.starts}.log", "wb")
        self.proc = subprocess.Popen(
            [str(self.ctx.bin), "runner", "start", "--log-format", "json", "--poll-interval", "0.2",
             "--heartbeat-interval", "2", "--lease-seconds", str(self.lease), "--grace", "1",
             "--work-dir", str(self.dir / "work"), "--exec", self.command],
            env=env, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        stderr.close()
        self.ctx.track(self)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> float:
        """SIGKILL to the runner and to each job's process group (a job runs in its own group,
        so it would outlive the runner). Returns the kill's time."""
        assert self.proc is not None
        jobs = children_of(self.proc.pid)
        at = time.time()
        self.proc.kill()
        for child in jobs:
            try:
                os.killpg(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait(timeout=30)
        return at

    def stop(self, limit: float = 20) -> None:
        """SIGTERM (drain), then SIGKILL at the deadline."""
        if not self.alive():
            return
        assert self.proc is not None
        jobs = children_of(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
        for child in jobs:
            try:
                os.killpg(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# ------------------------------------------------------------------------------------------------
# A runner speaking the protocol over HTTP (threads)
# ------------------------------------------------------------------------------------------------

class Lost(Exception):
    """The claim is no longer this runner's (requeued, lease expired, released)."""


# Requests on their way, by route ("stream", "complete", "claim", …): what a crash interrupts.
INFLIGHT: dict[str, int] = {}
INFLIGHT_LOCK = threading.Lock()


class ProtocolRunner:
    """One runner identity; several threads may share it (each holding its own claims)."""

    def __init__(self, server: Server, runner_id: str, token: str, capacity: int):
        self.server, self.runner_id, self.token, self.capacity = server, runner_id, token, capacity
        self.credential: str | None = None
        self.lock = threading.Lock()

    def session(self, deadline: float) -> str:
        with self.lock:
            while True:
                try:
                    status, answer = request(self.server.url, "POST", "/api/remote-runners/session",
                                          {"runnerId": self.runner_id, "bootstrapToken": self.token})
                    if status == 200:
                        self.credential = answer["token"]
                        return self.credential
                except NoAnswer:
                    pass
                if time.monotonic() > deadline:
                    raise Timeout(f"no session for {self.runner_id}")
                time.sleep(0.2)

    def call(self, method: str, path: str, body: Any, deadline: float, log_to: list | None = None) -> tuple[int, Any]:
        """A runner request, retried with the same body while there is no answer or a 5xx other
        than the protocol's own 503s (the server may be down), and once more after a 401 with a
        fresh session. `log_to` gets one entry per send: the status, or "no-answer"."""
        while True:
            credential = self.credential or self.session(deadline)
            op = path.rsplit("/", 1)[-1] if path.count("/") <= 3 else path.split("/")[-2]
            with INFLIGHT_LOCK:
                INFLIGHT[op] = INFLIGHT.get(op, 0) + 1
            try:
                status, answer = request(self.server.url, method, path, body, credential)
            except NoAnswer:
                with INFLIGHT_LOCK:
                    INFLIGHT[op] -= 1
                if log_to is not None:
                    log_to.append("no-answer")
                if time.monotonic() > deadline:
                    raise Timeout(f"{method} {path}: no answer before the deadline")
                time.sleep(0.2)
                continue
            with INFLIGHT_LOCK:
                INFLIGHT[op] -= 1
            if log_to is not None:
                log_to.append(status)
            if status == 401:
                if credential == self.credential:
                    self.credential = None
                if time.monotonic() > deadline:
                    raise Timeout(f"{method} {path}: 401 until the deadline")
                continue
            if status >= 500 and error_code(answer) not in ("RUNNER_AT_CAPACITY", "RUNNER_NOT_ACTIVE"):
                if time.monotonic() > deadline:
                    raise Timeout(f"{method} {path}: {status} until the deadline")
                time.sleep(0.2)
                continue
            return status, answer


class Held:
    """A claim held by a protocol thread, and what it sent under it."""

    def __init__(self, runner: ProtocolRunner, claim: dict[str, Any], signed: dict[str, Any]):
        self.runner = runner
        self.claim = claim
        self.envelope = signed["envelope"]
        self.job_id = claim["jobId"]
        self.claim_id = claim["id"]
        self.attempt = claim["dispatchAttempt"]
        self.last_checksum: str | None = None
        self.chunks: list[dict[str, Any]] = []  # {sequence, checksum, sends: [...], outcome}
        self.completions: list[dict[str, Any]] = []  # {checksum, sends, outcome, decision}
        self.last_beat = 0.0
        self.lease_expires: float | None = None

    def heartbeat(self, extend: int, deadline: float) -> None:
        status, answer = self.runner.call("POST", "/api/remote-runners/heartbeat",
                                          {"claimId": self.claim_id, "extendSeconds": extend}, deadline)
        if status != 200:
            raise Lost(f"heartbeat {status} {error_code(answer)}")
        self.last_beat = time.monotonic()
        self.lease_expires = parse_time(answer.get("leaseExpiresAt"))

    def chunk(self, payload: dict[str, Any], deadline: float) -> None:
        sequence = len(self.chunks)
        body = {"jobId": self.job_id, "claimId": self.claim_id, "dispatchAttempt": self.attempt,
                "sequence": sequence, "kind": "log", "previousChecksum": self.last_checksum,
                "payload": payload, "payloadHash": H(payload), "emittedAt": now_rfc3339()}
        body["checksum"] = H({k: body[k] for k in ("claimId", "dispatchAttempt", "emittedAt", "jobId", "kind",
                                                    "payloadHash", "previousChecksum", "sequence")})
        record = {"sequence": sequence, "checksum": body["checksum"], "sends": [], "outcome": None}
        self.chunks.append(record)
        status, answer = self.runner.call("POST", "/api/remote-runners/stream", body, deadline, record["sends"])
        if status == 200 and answer.get("checksum") == body["checksum"]:
            record["outcome"] = "acked"
        elif status == 409 and error_code(answer) == "STREAM_DUPLICATE_CHECKSUM":
            record["outcome"] = "acked-as-duplicate"  # an earlier send of it was stored
        else:
            record["outcome"] = f"refused {status} {error_code(answer)}"
            raise Lost(f"chunk {sequence}: {status} {error_code(answer)}")
        self.last_checksum = body["checksum"]

    def evidence_run(self, deadline: float) -> str:
        status, answer = self.runner.call("POST", f"/api/remote-runners/jobs/{self.job_id}/evidence/runs",
                                          {"name": "chaos"}, deadline)
        if status not in (200, 201):
            raise Lost(f"evidence run {status} {error_code(answer)}")
        return answer["id"]

    def complete(self, run_id: str, deadline: float) -> str:
        fields = {"jobId": self.job_id, "claimId": self.claim_id, "runnerId": self.runner.runner_id,
                  "organizationId": self.envelope["organizationId"], "dispatchAttempt": self.attempt,
                  "status": "succeeded", "inputHash": self.envelope["inputHash"],
                  "resultHash": H({"exitCode": 0, "job": self.job_id}),
                  "finalStreamChecksum": self.last_checksum,
                  "evidence": {"evaluationRunId": run_id, "testResultIds": [], "costRecordIds": [],
                               "modelCallIds": [], "traceId": None},
                  "completedAt": now_rfc3339()}
        fields["completionChecksum"] = H(fields)
        record = {"checksum": fields["completionChecksum"], "sends": [], "outcome": None, "decision": None}
        self.completions.append(record)
        status, answer = self.runner.call("POST", "/api/remote-runners/complete", fields, deadline, record["sends"])
        if status == 200:
            record["outcome"] = "acked"
            record["decision"] = answer.get("decision")
            return answer.get("decision")
        record["outcome"] = f"refused {status} {error_code(answer)}"
        raise Lost(f"completion {status} {error_code(answer)}")


def claim(runner: ProtocolRunner, deadline: float) -> tuple[str, Any]:
    """One claim request: ("claimed", Held) | ("empty", None) | ("capacity", None) | ("inactive", None)."""
    status, answer = runner.call("POST", "/api/remote-runners/claim", {}, deadline)
    if status == 200:
        return "claimed", Held(runner, answer["claim"], answer["signedJob"])
    if status == 204:
        return "empty", None
    code = error_code(answer)
    if code == "RUNNER_AT_CAPACITY":
        return "capacity", None
    if code == "RUNNER_NOT_ACTIVE":
        return "inactive", None
    raise RuntimeError(f"claim → {status} {answer}")


# ------------------------------------------------------------------------------------------------
# The context
# ------------------------------------------------------------------------------------------------

class Context:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.short = args.short
        self.bin = Path(args.bin).resolve()
        self.state_root = Path(args.state_root).resolve()
        self.scratch = self.state_root / "scratch"
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.server = Server(self.state_root / "server")
        self.report = Report()
        self.runners: list[CliRunner] = []
        self.lock = threading.Lock()
        self.figures: dict[str, Any] = {}
        # Jobs found claimed or running well past their lease with no recovery (their alarm is
        # missing): see settle() and RELIABILITY.md, "Every lease has an alarm".
        self.missing_alarms: list[dict[str, Any]] = []

    def track(self, runner: CliRunner) -> None:
        with self.lock:
            if runner not in self.runners:
                self.runners.append(runner)

    def stop_runners(self) -> None:
        for runner in list(self.runners):
            try:
                runner.stop(limit=5)
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass


def wait_terminal(org: Org, job_ids: list[str], limit: float, what: str) -> bool:
    """Polls the organization's counts until no job is unfinished; False at the deadline."""
    try:
        poll(what, limit, lambda: sum(org.counts().get(s, 0) for s in UNFINISHED) == 0, every=0.5)
        return True
    except Timeout:
        return False


def verify_bundles(ctx: Context, org: Org, job_ids: list[str]) -> list[str]:
    """`edgerunner verify` on each job's custody bundle; returns the failures."""
    folder = ctx.scratch / f"bundles-{org.id}"
    folder.mkdir(exist_ok=True)

    def one(job_id: str) -> str | None:
        try:
            path = folder / f"{job_id}.json"
            path.write_bytes(org.bundle(job_id))
            out = subprocess.run([str(ctx.bin), "verify", str(path)], capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                return f"{job_id}: verify exit {out.returncode}: {(out.stdout + out.stderr).strip()[:300]}"
            return None
        except Exception as error:  # noqa: BLE001 - reported as a failure
            return f"{job_id}: {error}"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return [f for f in pool.map(one, job_ids) if f]


def counted_attempts(job: dict[str, Any]) -> int:
    return int(job["dispatchAttempt"]) - int(job.get("releasedAttempts") or 0)


def accepted_count(job: dict[str, Any]) -> int:
    return sum(1 for c in job.get("completions", []) if c.get("decision") == "accepted")


# ------------------------------------------------------------------------------------------------
# Scenario 1: runner loss
# ------------------------------------------------------------------------------------------------

LOSS_COMMAND = ('i=0; while [ $i -lt 15 ]; do i=$((i+1)); '
                'echo "chaos $EDGERUNNER_JOB_ID attempt $EDGERUNNER_ATTEMPT line $i"; sleep 0.2; done; '
                'echo "done $EDGERUNNER_JOB_ID" >&2')


def scenario_loss(ctx: Context) -> None:
    name = "loss"
    n_runners, n_jobs = (10, 50) if ctx.short else (15, 200)
    n_kills = math.ceil(0.3 * n_runners)
    n_restarts = math.ceil(n_kills / 2)
    org = Org(ctx.server, f"chaos-loss-{os.urandom(3).hex()}")
    job_ids = org.enqueue([f"loss-{i}-{os.urandom(4).hex()}" for i in range(n_jobs)])
    runners = []
    for i in range(n_runners):
        runner_id, token = org.register(f"loss-runner-{i}", 1)
        runners.append(CliRunner(ctx, runner_id, token, f"loss-runner-{i}-{runner_id[-6:]}", LOSS_COMMAND))
    started = time.time()
    for runner in runners:
        runner.start()
    log(f"{name}: {n_runners} runners on {n_jobs} jobs; {n_kills} to be killed mid-job, {n_restarts} restarted")

    victims = random.sample(runners, n_kills)
    kills: list[dict[str, Any]] = []
    last_kill = 0.0
    for index, victim in enumerate(victims):
        # Different times: the i-th kill no earlier than 2 + 4i s after the start, nor than 3 s
        # after the kill before it.
        not_before = max(started + 2 + 4 * index, last_kill + 3)
        while time.time() < not_before:
            time.sleep(0.1)

        def running_claim() -> dict[str, Any] | None:
            claims = org.expect("GET", f"/api/remote-runners/{victim.runner_id}/claims?limit=5", None, 200)["claims"]
            for c in claims:
                started_at = parse_time(c.get("startedAt"))
                # Mid-job: its first heartbeat is in (the command starts after it) and it is young
                # enough (the command runs 3 s) that the kill lands before the completion.
                if c["state"] == "active" and started_at and time.time() - started_at < 1.5:
                    return c
            return None
        try:
            held = poll(f"runner {victim.runner_id} to be mid-job", 60, running_claim, every=0.1)
        except Timeout as error:
            ctx.report.promise(name, f"kill {index + 1} found its runner mid-job", False, str(error))
            continue
        at = last_kill = victim.kill()
        kills.append({"runner": victim, "job": held["jobId"], "attempt": held["dispatchAttempt"], "at": at,
                      "restart": index < n_restarts})
        log(f"{name}: killed {victim.runner_id} mid-job {held['jobId']} (attempt {held['dispatchAttempt']})")

    # Requeue lag: kill → that job's `job.requeued` for the killed attempt. Restart the chosen
    # victims once their job has been requeued (they come back from `lost`).
    lags: list[float] = []
    lag_rows = []
    for kill in kills:
        def requeued() -> dict[str, Any] | None:
            job = org.job(kill["job"])
            for event in job["events"]:
                if event["type"] == "job.requeued" and event.get("attempt") == kill["attempt"]:
                    return event
            if job["state"] in TERMINAL and not any(e["type"] == "job.lease_lost" for e in job["events"]):
                return {"type": "finished", "job": job}
            return None
        try:
            event = poll(f"job {kill['job']} to be requeued", 60, requeued, every=0.2)
        except Timeout as error:
            ctx.report.promise(name, f"the job of killed runner {kill['runner'].runner_id} is requeued", False, str(error))
            continue
        if event["type"] == "finished":
            lag_rows.append(f"| {kill['at'] - started:.1f} | {kill['job']} | {kill['attempt']} | "
                            f"finished before the kill took effect | — |")
        else:
            lag = parse_time(event["at"]) - kill["at"]
            lags.append(lag)
            lag_rows.append(f"| {kill['at'] - started:.1f} | {kill['job']} | {kill['attempt']} | {event['actor']} | {lag:.2f} |")
        if kill["restart"]:
            kill["runner"].start()
            log(f"{name}: restarted {kill['runner'].runner_id}")

    finished = wait_terminal(org, job_ids, 240 if ctx.short else 480, "every job terminal")
    elapsed = time.time() - started
    for runner in runners:
        runner.stop()
    jobs = org.jobs(job_ids)
    states: dict[str, int] = {}
    for job in jobs.values():
        states[job["state"]] = states.get(job["state"], 0) + 1
    not_terminal = [j for j, job in jobs.items() if job["state"] not in TERMINAL]
    over = [f"{j}: {counted_attempts(job)}" for j, job in jobs.items() if counted_attempts(job) > 3]
    double = [f"{j}: {accepted_count(job)}" for j, job in jobs.items() if accepted_count(job) > 1]
    unsucceeded = [f"{j}: {job['state']}" for j, job in jobs.items() if job["state"] != "succeeded"]
    claims_per_attempt = []
    for j, job in jobs.items():
        attempts = [c["dispatchAttempt"] for c in job["claims"]]
        if len(attempts) != len(set(attempts)) or len(attempts) != job["dispatchAttempt"]:
            claims_per_attempt.append(f"{j}: attempts {attempts}, dispatchAttempt {job['dispatchAttempt']}")
    lost_and_requeued = sum(1 for job in jobs.values() for e in job["events"] if e["type"] == "job.requeued")
    released = sum(1 for job in jobs.values() for e in job["events"] if e["type"] == "job.released")
    failures = verify_bundles(ctx, org, job_ids)

    r = ctx.report
    r.promise(name, "every job ends terminal", finished and not not_terminal,
              f"{len(not_terminal)} not terminal: {not_terminal[:5]}" if not_terminal else f"states {states}")
    r.promise(name, "within three counted attempts", not over, "; ".join(over[:5]))
    r.promise(name, "every job succeeded (no kill hit one job three times)", not unsucceeded, "; ".join(unsucceeded[:5]))
    r.promise(name, "zero jobs with two accepted completions", not double, "; ".join(double[:5]))
    r.promise(name, "one claim per dispatched attempt", not claims_per_attempt, "; ".join(claims_per_attempt[:5]))
    r.promise(name, "every custody bundle passes `edgerunner verify`", not failures,
              f"{len(failures)} failed: " + "; ".join(failures[:3]) if failures else f"{len(job_ids)} verified")
    r.promise(name, "every kill's job was requeued by recovery", len(lags) + sum("finished" in x for x in lag_rows) == len(kills) == n_kills,
              f"{len(lags)} requeues measured for {len(kills)} kills (of {n_kills} planned)")
    r.section("Scenario 1: runner loss", [
        f"- runners: {n_runners} (`edgerunner runner start`, capacity 1, `--lease-seconds 15 --heartbeat-interval 2`), "
        f"jobs: {n_jobs} (each ~3 s of `sh` printing 15 lines and one to stderr)",
        f"- kills: {len(kills)} SIGKILLs mid-job ({n_kills} planned = 30% of the runners), "
        f"restarted: {sum(1 for k in kills if k['restart'])} (after their job was requeued)",
        f"- wall time to all terminal: {elapsed:.1f} s; final states: {states}",
        f"- `job.requeued` events: {lost_and_requeued}; `job.released` (restart hand-backs, shutdown): {released}",
        f"- requeue lag (kill → `job.requeued` `at`), seconds, min / median / max: **{pct(lags)}**",
        "",
        "| kill at (s after start) | job | attempt killed | requeued by | lag (s) |", "|---|---|---|---|---|", *lag_rows])
    ctx.figures["loss"] = {"runners": n_runners, "jobs": n_jobs, "kills": len(kills), "lags": lags,
                           "states": states, "elapsed": elapsed}


# ------------------------------------------------------------------------------------------------
# Scenario 2: claim race
# ------------------------------------------------------------------------------------------------

def capacity_overruns(rows: list[dict[str, Any]], capacity: dict[str, int], now_ms: int) -> list[str]:
    """From stored claim intervals [issued_at, ended_at): runners that at some instant held more
    active claims than their capacity. An end and a start at the same millisecond: end first."""
    by_runner: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        end = row["ended_at"] if row["ended_at"] is not None else now_ms
        by_runner.setdefault(row["runner_id"], []).append((row["issued_at"], 1))
        by_runner[row["runner_id"]].append((end, -1))
    found = []
    for runner, points in by_runner.items():
        held = peak = 0
        for _, delta in sorted(points, key=lambda p: (p[0], p[1])):
            held += delta
            peak = max(peak, held)
        if peak > capacity.get(runner, 0):
            found.append(f"{runner}: peak {peak} > capacity {capacity.get(runner)}")
    return found


def peak_per_runner(rows: list[dict[str, Any]], now_ms: int) -> dict[str, int]:
    peaks = {}
    for runner in {r["runner_id"] for r in rows}:
        points = []
        for r in rows:
            if r["runner_id"] == runner:
                points += [(r["issued_at"], 1), (r["ended_at"] if r["ended_at"] is not None else now_ms, -1)]
        held = peak = 0
        for _, d in sorted(points):
            held += d
            peak = max(peak, held)
        peaks[runner] = peak
    return peaks


def scenario_race(ctx: Context) -> None:
    name = "race"
    n_jobs = 100 if ctx.short else 400
    caps = [1, 2, 3, 4, 1, 2, 3, 4]
    threads_per_runner = 4
    org = Org(ctx.server, f"chaos-race-{os.urandom(3).hex()}")
    job_ids = org.enqueue([f"race-{i}-{os.urandom(4).hex()}" for i in range(n_jobs)])
    runners = []
    for i, cap in enumerate(caps):
        runner_id, token = org.register(f"race-runner-{i}", cap)
        runners.append(ProtocolRunner(ctx.server, runner_id, token, cap))
    granted: list[tuple[str, int, str, str]] = []  # job, attempt, claim, runner
    decisions: dict[str, list[str]] = {}
    errors: list[str] = []
    stats = {"claims": 0, "empty": 0, "capacity": 0}
    lock = threading.Lock()
    done = threading.Event()
    deadline = time.monotonic() + (150 if ctx.short else 300)

    def worker(runner: ProtocolRunner) -> None:
        idle = 0
        try:
            while not done.is_set() and time.monotonic() < deadline:
                outcome, held = claim(runner, deadline)
                with lock:
                    stats["claims"] += 1
                    if outcome in stats:
                        stats[outcome] += 1
                if outcome == "capacity":
                    time.sleep(0.02)
                    continue
                if outcome != "claimed":
                    idle += 1
                    with lock:
                        finished = sum(len(v) for v in decisions.values()) >= n_jobs
                    if finished or idle > 400:
                        return
                    time.sleep(0.05)
                    continue
                idle = 0
                with lock:
                    granted.append((held.job_id, held.attempt, held.claim_id, runner.runner_id))
                held.heartbeat(60, deadline)
                run_id = held.evidence_run(deadline)
                decision = held.complete(run_id, deadline)
                with lock:
                    decisions.setdefault(held.job_id, []).append(decision)
                    if sum(len(v) for v in decisions.values()) >= n_jobs:
                        done.set()
        except Exception as error:  # noqa: BLE001 - reported
            with lock:
                errors.append(f"{runner.runner_id}: {error!r}")

    started = time.time()
    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in runners for _ in range(threads_per_runner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.monotonic() + 5))
    elapsed = time.time() - started
    log(f"{name}: {len(threads)} threads done in {elapsed:.1f} s; {len(granted)} grants")

    rows = ctx.server.sql(
        f"SELECT id, job_id, runner_id, dispatch_attempt, state, issued_at, ended_at FROM job_claims "
        f"WHERE organization_id = '{org.id}'")
    now_ms = int(time.time() * 1000)
    capacity = {r.runner_id: r.capacity for r in runners}
    overruns = capacity_overruns(rows, capacity, now_ms)
    peaks = peak_per_runner(rows, now_ms)
    per_attempt: dict[tuple[str, int], int] = {}
    for row in rows:
        per_attempt[(row["job_id"], row["dispatch_attempt"])] = per_attempt.get((row["job_id"], row["dispatch_attempt"]), 0) + 1
    stored_twice = [k for k, v in per_attempt.items() if v > 1]
    client_pairs: dict[tuple[str, int], int] = {}
    for job, attempt, _, _ in granted:
        client_pairs[(job, attempt)] = client_pairs.get((job, attempt), 0) + 1
    granted_twice = [k for k, v in client_pairs.items() if v > 1]
    accepted = ctx.server.sql(
        f"SELECT job_id, COUNT(*) AS n FROM job_completions WHERE organization_id = '{org.id}' "
        f"AND decision = 'accepted' GROUP BY job_id")
    accepted_by_job = {r["job_id"]: r["n"] for r in accepted}
    counts = org.counts()
    not_once = [j for j in job_ids if accepted_by_job.get(j, 0) != 1]
    client_not_once = [j for j in job_ids if decisions.get(j, []) != ["accepted"]]

    r = ctx.report
    r.promise(name, "no worker error", not errors, "; ".join(errors[:3]))
    r.promise(name, "zero jobs claimed twice in one attempt (answers)", not granted_twice, str(granted_twice[:5]))
    r.promise(name, "zero jobs claimed twice in one attempt (stored claims)", not stored_twice, str(stored_twice[:5]))
    r.promise(name, "zero capacity overruns (stored claim intervals)", not overruns, "; ".join(overruns[:5]))
    r.promise(name, "every job succeeded", counts.get("succeeded") == n_jobs, f"counts {counts}")
    r.promise(name, "exactly one accepted completion per job (stored)", not not_once, f"{len(not_once)} jobs off: {not_once[:5]}")
    r.promise(name, "exactly one accepted answer per job (client)", not client_not_once,
              f"{len(client_not_once)} jobs off: {[(j, decisions.get(j)) for j in client_not_once[:5]]}")
    r.section("Scenario 2: claim race", [
        f"- workers: {len(threads)} threads ({len(runners)} runners of capacity {caps}, {threads_per_runner} threads each), "
        f"jobs: {n_jobs}, wall time {elapsed:.1f} s",
        f"- claim requests: {stats['claims']} (granted {len(granted)}, `204` {stats['empty']}, "
        f"`503 RUNNER_AT_CAPACITY` {stats['capacity']})",
        f"- stored claims: {len(rows)}; peak simultaneous claims per runner (capacity): "
        + ", ".join(f"{peaks.get(x.runner_id, 0)} ({x.capacity})" for x in runners),
        f"- (job, attempt) granted twice: answers {len(granted_twice)}, stored {len(stored_twice)}; "
        f"capacity overruns: {len(overruns)}; jobs with exactly one accepted completion: {n_jobs - len(not_once)} of {n_jobs}"])
    ctx.figures["race"] = {"workers": len(threads), "jobs": n_jobs, "claims": stats["claims"], "granted": len(granted),
                           "capacity": stats["capacity"], "overruns": len(overruns), "twice": len(stored_twice)}


# ------------------------------------------------------------------------------------------------
# Scenario 3: server crash
# ------------------------------------------------------------------------------------------------

class CrashPhase:
    """Protocol workers streaming and completing jobs of one organization while the server is
    SIGKILLed and restarted: at once (`down_past_leases` False: leases of 60 s outlive the
    outage), or once every lease of a job in flight (15 s) has lapsed."""

    def __init__(self, ctx: Context, phase: str, n_jobs: int, n_workers: int, chunks_per_job: int,
                 extend: int, down_past_leases: bool):
        self.ctx, self.phase, self.n_jobs, self.chunks_per_job = ctx, phase, n_jobs, chunks_per_job
        self.extend, self.down_past_leases = extend, down_past_leases
        self.org = Org(ctx.server, f"chaos-crash-{phase}-{os.urandom(3).hex()}")
        self.job_ids = self.org.enqueue([f"crash-{phase}-{i}-{os.urandom(4).hex()}" for i in range(n_jobs)])
        self.runners = []
        for i in range(n_workers):
            runner_id, token = self.org.register(f"crash-{phase}-runner-{i}", 1)
            self.runners.append(ProtocolRunner(ctx.server, runner_id, token, 1))
        self.helds: list[Held] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.acked = 0
        self.finished: set[str] = set()
        self.lost_claims: list[tuple[str, int, str]] = []
        self.stop = threading.Event()
        self.deadline = time.monotonic() + (300 if ctx.short else 420)
        self.threads = [threading.Thread(target=self.worker, args=(r,), daemon=True) for r in self.runners]

    def worker(self, runner: ProtocolRunner) -> None:
        try:
            while time.monotonic() < self.deadline and not self.stop.is_set():
                outcome, held = claim(runner, self.deadline)
                if outcome != "claimed":
                    with self.lock:
                        if len(self.finished) >= self.n_jobs:
                            return
                    time.sleep(0.1)
                    continue
                with self.lock:
                    self.helds.append(held)
                try:
                    held.heartbeat(self.extend, self.deadline)
                    run_id = held.evidence_run(self.deadline)
                    for n in range(self.chunks_per_job):
                        if time.monotonic() - held.last_beat > 3:
                            held.heartbeat(self.extend, self.deadline)
                        held.chunk({"segments": [{"stream": "stdout",
                                                  "text": f"{held.job_id} a{held.attempt} line {n}\n"}]}, self.deadline)
                        with self.lock:
                            self.acked += 1
                    decision = held.complete(run_id, self.deadline)
                    if decision in ("accepted", "duplicate"):
                        with self.lock:
                            self.finished.add(held.job_id)
                except Lost as why:
                    with self.lock:
                        self.lost_claims.append((held.job_id, held.attempt, str(why)))
        except Exception as error:  # noqa: BLE001 - reported
            with self.lock:
                self.errors.append(f"{runner.runner_id}: {error!r} {traceback.format_exc()[-400:]}")

    def run_through_crash(self) -> None:
        self.started = time.time()
        for t in self.threads:
            t.start()
        threshold = self.n_jobs * self.chunks_per_job // 5
        poll(f"{threshold} chunks acknowledged before the crash", 180, lambda: self.acked >= threshold, every=0.05)
        with INFLIGHT_LOCK:
            self.requests_at_kill = {k: v for k, v in INFLIGHT.items() if v}
        with self.lock:
            self.in_flight = {(h.job_id, h.attempt) for h in self.helds if h.job_id not in self.finished}
            self.acked_at_kill = self.acked
        self.counters_before = self.org.counters()
        self.killed_at = self.ctx.server.kill()
        log(f"crash/{self.phase}: server killed with {self.acked_at_kill} chunks acknowledged, "
            f"{len(self.in_flight)} jobs in flight, requests on their way {self.requests_at_kill}")
        if self.down_past_leases:
            leases = [h.lease_expires for h in self.helds if h.lease_expires and (h.job_id, h.attempt) in self.in_flight]
            wake = max(leases + [self.killed_at + 15]) + 5  # every lease in flight lapsed, and 5 s more
            while time.time() < wake:
                time.sleep(0.2)
        self.restart_began = time.time()
        took = self.ctx.server.start()
        self.restarted_at = time.time()
        self.down = self.restarted_at - self.killed_at
        log(f"crash/{self.phase}: server back after {self.down:.1f} s down (start took {took:.1f} s)")
        self.counters_after = self.org.counters()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=max(1.0, self.deadline - time.monotonic() + 5))
        self.alive = sum(t.is_alive() for t in self.threads)


def settle(ctx: Context, phases: list[CrashPhase], limit: float) -> None:
    """Waits until every job of the phases is terminal. A job whose lease lapsed more than 8 s ago
    (and 8 s after the server last came back; alarms fire within a second of either) and is still claimed or running has no alarm left to recover it (the alarm fires at the
    lease's expiry): that is recorded as a missing alarm, and the cron pass, production's
    once-a-minute safety net which `wrangler dev` does not fire by itself, is fired by hand."""
    deadline = time.monotonic() + limit
    seen: set[tuple[str, str]] = set()
    while time.monotonic() < deadline:
        unfinished = 0
        for phase in phases:
            counts = phase.org.counts()
            unfinished += sum(counts.get(s, 0) for s in UNFINISHED)
        if unfinished == 0:
            return
        stuck = []
        for phase in phases:
            for state in ("claimed", "running"):
                listing = phase.org.expect("GET", f"/api/remote-runners/jobs?state={state}&limit=500", None, 200)
                for job in listing["jobs"]:
                    lease = parse_time(job.get("leaseExpiresAt"))
                    key = (job["id"], job.get("activeClaimId") or "")
                    # Past its lease (and the restart that would fire a lapsed alarm) by 8 s.
                    if lease and time.time() - max(lease, ctx.server.served_at) > 8 and key not in seen:
                        seen.add(key)
                        stuck.append((phase, job, lease))
        if stuck:
            for phase, job, lease in stuck:
                detail = phase.org.job(job["id"])
                claim_row = next((c for c in detail["claims"] if c["id"] == job.get("activeClaimId")), {})
                ctx.missing_alarms.append({
                    "phase": phase.phase, "job": job["id"], "claim": job.get("activeClaimId"),
                    "state": job["state"], "issuedAt": claim_row.get("issuedAt"),
                    "startedAt": claim_row.get("startedAt"), "leaseExpiresAt": job.get("leaseExpiresAt"),
                    "lapsedFor": time.time() - lease, "killedAt": phase.killed_at})
                log(f"crash/{phase.phase}: job {job['id']} is {job['state']} {time.time() - lease:.0f} s past its "
                    f"lease with no recovery: its alarm is missing; firing the cron pass")
            status, _ = request(ctx.server.url, "GET", "/__scheduled?cron=*+*+*+*+*")
            if status != 200:
                log(f"the cron trigger answered {status}")
        time.sleep(0.5)


def check_crash_phase(ctx: Context, run: CrashPhase) -> list[str]:
    name = f"crash/{run.phase}"
    org = run.org
    r = ctx.report
    r.promise(name, "no worker error, every worker done", not run.errors and run.alive == 0,
              f"{run.alive} threads still alive; " + "; ".join(run.errors[:2]))
    # /metrics' counters are D1 rows: the crash leaves them where they were (none fell), and the
    # work before it was counted.
    fell = {k: (v, run.counters_after.get(k)) for k, v in run.counters_before.items()
            if run.counters_after.get(k, -1) < v}
    r.promise(name, "no counter of /metrics fell across the server's restart",
              not fell and run.counters_before.get("edgerunner_claims_granted_total", 0) > 0,
              f"fell: {fell}; before: {run.counters_before}")
    jobs = org.jobs(run.job_ids)
    # And once every job ended, they say what the jobs' own records say.
    final = org.counters()
    claims = [c for job in jobs.values() for c in job["claims"]]
    recorded = {"edgerunner_claims_granted_total": len(claims),
                "edgerunner_leases_lost_total": sum(1 for c in claims if c["state"] == "lost"),
                'edgerunner_completions_total{outcome="succeeded"}':
                    sum(1 for job in jobs.values() if job["state"] == "succeeded")}
    wrong = {k: (final.get(k), v) for k, v in recorded.items() if final.get(k) != v}
    r.promise(name, "/metrics' counters are the jobs' own records (claims, lost leases, successes)",
              not wrong, f"counter, record: {wrong or recorded}")
    by_attempt: dict[tuple[str, int], Held] = {(h.job_id, h.attempt): h for h in run.helds}
    client_claims = {h.claim_id for h in run.helds}
    # Grants whose answer the crash lost: stored claims no client ever held.
    orphans = [(j, c) for j, job in jobs.items() for c in job["claims"] if c["id"] not in client_claims]

    missing, mismatched, unacked_extra, foreign = [], [], [], []
    acked_chunks = unanswered_sends = acked_after_retry = present_unacked = 0
    for (job_id, attempt), held in by_attempt.items():
        stored = org.stream(job_id, attempt)
        sent = held.chunks
        for c in sent:
            unanswered_sends += c["sends"].count("no-answer")
            if (c["outcome"] or "").startswith("acked"):
                acked_chunks += 1
                if "no-answer" in c["sends"]:
                    acked_after_retry += 1
        # The rule: an attempt's stored stream is the prefix of what its client sent made of every
        # acknowledged chunk, plus at most the one chunk that was on its way without an answer
        # (a chunk is sent only once its predecessor is acknowledged, so only the last can be).
        for i, c in enumerate(sent):
            if (c["outcome"] or "").startswith("acked"):
                if i >= len(stored):
                    missing.append(f"{job_id} a{attempt} #{i}")
                elif stored[i]["checksum"] != c["checksum"]:
                    mismatched.append(f"{job_id} a{attempt} #{i}")
        for i, s in enumerate(stored):
            if i >= len(sent) or s["checksum"] != sent[i]["checksum"]:
                foreign.append(f"{job_id} a{attempt} #{i}")
            elif not (sent[i]["outcome"] or "").startswith("acked"):
                if "no-answer" in sent[i]["sends"] and i == len(sent) - 1:
                    present_unacked += 1  # committed before the crash; its answer was lost
                else:
                    unacked_extra.append(f"{job_id} a{attempt} #{i} ({sent[i]['outcome']}, sends {sent[i]['sends']})")
    for job_id, c in orphans:
        stored = org.stream(job_id, c["dispatchAttempt"])
        if stored:
            foreign.append(f"{job_id} a{c['dispatchAttempt']}: {len(stored)} chunks under a claim no client held")
    comp_missing, comp_foreign = [], []
    comps_acked = comps_unanswered_present = 0
    for job_id, job in jobs.items():
        stored_by_checksum = {c["completionChecksum"]: c for c in job["completions"]}
        sent_all = {}
        for (jid, attempt), held in by_attempt.items():
            if jid != job_id:
                continue
            for c in held.completions:
                sent_all[c["checksum"]] = (held, c)
                if c["outcome"] == "acked":
                    comps_acked += 1
                    if c["checksum"] not in stored_by_checksum:
                        comp_missing.append(f"{job_id} a{attempt}")
        for s in job["completions"]:
            entry = sent_all.get(s["completionChecksum"])
            if entry is None:
                comp_foreign.append(f"{job_id}: {s['completionChecksum'][:12]} never sent")
                continue
            held, c = entry
            if c["outcome"] != "acked" and s["decision"] == "accepted":
                if "no-answer" in c["sends"] and c is held.completions[-1]:
                    comps_unanswered_present += 1
                else:
                    comp_foreign.append(f"{job_id}: accepted {c['checksum'][:12]} whose sends were {c['sends']}")
    r.promise(name, "every 2xx-acknowledged chunk is stored with the same checksum", not missing and not mismatched,
              f"{acked_chunks} acknowledged; missing {missing[:5]}; other checksum {mismatched[:5]}")
    r.promise(name, "no stored chunk that was not sent, or sent out of chain", not foreign, str(foreign[:5]))
    r.promise(name, "nothing unacknowledged stored, but a chunk on its way when the crash cut its answer",
              not unacked_extra, f"such chunks stored: {present_unacked}; violations {unacked_extra[:5]}")
    r.promise(name, "every 2xx-acknowledged completion is stored with the same checksum", not comp_missing,
              f"{comps_acked} acknowledged; missing {comp_missing[:5]}")
    r.promise(name, "no stored completion that was not sent; none accepted unacknowledged but the one the crash cut",
              not comp_foreign, str(comp_foreign[:5]))
    states: dict[str, int] = {}
    for job in jobs.values():
        states[job["state"]] = states.get(job["state"], 0) + 1
    r.promise(name, "every job succeeded exactly once",
              all(j["state"] == "succeeded" and accepted_count(j) == 1 for j in jobs.values()), f"states {states}")

    # Jobs in flight at the crash: a claim a client held, or a grant whose answer the crash cut.
    missing_alarm_claims = {m["claim"] for m in ctx.missing_alarms if m["phase"] == run.phase}
    in_flight = set(run.in_flight) | {(j, c["dispatchAttempt"]) for j, c in orphans}
    continued = by_alarm = by_cron_after_missing_alarm = completed_before = 0
    requeue_after_restart = []
    bad = []
    for job_id, attempt in sorted(in_flight):
        job = jobs[job_id]
        requeued = [e for e in job["events"] if e["type"] == "job.requeued" and e.get("attempt") == attempt]
        lost = [e for e in job["events"] if e["type"] == "job.lease_lost" and e.get("attempt") == attempt]
        claim_id = f"{job_id}-a{attempt}"
        accepted_here = any(c["decision"] == "accepted" and c["dispatchAttempt"] == attempt for c in job["completions"])
        if accepted_here and not lost:
            if run.down_past_leases:
                completed_before += 1  # its completion was accepted before the kill
            else:
                continued += 1
            continue
        if not requeued:
            bad.append(f"{job_id} a{attempt}: neither completed nor requeued")
            continue
        actor = requeued[0]["actor"]
        orphan = (job_id, attempt) not in run.in_flight
        if actor == "system:alarm":
            by_alarm += 1
        elif claim_id in missing_alarm_claims:
            by_cron_after_missing_alarm += 1
        else:
            bad.append(f"{job_id} a{attempt}: requeued by {actor}")
        if not orphan and not run.down_past_leases:
            bad.append(f"{job_id} a{attempt}: a claim its client held lost its lease in a {run.down:.1f} s outage")
        if run.down_past_leases:
            requeue_after_restart.append(parse_time(requeued[0]["at"]) - run.restart_began)
    n_orphans = len(orphans)
    r.promise(name, "jobs in flight continued (outage shorter than their lease) or, past it, were requeued by recovery",
              not bad, f"{len(in_flight)} in flight ({n_orphans} grants whose answer was cut): {continued} continued, "
                       f"{completed_before} had completed, {by_alarm} requeued by their alarm, "
                       f"{by_cron_after_missing_alarm} by the cron pass after a missing alarm; problems {bad[:5]}")
    r.promise(name, "every job in flight whose lease lapsed was requeued by its own alarm",
              by_cron_after_missing_alarm == 0,
              f"{by_cron_after_missing_alarm} had no alarm and were left claimed until the cron pass"
              if by_cron_after_missing_alarm else f"{by_alarm} by alarm")
    return [
        f"- **{run.phase}** ({'down past every lease' if run.down_past_leases else 'restarted at once'}): "
        f"{len(run.job_ids)} jobs, {len(run.runners)} workers, {run.chunks_per_job} chunks a job; killed with "
        f"{run.acked_at_kill} chunks acknowledged, {len(run.in_flight)} jobs held in flight and requests on their way "
        f"{run.requests_at_kill}; down {run.down:.1f} s. Chunks acknowledged {acked_chunks}; sends without an answer "
        f"{unanswered_sends}; chunks acknowledged on a retry {acked_after_retry}; stored though their answer was cut "
        f"{present_unacked}. Completions acknowledged {comps_acked} (accepted though the answer was cut "
        f"{comps_unanswered_present}). Grants whose answer was cut: {n_orphans}. Claims lost by workers "
        f"{len(run.lost_claims)}. In flight: {continued} continued, {completed_before} had completed, {by_alarm} "
        f"requeued by alarm, {by_cron_after_missing_alarm} only by the cron pass (alarm missing)"
        + (f"; requeue after the restart began (s) min / median / max {pct(requeue_after_restart)}"
           if run.down_past_leases else "")
        + f". Final states {states}."]


def scenario_crash(ctx: Context) -> None:
    n_jobs, n_workers, chunks = (24, 8, 15) if ctx.short else (60, 16, 30)
    lines = ["Workers are protocol threads (session, claim, heartbeat, chunk, complete); a chunk or completion "
             "without an answer is sent again unchanged until one comes. The long outage starts while the brief "
             "phase's workers are still finishing.", ""]
    brief = CrashPhase(ctx, "brief", n_jobs, n_workers, chunks, extend=60, down_past_leases=False)
    long = CrashPhase(ctx, "long", n_jobs, n_workers, chunks, extend=15, down_past_leases=True)
    brief.run_through_crash()
    long.run_through_crash()
    settle(ctx, [brief, long], 240 if ctx.short else 360)
    for phase in (brief, long):
        phase.join()
    for phase in (brief, long):
        lines += check_crash_phase(ctx, phase)
    ctx.report.section("Scenario 3: server crash", lines)
    ctx.figures["crash"] = {"brief_down": brief.down, "long_down": long.down}


# ------------------------------------------------------------------------------------------------
# Scenario 4: the three-attempt limit
# ------------------------------------------------------------------------------------------------

def scenario_limit(ctx: Context) -> None:
    name = "limit"
    org = Org(ctx.server, f"chaos-limit-{os.urandom(3).hex()}")
    [job_id] = org.enqueue([f"limit-{os.urandom(4).hex()}"])
    runner_id, token = org.register("limit-runner", 1)
    runner = CliRunner(ctx, runner_id, token, f"limit-runner-{runner_id[-6:]}",
                       'echo "attempt $EDGERUNNER_ATTEMPT"; while true; do sleep 0.2; done')
    kills = []
    for attempt in (1, 2, 3):
        runner.start()

        def running() -> dict[str, Any] | None:
            job = org.job(job_id)
            return job if job["state"] == "running" and job["dispatchAttempt"] == attempt else None
        try:
            poll(f"attempt {attempt} running", 60, running, every=0.2)
        except Timeout as error:
            ctx.report.promise(name, f"attempt {attempt} was claimed and ran", False, str(error))
            runner.stop()
            return
        kills.append(runner.kill())

        def recovered() -> dict[str, Any] | None:
            job = org.job(job_id)
            wanted = "job.requeued" if attempt < 3 else "job.cancelled"
            return job if any(e["type"] == wanted and e.get("attempt") == attempt for e in job["events"]) else None
        try:
            poll(f"attempt {attempt}'s lease recovered", 60, recovered, every=0.2)
        except Timeout as error:
            ctx.report.promise(name, f"attempt {attempt}'s loss was recovered", False, str(error))
            return
        log(f"{name}: attempt {attempt} killed and recovered")
    # A live runner for the job's organization: it must not get a fourth claim. Bounded watch:
    # until the runner has polled for 5 s after its session (it claims every 0.2 s when idle).
    runner.start()
    watch_until = time.time() + 6
    while time.time() < watch_until:
        time.sleep(0.2)
    runner.stop()
    job = org.job(job_id)
    cancelled = [e for e in job["events"] if e["type"] == "job.cancelled"]
    detail = event_detail(cancelled[0]) if cancelled else {}
    r = ctx.report
    r.promise(name, "the job ends cancelled", job["state"] == "cancelled", f"state {job['state']}")
    r.promise(name, "with the reason recorded", bool(job.get("cancelReason")) and bool(cancelled and cancelled[0].get("reason")),
              f"cancelReason {job.get('cancelReason')!r}; event reason {cancelled[0].get('reason') if cancelled else None!r}; "
              f"decision {detail.get('decision')}, countedAttempts {detail.get('countedAttempts')}")
    r.promise(name, "recorded as DISPATCH_ATTEMPTS_EXHAUSTED after 3 counted attempts",
              detail.get("decision") == "DISPATCH_ATTEMPTS_EXHAUSTED" and detail.get("countedAttempts") == 3, str(detail))
    r.promise(name, "no fourth claim", len(job["claims"]) == 3 and job["dispatchAttempt"] == 3,
              f"claims {[c['dispatchAttempt'] for c in job['claims']]}, dispatchAttempt {job['dispatchAttempt']}")
    lost = [e for e in job["events"] if e["type"] == "job.lease_lost"]
    r.promise(name, "three leases lost, each recorded", len(lost) == 3, f"{len(lost)} job.lease_lost events")
    ctx.report.section("Scenario 4: three-attempt limit", [
        f"- one job, one runner (`--lease-seconds 15`) SIGKILLed mid-job three times (restarted each time), then a "
        f"fourth process left claiming for 6 s",
        f"- final state `{job['state']}`, claims {len(job['claims'])}, cancel reason: {job.get('cancelReason')!r}"])


# ------------------------------------------------------------------------------------------------
# Scenario 5: archive on finish through server crashes
# ------------------------------------------------------------------------------------------------

def scenario_archive(ctx: Context) -> None:
    """Hundreds of finished jobs archived (bundle and record to R2, checked, then their rows
    pruned) while the server is SIGKILLed again and again: every job must end archived, every
    bundle byte for byte what it was, every chunk still in it, and every bundle must verify."""
    name = "archive"
    n_jobs, chunks, workers, kills = (60, 5, 6, 2) if ctx.short else (240, 10, 8, 4)
    org = Org(ctx.server, f"chaos-archive-{os.urandom(3).hex()}")
    runner_id, token = org.register("archive-runner", workers)
    runner = ProtocolRunner(ctx.server, runner_id, token, workers)
    job_ids = org.enqueue([f"archive-{i}-{os.urandom(3).hex()}" for i in range(n_jobs)])
    deadline = time.monotonic() + (300 if ctx.short else 900)

    def work(_: int) -> int:
        done = 0
        while time.monotonic() < deadline:
            got, held = claim(runner, deadline)
            if got == "empty":
                return done
            if got != "claimed":
                time.sleep(0.2)
                continue
            held.heartbeat(60, deadline)
            for n in range(chunks):
                held.chunk({"line": n, "text": f"archive chunk {n} " + "z" * 200}, deadline)
            held.complete(held.evidence_run(deadline), deadline)
            done += 1
        return done
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        ran = sum(pool.map(work, range(workers)))
    r = ctx.report
    if not r.promise(name, f"all {n_jobs} jobs ran to their end first", ran == n_jobs and wait_terminal(
            org, job_ids, 60, "archive jobs terminal"), f"{ran} ran"):
        return

    def digest(job_id: str) -> tuple[str, int]:
        body = org.bundle(job_id)
        return hashlib.sha256(body).hexdigest(), len(json.loads(body)["stream"])
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        before = dict(zip(job_ids, pool.map(digest, job_ids)))

    # Archivers ask for every job not yet archived, again and again (a step is safe to repeat);
    # meanwhile the server is SIGKILLed `kills` times, each while archives are under way.
    pending = set(job_ids)
    pending_lock = threading.Lock()
    stop = threading.Event()
    answers: dict[str, int] = {}

    def archiver(index: int) -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            with pending_lock:
                mine = sorted(pending)[index::3]
            if not mine:
                return
            for job_id in mine:
                if stop.is_set():
                    return
                try:
                    status, answer = request(ctx.server.url, "POST", f"/api/remote-runners/jobs/{job_id}/archive",
                                             {}, org.key)
                except NoAnswer:
                    answers["no-answer"] = answers.get("no-answer", 0) + 1
                    time.sleep(0.2)
                    continue
                answers[str(status)] = answers.get(str(status), 0) + 1
                if status == 200 and answer.get("state") == "pruned":
                    with pending_lock:
                        pending.discard(job_id)
    threads = [threading.Thread(target=archiver, args=(i,), daemon=True) for i in range(3)]
    for thread in threads:
        thread.start()
    kill_log = []
    for k in range(kills):
        # Kill once some archives are under way (or done): a bounded wait for progress.
        target = n_jobs - (k + 1) * n_jobs // (kills + 2)
        try:
            poll(f"archive progress before kill {k + 1}", 120, lambda: len(pending) <= target, every=0.1)
        except Timeout:
            pass
        at = ctx.server.kill()
        with pending_lock:
            left = len(pending)
        took = ctx.server.start()
        kill_log.append(f"kill {k + 1} with {left} of {n_jobs} jobs not yet archived; restarted in {took:.1f} s")
        log(f"{name}: {kill_log[-1]}")
    for thread in threads:
        thread.join(max(1.0, deadline - time.monotonic()))
    stop.set()

    after = org.jobs(job_ids)
    not_pruned = [f"{j}: {after[j].get('archive')}" for j in job_ids if (after[j].get("archive") or {}).get("state") != "pruned"]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        now = dict(zip(job_ids, pool.map(digest, job_ids)))
    changed = [f"{j}: {before[j][0][:12]} → {now[j][0][:12]}" for j in job_ids if now[j][0] != before[j][0]]
    lost_chunks = sum(max(0, before[j][1] - now[j][1]) for j in job_ids)
    wrong_summary = [j for j in job_ids if (after[j].get("archive") or {}).get("bundleSha256") != before[j][0]]
    failures = verify_bundles(ctx, org, job_ids)
    left = ctx.server.sql(
        "SELECT (SELECT count(*) FROM stream_chunks WHERE organization_id = '{o}') AS chunks,"
        " (SELECT count(*) FROM job_completions WHERE organization_id = '{o}') AS completions,"
        " (SELECT count(*) FROM job_claims WHERE organization_id = '{o}') AS claims,"
        " (SELECT count(*) FROM job_events WHERE organization_id = '{o}' AND job_id IS NOT NULL) AS events,"
        # Custody: rows of completion_evidence, and the runs archived rows hold (migration 0019).
        " (SELECT count(*) FROM completion_evidence WHERE organization_id = '{o}')"
        " + (SELECT count(*) FROM archived_jobs AS a JOIN organization_numbers AS n"
        "     ON n.number = a.organization_number"
        "     WHERE n.organization_id = '{o}' AND a.custody_run_id IS NOT NULL) AS custody".format(o=org.id))[0]
    r.promise(name, "every job ends archived (stored and pruned)", not not_pruned, "; ".join(not_pruned[:5]))
    r.promise(name, "0 chunks lost: every bundle byte for byte what it was before archiving",
              not changed and lost_chunks == 0, f"{lost_chunks} chunks lost; " + "; ".join(changed[:5]))
    r.promise(name, "each job's summary names its bundle's SHA-256", not wrong_summary, "; ".join(wrong_summary[:5]))
    r.promise(name, "every custody bundle passes `edgerunner verify`", not failures, "; ".join(failures[:3]))
    r.promise(name, "D1 keeps no claim, chunk, completion or event of an archived job, and every custody",
              left["chunks"] == left["completions"] == left["claims"] == left["events"] == 0 and left["custody"] == n_jobs,
              json.dumps(left))
    r.promise(name, f"the server was SIGKILLed {kills} times while jobs archived", len(kill_log) == kills, "; ".join(kill_log))
    ctx.report.section("Scenario 5: archive through server crashes", [
        f"- {n_jobs} jobs of {chunks} chunks each ran to their end; then three threads asked "
        f"`POST …/jobs/{{id}}/archive` for every job not yet archived while the server was SIGKILLed and restarted:",
        *[f"  - {line}" for line in kill_log],
        f"- answers to the archive requests: {json.dumps(dict(sorted(answers.items())))}",
        f"- D1 after: {json.dumps(left)}"])
    ctx.figures["archive"] = {"jobs": n_jobs, "kills": kill_log, "answers": answers}


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
