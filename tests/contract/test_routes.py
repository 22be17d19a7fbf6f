"""The route table in src/lib.rs and the API document (docs/openapi.json) name the same
operations, both ways; and the document is well formed for the tools that read it.

A route the server serves but the document omits, or an operation the document lists but no
route serves, fails here without a server. tests/e2e/tests/contract.rs checks the same against
the running server, and every e2e answer is checked against the document (tests/e2e/src/contract.rs).
"""

import json
import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = json.loads((ROOT / "docs" / "openapi.json").read_text())
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}

# Routes answered before the route table, by their own code in src/lib.rs and src/panel.rs.
BEFORE_THE_TABLE = {
    ("get", "/"),
    ("get", "/healthz"),
    ("get", "/openapi.json"),
    # The panel (src/panel.rs): the single page at every path under /remote-runners but
    # static/, and its files under /remote-runners/static/.
    ("get", "/remote-runners"),
    ("get", "/remote-runners/"),
    ("get", "/remote-runners/{}"),
    ("get", "/remote-runners/{}/{}"),
    ("get", "/remote-runners/static/{}"),
    ("get", "/remote-runners/static/{}/{}"),
}

ARM = re.compile(r"^\s*\((Get|Post|Put|Patch|Delete), \[([^\]]*)\]\) =>", re.M)


def route_table():
    """(method, path with every template as {}) for each arm of fn route's table."""
    source = (ROOT / "src" / "lib.rs").read_text()
    table = source[source.index("match (method, segments.as_slice())"):]
    routes = set()
    for method, segments in ARM.findall(table):
        parts = [s.strip() for s in segments.split(",") if s.strip()]
        if parts and parts[0] == '"__bench"':
            continue  # the benchmark build's own routes (feature bench-floor)
        path = "/" + "/".join(p.strip('"') if p.startswith('"') else "{}" for p in parts)
        routes.add((method.lower(), path))
    return routes


def documented():
    ops = set()
    for path, item in DOCUMENT["paths"].items():
        for method in item:
            if method in METHODS:
                ops.add((method, re.sub(r"\{[^}]+\}", "{}", path)))
    return ops


def resolve(node):
    """What a local `$ref` names, or the node itself."""
    ref = node.get("$ref")
    if ref is None:
        return node
    target = DOCUMENT
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return target


class RouteTableAndDocument(unittest.TestCase):
    def test_every_route_is_documented_and_every_operation_is_routed(self):
        table = route_table()
        self.assertGreater(len(table), 40, "the route table was not found in src/lib.rs")
        served = table | BEFORE_THE_TABLE
        self.assertEqual(sorted(documented() - served), [], "documented but not routed")
        self.assertEqual(sorted(served - documented()), [], "routed but not documented")

    def test_each_operation_has_an_id_a_tag_security_and_responses(self):
        ids = set()
        for path, item in DOCUMENT["paths"].items():
            for method, op in item.items():
                if method not in METHODS:
                    continue
                where = f"{method.upper()} {path}"
                self.assertNotIn(op["operationId"], ids, where)
                ids.add(op["operationId"])
                self.assertTrue(op.get("tags"), where)
                self.assertIn("security", op, where)
                self.assertTrue(op.get("responses"), where)
                for name in re.findall(r"\{([^}]+)\}", path):
                    params = [p for p in op.get("parameters", []) if p.get("in") == "path"]
                    self.assertIn(name, [p["name"] for p in params], f"{where}: path parameter")

    def test_every_error_response_names_its_codes(self):
        """Each 4xx/5xx JSON answer is the shared Error with the codes that status can carry."""
        for path, item in DOCUMENT["paths"].items():
            for method, op in item.items():
                if method not in METHODS:
                    continue
                for status, response in op["responses"].items():
                    if not status.startswith(("4", "5")):
                        continue
                    where = f"{method.upper()} {path} {status}"
                    response = resolve(response)
                    schema = response["content"]["application/json"]["schema"]
                    # A refusal that carries more than the error (a completion's stored
                    # decision) is a oneOf of such schemas; each names its codes.
                    for branch in schema.get("oneOf", [schema]):
                        if "$ref" in branch and branch["$ref"] != "#/components/schemas/Error":
                            branch = resolve(branch)
                        else:
                            self.assertEqual(branch.get("$ref"), "#/components/schemas/Error", where)
                        codes = branch["properties"]["error"]["properties"]["code"]["enum"]
                        self.assertTrue(codes, where)
                        for code in codes:
                            self.assertRegex(code, r"^[A-Z][A-Z0-9_]*$", where)

    def test_a_set_of_enumerated_values_may_hold_every_value(self):
        """An array of distinct values from an enum bounds its length at the enum's size: a
        smaller maxItems refuses a valid answer (a key with all four scopes did, in the fuzzer)."""

        def walk(node, where):
            if isinstance(node, dict):
                items = resolve(node.get("items", {})) if node.get("type") == "array" else {}
                if node.get("uniqueItems") and "enum" in items and "maxItems" in node:
                    self.assertEqual(node["maxItems"], len(items["enum"]), where)
                for key, value in node.items():
                    walk(value, f"{where}/{key}")
            elif isinstance(node, list):
                for index, value in enumerate(node):
                    walk(value, f"{where}/{index}")

        walk(DOCUMENT, "#")

    def test_every_reference_resolves(self):
        def walk(node):
            if isinstance(node, dict):
                ref = node.get("$ref")
                if ref is not None:
                    target = DOCUMENT
                    for part in ref.removeprefix("#/").split("/"):
                        self.assertIn(part, target, ref)
                        target = target[part]
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(DOCUMENT)


if __name__ == "__main__":
    unittest.main()
