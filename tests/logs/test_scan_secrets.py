"""The log scanner finds what it looks for, and nothing else."""
from __future__ import annotations

import importlib.util
import shutil
import tempfile
import unittest
from pathlib import Path

spec = importlib.util.spec_from_file_location("scan_secrets", Path(__file__).with_name("scan_secrets.py"))
scanner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scanner)

KEY = "erk_" + "0123456789abcdef" * 4
TOKEN = "erb_" + "f" * 64
CREDENTIAL = "erc_eyJvcmciOiJvcmdfMSJ9abcdefgh.c2lnbmF0dXJlc2lnbmF0dXJl"
SIGNING = "9f" * 32


class ScanTests(unittest.TestCase):
    def server(self, log: str) -> Path:
        root = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, root)
        lane = root / "lane-1"
        lane.mkdir()
        (lane / "dev.vars").write_text(f"REMOTE_RUNNER_SIGNING_SECRET={SIGNING}\nCRON_SECRET=short\n")
        (lane / "wrangler-dev.log").write_text(log)
        return root

    def test_a_clean_log_passes(self):
        root = self.server('{"event":"request","route":"/api/remote-runners/self","status":200}\n'
                           "[wrangler:info] GET /healthz 200 OK\nerk_ is the key prefix\n")
        logs, findings = scanner.scan([root])
        self.assertEqual((logs, findings), (1, []))

    def test_each_kind_of_secret_is_found_and_masked(self):
        for secret in (KEY, TOKEN, "ere_" + "1" * 64, CREDENTIAL, SIGNING):
            with self.subTest(secret=secret[:4]):
                root = self.server(f"line one\nsomething printed {secret} here\n")
                logs, findings = scanner.scan([root])
                self.assertEqual(logs, 1)
                self.assertEqual(len(findings), 1, findings)
                self.assertIn("wrangler-dev.log:2:", findings[0])
                self.assertNotIn(secret, findings[0])

    def test_no_log_at_all_is_a_failure_not_a_pass(self):
        empty = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, empty)
        self.assertEqual(scanner.main([empty]), 1)


if __name__ == "__main__":
    unittest.main()
