"""Render the chart with the real helm binaries (Helm 4 and Helm 3); imported by the suites as `rendering`.
(Not in conftest.py: tests/e2e/cluster has its own conftest, and `from conftest import` would find either.)"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import yaml

from tf_cluster import ROOT, helm, manifests

EXAMPLES = sorted((ROOT / "values-examples").glob("*.yaml"))
HELM_VERSIONS = ("4", "3")


@functools.lru_cache(maxsize=256)
def _render(values_yaml: str, helm_major: str, release: str, namespace: str) -> str:
    values_path = Path(ROOT / "build" / "test-values")
    values_path.mkdir(parents=True, exist_ok=True)
    # named by its content, written whole: `make test`'s processes (pytest-xdist) may write the same
    # file at once, and none may read it half-written
    f = values_path / f"v{hashlib.sha256(values_yaml.encode()).hexdigest()[:16]}.yaml"
    tmp = f.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(values_yaml)
    tmp.replace(f)
    return helm.template([f], release=release, namespace=namespace, helm=helm_major)


def render_text(
    values: dict | None = None,
    *,
    helm_major: str = "4",
    release: str = "tf",
    namespace: str = "default",
    files: list[Path] = (),
) -> str:
    text = "\n".join(Path(p).read_text() for p in files)
    merged = yaml.safe_load(text) if text.strip() else {}
    merged = deep_merge(merged or {}, values or {})
    return _render(json.dumps(merged, sort_keys=True), helm_major, release, namespace)


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render(values: dict | None = None, **kw) -> list[dict]:
    return helm.parse(render_text(values, **kw))


def pods(values: dict | None = None, **kw) -> list[manifests.Pod]:
    return manifests.pods(render(values, **kw), namespace=kw.get("namespace", "default"))
