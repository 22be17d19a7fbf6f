"""Schemathesis against a running local server, every check on, until N requests were sent.

    python tests/contract/fuzz.py --base-url URL --state DIR [--requests N] [--summary PATH]

Used by scripts/test (a short run) and scripts/fuzz (a long one). It makes its own
organization in the server's local state (scripts/bootstrap-admin), registers one runner for
the runner routes, releases one prompt and enqueues a few jobs that runner can take, so that
the stateful phase (the links in docs/openapi.json) reaches claims, heartbeats and streams.
Then it runs schemathesis in rounds (a new seed each) until at least N requests were sent,
and writes a summary: requests per operation, statuses, error codes, and every failure with
the curl command that reproduces it. Exit status 1 on any failure, or when fewer than N
requests were sent.
"""

import argparse
import collections
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "openapi.json"
# Rounds are bounded: a round sends at least one request per operation.
MAX_ROUNDS = 40


def call(base_url, method, path, bearer=None, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base_url}{path}", data=data, method=method)
    request.add_header("content-type", "application/json")
    request.add_header("CF-Connecting-IP", "198.19.255.253")
    if bearer:
        request.add_header("authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def expect(answer, *statuses):
    status, body = answer
    if status not in statuses:
        sys.exit(f"fuzz setup: expected {statuses}, got {status} {body}")
    return body


def set_up(base_url, state_dir, jobs):
    """An organization, its admin key, one runner, one promoted release, `jobs` queued jobs."""
    org = json.loads(
        subprocess.run(
            [str(ROOT / "scripts" / "bootstrap-admin"), "--org", f"fuzz {int(time.time())}",
             "--state", state_dir],
            check=True, capture_output=True, text=True,
        ).stdout.strip().splitlines()[-1]
    )
    key = org["apiKey"]
    key_id = expect(call(base_url, "GET", "/api/developer/api-keys/self", key), 200)["apiKey"]["id"]
    capabilities = {"executionKinds": ["prompt"], "runtimes": ["python3.12"]}
    runner = expect(
        call(base_url, "POST", "/api/remote-runners", key, {
            "name": "fuzz runner", "runnerKey": f"fuzz-{random.getrandbits(48):x}",
            "capabilities": capabilities, "maxConcurrentJobs": 4,
        }),
        201,
    )
    artifact = expect(
        call(base_url, "POST", "/api/releases/artifacts", key,
             {"kind": "prompt", "name": f"fuzz-{random.getrandbits(48):x}"}),
        201,
    )
    version = expect(
        call(base_url, "POST", f"/api/releases/artifacts/{artifact['id']}/versions", key,
             {"content": {"template": "fuzz {{x}}"}}),
        201,
    )
    expect(call(base_url, "POST", f"/api/releases/versions/{version['id']}/promote", key,
                {"environment": "staging"}), 200, 201)
    for n in range(jobs):
        expect(
            call(base_url, "POST", "/api/remote-runners/jobs", key, {
                "idempotencyKey": f"fuzz-{n}-{random.getrandbits(48):x}",
                "subject": {"kind": "prompt", "artifactId": artifact["id"],
                            "versionId": version["id"], "environment": "staging"},
                "input": {"x": n},
                "requirements": {
                    "executionKind": "prompt", "runtime": "python3.12",
                    "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120,
                               "outputBytes": 1048576},
                    "network": {"mode": "deny_all"},
                },
            }),
            201,
        )
    return key, key_id, runner["runner"]["id"], runner["bootstrapToken"]


def schemathesis_round(args, env, seed, examples, out):
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "--config-file", str(Path(__file__).parent / "schemathesis.toml"),
        "run", str(DOCUMENT),
        "--url", args.base_url,
        "--checks", "all",
        # Schema-valid data the server refuses for reasons JSON Schema cannot state: a checksum
        # that is not the hash of the other fields, a public key that is not a curve point, a
        # subject whose kind differs from its artifact's, requirements no runner can meet.
        # Every other check runs, negative data rejection included.
        "--exclude-checks", "positive_data_acceptance",
        "--max-examples", str(examples),
        "--seed", str(seed),
        "--workers", str(args.workers),
        "--generation-database", "none",
        "--request-timeout", "30",
        "--no-color",
        "--output-truncate", "false",
    ]
    # Run in the work directory: schemathesis keeps its own state in ./.schemathesis.
    with open(out, "w") as log:
        return subprocess.run(command, env=env, cwd=Path(out).parent, stdout=log,
                              stderr=subprocess.STDOUT).returncode


