"""The chaos suite's shared parts: hashing and time, HTTP, the server it owns (started,
SIGKILLed and restarted on its state), organizations and their jobs, the report of promises,
CLI runners and protocol runners, and the context every scenario runs in.

Imported by chaos.py and its scenario modules (and by bench/storage.py); Python 3 standard
library only.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import hashlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
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
            'EDGERUNNER_DEV_VARS="$2" start_local_server "$1" "$(free_port)"\n'
            'find_direct_url\n'
            'echo "CHAOS-SERVER $SERVER_PID ${DIRECT_URL:-$BASE_URL}"\n')
        # A new port each start (scripts/lib.sh's free_port: below the ephemeral range).
        out = subprocess.run(["bash", "-c", script, "chaos", str(self.state), str(self.dev_vars)],
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
