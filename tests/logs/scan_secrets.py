#!/usr/bin/env python3
"""Reads every server log under the given directories (`wrangler-dev*.log`, as
scripts/lib.sh's start_local_server writes them) for a secret: anything of the form the server
mints secrets in (API keys `erk_`, bootstrap tokens `erb_`, enrollment tokens `ere_`: 64 hex
digits each; runner credentials `erc_<payload>.<mac>`), and the literal values of every
`dev.vars` beside them (the signing secret, CRON_SECRET). Prints where each was found (the
secret itself masked) and exits 1 if any was.

    tests/logs/scan_secrets.py DIR [DIR...]

scripts/test runs it over the end-to-end run's state directory once every lane is done.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

# What the server mints (src/platform.rs random_secret; the credential's PREFIX in
# crates/protocol/src/credential.rs).
SHAPES = re.compile(r"\b(?:erk|erb|ere)_[0-9a-f]{64}\b|\berc_[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")
# A dev.vars value shorter than this is a test's deliberately weak one, not a secret to find.
MIN_LITERAL = 16
SECRET_VARS = ("REMOTE_RUNNER_SIGNING_SECRET", "CRON_SECRET")


def literals(root: Path) -> set[str]:
    """The secret values of every dev.vars under `root`."""
    found = set()
    for path in root.rglob("dev.vars"):
        for line in path.read_text(errors="replace").splitlines():
            name, _, value = line.partition("=")
            if name.strip() in SECRET_VARS and len(value.strip()) >= MIN_LITERAL:
                found.add(value.strip())
    return found


def mask(secret: str) -> str:
    return secret[:6] + "…" + f"({len(secret)} characters)"


def scan(roots: list[Path]) -> tuple[int, list[str]]:
    """How many logs were read, and one finding per secret seen (file, line number, masked)."""
    findings = []
    logs = 0
    for root in roots:
        known = literals(root)
        for path in sorted(root.rglob("wrangler-dev*.log")):
            logs += 1
            with path.open(errors="replace") as log:
                for number, line in enumerate(log, 1):
                    seen = set(SHAPES.findall(line)) | {s for s in known if s in line}
                    findings.extend(f"{path}:{number}: {mask(secret)}" for secret in sorted(seen))
    return logs, findings


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    logs, findings = scan([Path(a) for a in argv])
    for finding in findings:
        print(f"a secret in a server log: {finding}", file=sys.stderr)
    if logs == 0:
        print("no server log found: nothing was checked", file=sys.stderr)
        return 1
    print(f"{logs} server logs read: {len(findings)} secrets found", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
