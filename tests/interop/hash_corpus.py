#!/usr/bin/env python3
"""Stable JSON and H: the `edgerunner` binary against the real EvalGate SDK.

Usage: hash_corpus.py [EDGERUNNER_BIN]   (or set EDGERUNNER_BIN)

Needs `evalgate-sdk==3.15.0` importable (run it with the project's venv). Builds a
deterministic corpus of JSON documents (fixed seed) meant to break a canonical-JSON
implementation: unicode keys and values including non-BMP characters, keys whose code point
order differs from their UTF-16 order, every control character, quotes, backslashes,
U+2028/2029, floats in every form Python prints, huge integers, deep nesting and large arrays.

Each document is written the ways a client writes it -- `json.dumps(doc)` (ASCII escapes, the
default) and httpx's own encoding (raw UTF-8, compact, which is what the SDK's worker sends)
-- and fed to `edgerunner stable-json --lines` and `edgerunner hash --lines`, one document per
line, in one process per mode. Every answer must be byte-identical to the SDK's
`_stable_json(doc)` and `hash_remote_runner_payload(doc)`. A few documents also go through the
single-document mode, pretty-printed. Finally, inputs the SDK cannot send must be refused.

Exits 1 and prints the first differing document on any mismatch.
"""

from __future__ import annotations

import json
import math
import os
import random
import struct
import subprocess
import sys
from typing import Any, Callable

from evalgate_sdk.remote_runner import _stable_json, hash_remote_runner_payload

SEED = 20261130
RANDOM_DOCUMENTS = 2400

# Characters canonical-JSON implementations get wrong.
SPECIAL_CHARS = (
    ['"', "\\", "/", "\x7f", "\x80", "\u00e9", "\u00df", "\u2028", "\u2029", "\ufeff", "\ufffd"]
    + [chr(c) for c in range(0x20)]
    + ["\u4e2d", "\ue000", "\uff61", "\uffff", "\U00010000", "\U0001f600", "\U0001f1fa\U0001f1f8", "\U0010ffff"]
)

# Pairs whose order by code point (Python, Rust) differs from their order by UTF-16 code unit
# (JavaScript's default sort): a BMP character above the surrogate block vs a non-BMP one.
CODE_POINT_VS_UTF16_KEYS = ["\uff61", "\U0001f600", "\ue000", "\U00010000", "\uffff", "\U0010ffff", "z", "\u00e9"]

FLOATS = [
    0.0, -0.0, 1.0, -1.0, 0.1, 0.5, 1e-07, 1e-05, 0.0001, 1e16, 1e21, 1e22, 1e23, 1.5e300,
    -1.5e300, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 123456789.123,
    float(2**53), float(2**53 + 2), float(2**63), 3.141592653589793, 1 / 3, 2 / 3, 100.0,
    200000.0, 1e15, 9.999999999999999e15, 123e-20, 4.35, 0.30000000000000004,
]

INTEGERS = [
    0, 1, -1, 7, 2**31, 2**53 - 1, 2**53, 2**53 + 1, -(2**53), 2**63 - 1, 2**63, 2**64,
    -(2**63), 10**40, -(10**40), 10**100 + 1,
]


