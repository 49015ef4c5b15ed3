"""values.schema.json carries every documented value's help, as values.yaml's `# --` comments say
(issue 42): editors with the YAML language server show it on hover."""

from __future__ import annotations

import json
import subprocess
import sys

from tf_cluster import CHART, ROOT

sys.path.insert(0, str(ROOT / "hack"))
import schema_docs  # noqa: E402


def test_the_schema_says_what_values_yaml_says():
    r = subprocess.run([sys.executable, ROOT / "hack" / "schema_docs.py", "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_leaf_value_has_its_description_and_default_in_the_schema():
    schema = json.loads((CHART / "values.schema.json").read_text())
    entries = schema_docs.documented()
    assert len(entries) >= 170  # every value of values.yaml helm-docs lists (179 when this was written)
    leaves = [e for e in entries if not any(o["key"].startswith(e["key"] + ".") for o in entries)]
    missing = []
    for e in entries:
        node = schema_docs.node_for(json.loads(json.dumps(schema)), e["key"])
        if not node.get("description"):
            missing.append(e["key"])
        elif node["description"] != e["description"]:
            missing.append(f"{e['key']} (differs)")
    assert missing == [], missing
    assert len(leaves) >= 160  # 169 when this was written


def test_a_comment_changed_in_values_yaml_fails_the_check(tmp_path):
    """The check can fail: the schema written for a changed comment differs from the committed one."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    entries = schema_docs.documented()
    entries[0] = {**entries[0], "description": entries[0]["description"] + " (changed)"}
    assert schema_docs.text(schema_docs.described(schema, entries)) != (CHART / "values.schema.json").read_text()
