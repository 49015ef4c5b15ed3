#!/usr/bin/env python3
"""values.schema.json's descriptions and defaults, from values.yaml's `# --` comments (issue 42).

helm-docs (the field's reader of those comments; `make setup` builds it) lists every value it
documents (key, default, description) through charts/tf-cluster/.values-docs.json.gotmpl; this
script writes each into the schema node of that key, so editors with the YAML language server show
the same help as the chart's README. The schema's constraints are hand-written and stay as they are:
only `description` and `default` are written. A value whose node is shared through a `$ref` (every
role's settings) gets a local node beside the reference (`allOf: [{$ref}]` plus its own
`properties`), which constrains nothing more.

    python3 hack/schema_docs.py           rewrite values.schema.json
    python3 hack/schema_docs.py --check   exit 1 when it is not what values.yaml says (a test runs this)
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "tf-cluster"
SCHEMA = CHART / "values.schema.json"
TEMPLATE = ".values-docs.json.gotmpl"


def helm_docs() -> str:
    found = os.environ.get("HELM_DOCS") or str(ROOT / ".tools" / "bin" / "helm-docs")
    if not Path(found).exists():
        sys.exit(f"schema_docs: helm-docs not found at {found}: run `make setup` (or set HELM_DOCS)")
    return found


def documented() -> list[dict]:
    """What helm-docs reads of values.yaml: [{key, type, default, description}], key order."""
    out = subprocess.run(
        [helm_docs(), "--chart-search-root", str(CHART.parent), "--template-files", TEMPLATE, "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [
        {"key": e["key"], "default": e["default"], "description": e["autodescription"] or e["description"]}
        for e in json.loads(out)
    ]


def default_of(text: str):
    """helm-docs' default (`...` markdown) as JSON, or None when it is not JSON (a @default text)."""
    if text.startswith("`") and text.endswith("`"):
        raw = text[1:-1]
        if raw == "nil":
            return (True, None)
        try:
            return (True, json.loads(raw))
        except ValueError:
            return (False, None)
    return (False, None)


def local(node: dict) -> dict:
    """`node` made one whose own keywords may be written: a `$ref` node becomes allOf [the ref]."""
    if "$ref" in node:
        ref = node.pop("$ref")
        node["allOf"] = [{"$ref": ref}]
    return node


def resolve(schema: dict, node: dict) -> dict:
    """The node a `$ref` (or a local node's allOf [$ref]) stands for, followed to the end."""
    while True:
        ref = node.get("$ref") or next((a["$ref"] for a in node.get("allOf", []) if "$ref" in a), None)
        if not ref:
            return node
        node = schema
        for part in ref.lstrip("#/").split("/"):
            node = node[part]


def node_for(schema: dict, key: str) -> dict:
    """The node to describe `key` in: the schema's own, or one made beside a shared `$ref`."""
    node = schema
    for part in key.split("."):
        node = local(node)
        props = node.get("properties", {})
        if part not in props:
            if part not in resolve(schema, node).get("properties", {}):
                raise SystemExit(
                    f"schema_docs: {key}: values.yaml documents it, but values.schema.json has no node for `{part}`"
                )
            props = node.setdefault("properties", {})
            props[part] = {}  # beside the shared one: describes, constrains nothing
        node = props[part]
    return local(node)


def described(schema: dict, entries: list[dict]) -> dict:
    out = copy.deepcopy(schema)
    for e in entries:
        node = node_for(out, e["key"])
        if e["description"]:
            node["description"] = e["description"]
        ok, value = default_of(e["default"])
        if ok:
            node["default"] = value
    return out


def text(schema: dict) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    current = SCHEMA.read_text()
    want = text(described(json.loads(current), documented()))
    if args.check:
        if want != current:
            print(
                "values.schema.json does not carry values.yaml's descriptions and defaults: run "
                "`python3 hack/schema_docs.py` (make docs does)",
                file=sys.stderr,
            )
            return 1
        print("values.schema.json: every documented value's description and default as values.yaml says")
        return 0
    if want != current:
        SCHEMA.write_text(want)
        print(f"wrote {SCHEMA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