def random_char(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.35:
        return rng.choice(SPECIAL_CHARS)
    if roll < 0.55:
        # Any scalar value; surrogates cannot be encoded as UTF-8 (the SDK fails on them too).
        while True:
            c = rng.randrange(0x110000)
            if not 0xD800 <= c <= 0xDFFF:
                return chr(c)
    return chr(rng.randrange(0x20, 0x7F))


def random_string(rng: random.Random, max_len: int = 12) -> str:
    return "".join(random_char(rng) for _ in range(rng.randrange(max_len + 1)))


def random_float(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(FLOATS)
    if roll < 0.7:
        return rng.uniform(-1, 1) * 10 ** rng.randrange(-30, 30)
    while True:  # an arbitrary finite double, exercising every repr shape
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            return value


def random_int(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(INTEGERS)
    if roll < 0.7:
        return rng.randrange(-1000, 1000)
    return rng.getrandbits(rng.randrange(1, 200)) * rng.choice([1, -1])


def random_scalar(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return random_int(rng)
    if kind == 3:
        return random_float(rng)
    return random_string(rng)


def random_value(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.35:
        return random_scalar(rng)
    if rng.random() < 0.5:
        return [random_value(rng, depth - 1) for _ in range(rng.randrange(6))]
    keys = [random_string(rng, 6) for _ in range(rng.randrange(6))]
    if rng.random() < 0.2:
        keys += rng.sample(CODE_POINT_VS_UTF16_KEYS, 3)
    return {key: random_value(rng, depth - 1) for key in keys}


def deep(rng: random.Random, depth: int) -> Any:
    value: Any = random_scalar(rng)
    for level in range(depth):
        value = [value] if level % 2 else {random_string(rng, 3): value}
    return value


def fixed_documents() -> list[Any]:
    every_char = "".join(SPECIAL_CHARS)
    return [
        {},
        [],
        "",
        None,
        True,
        False,
        0,
        -0.0,
        {"": ""},
        {"a": {}, "b": [], "c": [{}], "d": [[]]},
        {c: c for c in SPECIAL_CHARS},
        {k: i for i, k in enumerate(CODE_POINT_VS_UTF16_KEYS)},
        {"floats": FLOATS, "ints": INTEGERS},
        {"text": every_char, "escaped": "\\\"\\n\\u0000"},
        {"A": 1, "a": 2, "B": 3, "_": 4, "~": 5, "\x7f": 6, "0": 7, " ": 8},
        # The shapes the protocol hashes.
        {"level": "info", "message": "execution started", "ratio": 1e-07, "big": 10**30},
        {
            "claimId": "claim_1", "dispatchAttempt": 1, "emittedAt": "2026-11-29T07:00:00.123456Z",
            "jobId": "job_1", "kind": "log", "payloadHash": "a" * 64, "previousChecksum": None, "sequence": 0,
        },
    ]


def build_corpus() -> list[Any]:
    rng = random.Random(SEED)
    corpus = fixed_documents()
    corpus += [random_value(rng, rng.randrange(1, 6)) for _ in range(RANDOM_DOCUMENTS)]
    corpus += [deep(rng, depth) for depth in (64, 80, 100, 120, 126)]
    corpus += [[random_scalar(rng) for _ in range(n)] for n in (1000, 5000, 20000)]
    corpus += [{f"k{i:05d}{random_string(rng, 2)}": random_scalar(rng) for i in range(3000)}]
    return corpus


# How clients write a document: Python's default, and what httpx (the SDK's transport) sends.
ENCODINGS: dict[str, Callable[[Any], str]] = {
    "json.dumps (ensure_ascii=True)": json.dumps,
    "httpx body (ensure_ascii=False, compact)": lambda doc: json.dumps(
        doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ),
}


def run(binary: str, args: list[str], text: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([binary, *args], input=text.encode("utf-8"), capture_output=True, check=False)


def fail(what: str, document: Any, sent: str, expected: bytes, got: bytes) -> None:
    def clip(text: str) -> str:
        return text if len(text) <= 2000 else text[:2000] + f"... ({len(text)} characters)"

    at = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    print(f"MISMATCH in {what}, first difference at byte {at}", file=sys.stderr)
    print(f"  expected there:  {expected[max(0, at - 40):at + 40]!r}", file=sys.stderr)
    print(f"  edgerunner there:{got[max(0, at - 40):at + 40]!r}", file=sys.stderr)
    print(f"  document (repr): {clip(repr(document))}", file=sys.stderr)
    print(f"  sent:            {clip(sent)}", file=sys.stderr)
    print(f"  expected:        {clip(expected.decode('utf-8', 'replace'))}", file=sys.stderr)
    print(f"  edgerunner:      {clip(got.decode('utf-8', 'replace'))}", file=sys.stderr)
    sys.exit(1)


def check_batch(binary: str, corpus: list[Any], name: str, encode: Callable[[Any], str]) -> None:
    sent = [encode(doc) for doc in corpus]
    for line in sent:
        # json.dumps without indent escapes newlines inside strings and emits none between
        # tokens, so every document is one line.
        assert "\n" not in line, "a document spans lines"
    expected = {
        "stable-json": [_stable_json(doc).encode("utf-8") for doc in corpus],
        "hash": [hash_remote_runner_payload(doc).encode("ascii") for doc in corpus],
    }
    stdin = "".join(line + "\n" for line in sent)
    for command, answers in expected.items():
        result = run(binary, [command, "--lines"], stdin)
        if result.returncode != 0:
            print(f"edgerunner {command} --lines failed ({name}): {result.stderr.decode()}", file=sys.stderr)
            sys.exit(1)
        # Split on b"\n" only: stable JSON keeps U+2028/2029 raw, which str.splitlines would cut.
        lines = result.stdout.split(b"\n")
        if lines[-1] != b"" or len(lines) - 1 != len(corpus):
            print(f"edgerunner {command} --lines ({name}): {len(lines) - 1} answers for {len(corpus)} documents", file=sys.stderr)
            sys.exit(1)
        for index, (want, got) in enumerate(zip(answers, lines)):
            if want != got:
                fail(f"{command} --lines, {name}, document {index}", corpus[index], sent[index], want, got)
    print(f"ok: {len(corpus)} documents identical via {name} (stable-json and hash)")


def check_single(binary: str, corpus: list[Any]) -> None:
    rng = random.Random(SEED + 1)
    sample = corpus[:17] + rng.sample(corpus[17:], 8)
    for index, doc in enumerate(sample):
        # Pretty-printed, unsorted, with newlines between tokens: whitespace must not matter.
        sent = json.dumps(doc, indent=2, ensure_ascii=index % 2 == 0) + "\n"
        for command, want in (
            ("stable-json", _stable_json(doc).encode("utf-8") + b"\n"),
            ("hash", hash_remote_runner_payload(doc).encode("ascii") + b"\n"),
        ):
            result = run(binary, [command], sent)
            if result.returncode != 0 or result.stdout != want:
                fail(f"{command} (single document)", doc, sent, want, result.stdout + result.stderr)
    print(f"ok: {len(sample)} pretty-printed documents identical in single-document mode")


def check_refusals(binary: str) -> None:
    # None of these can come from the SDK: httpx refuses NaN and infinities (allow_nan=False),
    # and a lone surrogate cannot be encoded as UTF-8 (the SDK itself fails to hash one).
    try:
        hash_remote_runner_payload("\ud800")
    except UnicodeEncodeError:
        pass
    else:
        print("the SDK hashed a lone surrogate; revisit the refusal below", file=sys.stderr)
        sys.exit(1)
    for text in ["", "{", '{"a": }', "NaN", "[Infinity]", "{} {}", '"\\ud800"', "[1,]", "{'a': 1}"]:
        for command in ("stable-json", "hash"):
            result = run(binary, [command], text)
            message = result.stderr.decode("utf-8", "replace")
            if result.returncode == 0 or result.stdout or "invalid JSON" not in message:
                print(f"edgerunner {command} accepted {text!r}: {result}", file=sys.stderr)
                sys.exit(1)
    print("ok: invalid JSON refused with a message and a non-zero exit")


def main() -> None:
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EDGERUNNER_BIN")
    if not binary:
        sys.exit("usage: hash_corpus.py EDGERUNNER_BIN (or set EDGERUNNER_BIN)")
    corpus = build_corpus()
    for name, encode in ENCODINGS.items():
        check_batch(binary, corpus, name, encode)
    check_single(binary, corpus)
    check_refusals(binary)
    print(f"interop: {len(corpus)} documents x {len(ENCODINGS)} encodings byte-identical to evalgate-sdk")


if __name__ == "__main__":
    main()
