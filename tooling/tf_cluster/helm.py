"""Run the real `helm` binary (Helm 4 by default, Helm 3 on request)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from . import CHART, TOOLS_BIN
from .errors import RenderError, ToolMissing

HELM_BINARIES = {"4": "helm", "3": "helm3"}


def helm_binary(major: str = "4") -> str:
    """Path of the pinned helm of that major version (.tools/bin first, then PATH)."""
    env_override = os.environ.get(f"TF_CLUSTER_HELM{major}")
    if env_override:
        return env_override
    name = HELM_BINARIES.get(major)
    if name is None:
        raise ToolMissing(f"unknown Helm major version {major!r}: use 3 or 4")
    local = TOOLS_BIN / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if not found:
        raise ToolMissing(f"{name} (Helm {major}) not found: run `make setup`")
    return found


def template(values_files: list[str | Path] = (), *, set_values: list[str] = (),
             release: str = "tf", namespace: str = "default", helm: str = "4",
             chart: Path = CHART, kube_version: str | None = None,
             extra_args: list[str] = ()) -> str:
    """Render the chart; return the manifest text. Raises RenderError with helm's message."""
    argv = [helm_binary(helm), "template", release, str(chart), "--namespace", namespace]
    for f in values_files:
        argv += ["-f", str(f)]
    for s in set_values:
        argv += ["--set", s]
    if kube_version:
        argv += ["--kube-version", kube_version]
    argv += list(extra_args)
    try:
        proc = subprocess.run(argv, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        raise RenderError(clean_helm_error(e.stderr), values_files=[str(f) for f in values_files]) from e
    return proc.stdout


def clean_helm_error(stderr: str) -> str:
    """Helm's message without its boilerplate (`Error: execution error at (...):`, --debug hint)."""
    lines = [ln for ln in stderr.strip().splitlines()
             if ln.strip() and "Use --debug flag" not in ln]
    text = "\n".join(lines)
    if text.startswith("Error: "):
        text = text[len("Error: "):]
    if text.startswith("execution error at ("):
        text = text.split("): ", 1)[-1]
    return text


def parse(manifest: str) -> list[dict]:
    """The rendered documents (empty ones dropped), in helm's order."""
    return [d for d in yaml.safe_load_all(manifest) if d]
