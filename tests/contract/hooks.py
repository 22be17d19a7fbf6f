"""Schemathesis hooks for tests/contract/fuzz.py (loaded through SCHEMATHESIS_HOOKS).

- Authentication follows each operation's `security`: the organization's admin API key, or a
  runner credential exchanged (and renewed before its 10 minutes are up) from a registered
  runner's bootstrap token. Public operations get no credential.
- Every request comes from a client address of its own (`CF-Connecting-IP`, from the
  benchmarking range 198.18.0.0/15), so the per-address limits on unauthenticated routes
  count what one generated request does, not the whole run.
- The run's own credentials stay usable: a request that would revoke its API key, or change,
  rotate or revoke its runner, names another id instead (the runs create their own keys and
  runners for those operations, through the document's links).
- Every answer is recorded, one JSON line each, for the run's summary: the operation, the
  status, the error code.
"""

import json
import os
import random
import threading
import urllib.request

import schemathesis

BASE_URL = os.environ["FUZZ_BASE_URL"]
API_KEY = os.environ["FUZZ_API_KEY"]
RUNNER_ID = os.environ["FUZZ_RUNNER_ID"]
BOOTSTRAP_TOKEN = os.environ["FUZZ_BOOTSTRAP_TOKEN"]
LOG_PATH = os.environ["FUZZ_LOG"]
PROTECTED = {os.environ["FUZZ_API_KEY_ID"], RUNNER_ID}

_log_lock = threading.Lock()
_address = random.Random()


def _schemes(case):
    """The security scheme names an operation takes (empty for a public one)."""
    security = case.operation.definition.raw.get("security", [])
    return sorted({name for requirement in security for name in requirement})


def _runner_credential():
    request = urllib.request.Request(
        f"{BASE_URL}/api/remote-runners/session",
        data=json.dumps({"runnerId": RUNNER_ID, "bootstrapToken": BOOTSTRAP_TOKEN}).encode(),
        headers={"content-type": "application/json", "CF-Connecting-IP": "198.19.255.254"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["token"]


# A credential lives at most 10 minutes: renewed every 4.
@schemathesis.auth(refresh_interval=240, cache_by_key=lambda case, ctx: ",".join(_schemes(case)))
class Credentials:
    def get(self, case, ctx):
        schemes = _schemes(case)
        if "runnerCredential" in schemes:
            return _runner_credential()
        if "apiKey" in schemes:
            return API_KEY
        return ""

    def set(self, case, data, ctx):
        if data:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schemathesis.hook
def before_call(context, case, kwargs):
    n = _address.randrange(1 << 17)
    address = f"198.{18 + (n >> 16)}.{(n >> 8) & 255}.{n & 255}"
    case.headers = {**(case.headers or {}), "CF-Connecting-IP": address}
    if case.method.upper() != "GET" and case.path_parameters:
        for name, value in list(case.path_parameters.items()):
            if value in PROTECTED:
                case.path_parameters[name] = "zz_protected_by_the_fuzz_run"


@schemathesis.hook
def after_call(context, case, response):
    code = None
    if response.headers.get("content-type", [""])[0].startswith("application/json"):
        try:
            body = json.loads(response.content or b"null")
            if isinstance(body, dict) and isinstance(body.get("error"), dict):
                code = body["error"].get("code")
        except ValueError:
            code = "<not JSON>"
    line = json.dumps(
        {
            "operation": f"{case.operation.method.upper()} {case.operation.path}",
            "method": response.request.method,
            "status": response.status_code,
            "code": code,
        }
    )
    with _log_lock, open(LOG_PATH, "a") as log:
        log.write(line + "\n")