def summarize(log_path, rounds, requests_wanted, started):
    rows = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line]
    per_op = collections.defaultdict(collections.Counter)
    statuses = collections.Counter()
    codes = collections.Counter()
    for row in rows:
        per_op[row["operation"]][row["status"]] += 1
        statuses[row["status"]] += 1
        if row["code"]:
            codes[row["code"]] += 1
    failed = [r for r in rounds if r["exit"] != 0]
    lines = [
        "# Contract fuzzing (schemathesis, every check)",
        "",
        f"- requests: {len(rows)} (wanted at least {requests_wanted})",
        f"- rounds: {len(rounds)}; seeds {', '.join(str(r['seed']) for r in rounds)}",
        f"- examples per operation per round: {rounds[0]['examples'] if rounds else 0}",
        f"- duration: {time.time() - started:.0f} s",
        f"- rounds with failures: {len(failed)}",
        "",
        "## Statuses",
        "",
        "| status | answers |",
        "|---|---|",
        *(f"| {s} | {n} |" for s, n in sorted(statuses.items())),
        "",
        "## Requests per operation",
        "",
        "| operation | requests | statuses |",
        "|---|---|---|",
        *(
            f"| `{op}` | {sum(c.values())} | "
            + ", ".join(f"{s}: {n}" for s, n in sorted(c.items())) + " |"
            for op, c in sorted(per_op.items())
        ),
        "",
        "## Error codes seen",
        "",
        ", ".join(f"`{c}` {n}" for c, n in codes.most_common()),
        "",
    ]
    if failed:
        lines += ["## Failures (schemathesis's report, with the curl that reproduces each)", ""]
        for r in failed:
            text = Path(r["log"]).read_text()
            start = text.find("FAILURES")
            lines += [f"### round seed {r['seed']} (exit {r['exit']})", "", "```",
                      text[start if start >= 0 else 0:].strip(), "```", ""]
    return "\n".join(lines), len(rows), failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--state", required=True, help="the server's local state directory")
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--examples", type=int, default=0,
                        help="examples per operation per round (default: from --requests)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--summary", default=None, help="where to write the summary (Markdown)")
    parser.add_argument("--work-dir", default=None, help="logs (default: a temporary directory)")
    args = parser.parse_args()

    started = time.time()
    work = Path(args.work_dir or os.environ.get("TMPDIR", "/tmp")) / f"fuzz-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "answers.jsonl"
    log_path.write_text("")
    key, key_id, runner_id, token = set_up(args.base_url, args.state, jobs=20)
    env = dict(os.environ, FUZZ_BASE_URL=args.base_url, FUZZ_API_KEY=key, FUZZ_API_KEY_ID=key_id,
               FUZZ_RUNNER_ID=runner_id, FUZZ_BOOTSTRAP_TOKEN=token, FUZZ_LOG=str(log_path),
               SCHEMATHESIS_HOOKS="hooks", PYTHONPATH=str(Path(__file__).parent))
    operations = sum(
        1 for item in json.loads(DOCUMENT.read_text())["paths"].values()
        for method in item if method in ("get", "put", "post", "delete", "patch")
    )
    # The coverage phase adds its own cases on top of the examples; a round of k examples sends
    # about 4k requests per operation. Rounds repeat (new seeds) until N were sent.
    examples = args.examples or max(5, min(100, args.requests // (operations * 4)))
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    rounds = []
    for n in range(MAX_ROUNDS):
        sent = sum(1 for _ in log_path.open())
        if sent >= args.requests:
            break
        round_log = work / f"round-{n}.log"
        code = schemathesis_round(args, env, seed + n, examples, round_log)
        rounds.append({"seed": seed + n, "examples": examples, "exit": code, "log": str(round_log)})
        print(f"fuzz: round {n} (seed {seed + n}): exit {code}, "
              f"{sum(1 for _ in log_path.open()) - sent} requests", file=sys.stderr)
    summary, sent, failed = summarize(log_path, rounds, args.requests, started)
    if args.summary:
        Path(args.summary).write_text(summary)
    print(summary)
    if failed or sent < args.requests:
        sys.exit(1)


if __name__ == "__main__":
    main()
