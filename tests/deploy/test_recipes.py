"""The recipes of docs/autoscaling.md, checked where a tool to check them exists here.

Every file under deploy/ is one the page shows, and every one it shows is there; the YAML
parses and scrapes what the server serves (docs/openapi.json); each `edgerunner runner start`
flag a recipe passes is one the built binary's `--help` lists; no recipe puts a secret on a
command line; the systemd unit stops the runner alone and waits out its drain, and
`systemd-analyze verify` accepts it where the tool exists (with the binary where this checkout
built it in place of /usr/local/bin/edgerunner, which verify requires to exist).

    EDGERUNNER_BIN=target/debug/edgerunner .venv/bin/python -m unittest discover -s tests/deploy
"""

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PAGE = (ROOT / "docs" / "autoscaling.md").read_text()
BIN = Path(os.environ.get("EDGERUNNER_BIN", ROOT / "target" / "debug" / "edgerunner"))
SECRET_FLAGS = ("--bootstrap-token", "--api-key", "--evidence-api-key", "--enrollment-token")


def start_flags():
    """The long flags `edgerunner runner start --help` lists."""
    help_text = subprocess.run([str(BIN), "runner", "start", "--help"], check=True,
                               capture_output=True, text=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", help_text))


def help_flags(*command):
    """The long flags `edgerunner COMMAND --help` lists."""
    help_text = subprocess.run([str(BIN), *command, "--help"], check=True,
                               capture_output=True, text=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", help_text))


def flags_of(words):
    return [w.split("=", 1)[0] for w in words if w.startswith("--")]


def unit_entries(text):
    """(section, key, value) of a systemd unit, continuation lines joined."""
    entries, section, pending = [], None, ""
    for line in text.splitlines():
        if pending:
            line, pending = pending + " " + line.strip(), ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if stripped.startswith("["):
            section = stripped.strip("[]")
            continue
        key, value = stripped.split("=", 1)
        entries.append((section, key.strip(), value.strip()))
    return entries


class TheRecipes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BIN.exists():
            raise unittest.SkipTest(f"{BIN} is not built (scripts/build)")
        cls.flags = start_flags()

    def test_the_page_shows_every_recipe_file_and_each_one_it_shows_is_there(self):
        files = {str(p.relative_to(ROOT)) for p in DEPLOY.rglob("*") if p.is_file()}
        shown = set(re.findall(r"\(\.\./(deploy/[^)]+)\)", PAGE))
        self.assertTrue(files)
        self.assertEqual(shown, files)

    def test_prometheus_scrapes_metrics_with_a_bearer_key_from_a_file(self):
        config = yaml.safe_load((DEPLOY / "prometheus" / "edgerunner.yml").read_text())
        [job] = config["scrape_configs"]
        self.assertEqual(job["scheme"], "https")
        document = json.loads((ROOT / "docs" / "openapi.json").read_text())
        self.assertIn(job["metrics_path"], document["paths"])
        operation = document["paths"][job["metrics_path"]]["get"]
        self.assertIn("200", operation["responses"])
        self.assertIn("401", operation["responses"])
        self.assertEqual(job["authorization"]["type"], "Bearer")
        self.assertIn("credentials_file", job["authorization"])
        self.assertNotIn("credentials", job["authorization"], "no key in the file itself")

    def test_the_systemd_unit_starts_the_runner_with_flags_it_has_and_lets_it_drain(self):
        text = (DEPLOY / "systemd" / "edgerunner-runner.service").read_text()
        service = {key: value for section, key, value in unit_entries(text) if section == "Service"}
        words = shlex.split(service["ExecStart"])
        self.assertEqual(words[:3], ["/usr/local/bin/edgerunner", "runner", "start"])
        used = flags_of(words[3:])
        self.assertTrue(set(used) <= self.flags, set(used) - self.flags)
        self.assertFalse([f for f in used if f in SECRET_FLAGS], "a secret on the command line")
        self.assertIn("--bootstrap-token-file", used)
        self.assertIn("bootstrap-token:", service["LoadCredential"])
        # SIGTERM to the runner alone, and time for its drain and a job's grace before SIGKILL.
        self.assertEqual(service["KillMode"], "mixed")
        self.assertEqual(service["KillSignal"], "SIGTERM")
        drain = int(words[words.index("--drain-timeout") + 1])
        self.assertGreater(int(service["TimeoutStopSec"]), drain + 10)
        self.assertEqual(service["Restart"], "on-failure")

    def test_systemd_analyze_verifies_the_unit(self):
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            self.skipTest("systemd-analyze is not installed here")
        text = (DEPLOY / "systemd" / "edgerunner-runner.service").read_text()
        with tempfile.TemporaryDirectory() as scratch:
            unit = Path(scratch) / "edgerunner-runner.service"
            unit.write_text(text.replace("/usr/local/bin/edgerunner", str(BIN.resolve())))
            done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
        # Only what the unit says counts: a host without systemd running also reports its own
        # units and missing dependencies (network-online.target, multi-user.target).
        # (verify exits 0 even then: its findings are lines naming the file, "…/NAME:LINE: …".)
        own = [line for line in (done.stdout + done.stderr).splitlines()
               if "edgerunner-runner.service:" in line]
        self.assertEqual(own, [], done.stdout + done.stderr)

    def test_the_container_runs_the_runner_as_a_user_with_flags_it_has(self):
        lines, pending = [], ""
        for line in (DEPLOY / "container" / "Containerfile").read_text().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            pending += line.rstrip("\\").strip() + " "
            if not line.endswith("\\"):
                lines.append(pending.strip())
                pending = ""
        instructions = [(line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in lines]
        entrypoint = json.loads(next(v for k, v in instructions if k == "ENTRYPOINT"))
        cmd = json.loads(next(v for k, v in instructions if k == "CMD"))
        at = entrypoint.index("/usr/local/bin/edgerunner")
        self.assertEqual(entrypoint[at + 1:at + 3], ["runner", "start"])
        used = flags_of(entrypoint[at + 3:] + cmd)
        self.assertTrue(set(used) <= self.flags, set(used) - self.flags)
        self.assertFalse([f for f in used if f in SECRET_FLAGS], "a secret on the command line")
        self.assertIn("--exec", cmd)
        # Built from this workspace's package, copied from where cargo puts it, run unprivileged.
        build = next(v for k, v in instructions if k == "RUN" and "cargo build" in v)
        package = build.split("-p ", 1)[1].split()[0]
        self.assertIn(f'name = "{package}"', (ROOT / "crates" / "runner" / "Cargo.toml").read_text())
        copied = next(v for k, v in instructions if k == "COPY" and v.startswith("--from=build"))
        self.assertIn(f"target/release/{package}", copied)
        self.assertNotIn(next(v for k, v in instructions if k == "USER"), ("root", "0"))
        self.assertEqual(next(v for k, v in instructions if k == "STOPSIGNAL"), "SIGTERM")
        self.assertIn(entrypoint[0], ("/usr/bin/tini",))
        self.assertIn("tini", next(v for k, v in instructions if k == "RUN" and "apt-get" in v))

    def test_keda_scales_a_job_per_queued_job_of_one_queue_each_pod_a_fresh_ephemeral_runner(self):
        documents = list(yaml.safe_load_all((DEPLOY / "keda" / "edgerunner-scaledjob.yml").read_text()))
        auth = next(d for d in documents if d["kind"] == "TriggerAuthentication")
        scaled = next(d for d in documents if d["kind"] == "ScaledJob")
        self.assertEqual(auth["apiVersion"], scaled["apiVersion"])
        self.assertEqual(auth["apiVersion"], "keda.sh/v1alpha1")
        [secret] = auth["spec"]["secretTargetRef"]
        self.assertEqual(secret["parameter"], "token")
        # The trigger: the server's /metrics with a bearer key, the queue's exact selector.
        [trigger] = scaled["spec"]["triggers"]
        self.assertEqual(trigger["type"], "metrics-api")
        self.assertEqual(trigger["authenticationRef"]["name"], auth["metadata"]["name"])
        meta = trigger["metadata"]
        self.assertEqual((meta["format"], meta["authMode"], meta["targetValue"]), ("prometheus", "bearer", "1"))
        document = json.loads((ROOT / "docs" / "openapi.json").read_text())
        path = "/" + meta["url"].split("://", 1)[1].split("/", 1)[1]
        self.assertIn("401", document["paths"][path]["get"]["responses"])
        selector = re.fullmatch(r'edgerunner_jobs\{queue="(q_[0-9a-f]{16})",state="queued"\}', meta["valueLocation"])
        self.assertIsNotNone(selector, meta["valueLocation"])
        # The metric has exactly these labels (the server's own exposition, pinned by its tests).
        self.assertIn('r#"edgerunner_jobs{queue="q_0123456789abcdef",state="queued"} 5"#',
                      (ROOT / "src" / "routes" / "views" / "metrics.rs").read_text())
        pod = scaled["spec"]["jobTargetRef"]["template"]["spec"]
        [init] = pod["initContainers"]
        [runner] = pod["containers"]
        # The queue is the one the registered runner serves: its routing's id.
        register = init["command"]
        self.assertEqual(register[:4], ["/usr/local/bin/edgerunner", "admin", "runners", "register"])
        value = lambda words, flag: words[words.index(flag) + 1]
        routing = [value(register, "--execution-kind"), value(register, "--runtime"), False, None, ["default"]]
        stable = json.dumps(routing, separators=(",", ":"))
        self.assertEqual(selector.group(1), "q_" + hashlib.sha256(stable.encode()).hexdigest()[:16])
        used = flags_of(register[4:])
        self.assertTrue(set(used) <= help_flags("admin", "runners", "register"),
                        set(used) - help_flags("admin", "runners", "register"))
        self.assertIn("--ephemeral", used)
        self.assertFalse([f for f in used if f in SECRET_FLAGS], "a secret on the command line")
        identity = value(register, "--identity-dir")
        # The runner reads what the init container wrote, and never the admin key.
        [script] = runner["command"][runner["command"].index("-c") + 1:]
        words = shlex.split(script)
        self.assertEqual(words[:4], ["exec", "/usr/local/bin/edgerunner", "runner", "start"])
        started = flags_of(words[4:])
        self.assertTrue(set(started) <= self.flags, set(started) - self.flags)
        self.assertFalse([f for f in started if f in SECRET_FLAGS], "a secret on the command line")
        self.assertIn("--ephemeral", started)
        self.assertEqual(value(words, "--bootstrap-token-file"), f"{identity}/bootstrap-token")
        self.assertIn(f"{identity}/runner-id", value(words, "--runner-id"))
        mounts = lambda container: {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        admin_volume = next(v["name"] for v in pod["volumes"] if "secret" in v)
        self.assertIn(admin_volume, mounts(init))
        self.assertNotIn(admin_volume, mounts(runner))
        self.assertTrue(value(register, "--api-key-file").startswith(mounts(init)[admin_volume]))
        self.assertEqual(mounts(init)["identity"], identity)
        self.assertEqual(mounts(runner)["identity"], identity)
        self.assertEqual(next(v for v in pod["volumes"] if v["name"] == "identity")["emptyDir"]["medium"], "Memory")
        # A deleted pod's job drains or goes back before SIGKILL.
        self.assertGreater(pod["terminationGracePeriodSeconds"], int(value(words, "--drain-timeout")) + 10)
        self.assertEqual(pod["restartPolicy"], "Never")


if __name__ == "__main__":
    unittest.main()
