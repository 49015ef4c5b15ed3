"""One source per version, and every copy that cannot be derived from it agrees with it.

- TensorFlow: the chart's `appVersion` (Chart.yaml). The default image tag (`<appVersion>-cpu`), the
  image builds (tooling/tf_cluster/images.py), the node harness (hack/node/config.py) and the golden
  renders read it; the pins (pip requirements, pyproject's extras) and the prose naming the current
  version are copies checked here. A figure measured with an older TensorFlow says so ("measured,
  TF 2.21") and is left out.
- The e2e node's Kubernetes: hack/node/k8s-version, read by the Makefile (NODE_K8S_VERSION),
  hack/node/config.py, hack/node/build.sh, hack/kind/build-node-image.sh and tests/tiers.py.
- The oldest supported Kubernetes (the kube-apiserver suite's): the Makefile's K8S_API_VERSION, with
  defaults in scripts that run without make.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tf_cluster import ROOT, images

sys.path.insert(0, str(ROOT / "hack"))
from node import config as node_config  # noqa: E402

TF = str(yaml.safe_load((ROOT / "charts" / "tf-cluster" / "Chart.yaml").read_text())["appVersion"])
TF_MINOR = ".".join(TF.split(".")[:2])
NODE_K8S = (ROOT / "hack" / "node" / "k8s-version").read_text().strip()


def tracked(*patterns: str) -> list[Path]:
    """The repository's files matching `patterns` (git pathspecs), without the generated golden renders."""
    out = subprocess.run(["git", "ls-files", "--", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in out.stdout.split() if not name.startswith("tests/golden/")]


def found(paths: list[Path], pattern: str) -> list[tuple[str, str]]:
    """(file:line, the pattern's first group) for every match."""
    rx = re.compile(pattern)
    return [
        (f"{path.relative_to(ROOT)}:{n}", m.group(1))
        for path in paths
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for m in rx.finditer(line)
    ]


def test_the_tooling_reads_the_tensorflow_version_from_the_chart():
    assert images.tf_version() == TF and node_config.tf_version() == TF


@pytest.mark.parametrize(
    "path,package",
    [
        ("tooling/requirements.txt", "tensorflow_cpu"),
        ("tooling/requirements-nodeps.txt", "tf-keras"),
        ("pyproject.toml", "tensorflow"),
        ("pyproject.toml", "tf-keras"),
    ],
)
def test_the_tensorflow_pins_are_the_charts_app_version(path, package):
    pins = found([ROOT / path], rf"(?<![\w-]){re.escape(package)}==([\w.]+)")
    assert pins and {v for _, v in pins} == {TF}, f"{path} pins {package} at {pins}; Chart.yaml appVersion is {TF}"


def test_tensorboard_is_pinned_at_tensorflows_minor():
    (pin,) = found([ROOT / "tooling" / "requirements.txt"], r"^tensorboard==([\d.]+)")
    assert pin[1].startswith(TF_MINOR + "."), pin


def test_every_image_tag_written_out_is_the_charts_app_version():
    """`tf-cluster-trainer:<tf>-cpu` in the docs, `tag: <tf>-gpu` in the examples: copies for readers."""
    files = tracked("*.md", "*.yaml", "*.yml", "*.py", "*.sh", "*.txt", "*.j2")
    tags = found(files, r"tf-cluster-trainer:(\d+\.\d+\.\d+)") + found(files, r"\btag: \"?(\d+\.\d+\.\d+)-(?:cpu|gpu)")
    assert tags and [t for t in tags if t[1] != TF] == []


def test_the_prose_names_the_current_tensorflow():
    """ "TensorFlow 2.21" in the README, CONTRIBUTING and the docs is the version installed now."""
    mentions = found(
        [*tracked("README.md", "CONTRIBUTING.md"), *tracked("docs/*.md")], r"TensorFlow (?:CPU )?(\d+\.\d+)"
    )
    assert mentions and [m for m in mentions if m[1] != TF_MINOR] == []


# ----------------------------------------------------------------- Kubernetes


def make_variable(name: str) -> str:
    """The Makefile's own value of `name`: not one a calling make passes down (make check runs
    `make test` with the variables on its command line, which reach sub-makes in MAKEFLAGS) or the
    environment sets."""
    passed = {"MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL", name}
    env = {k: v for k, v in os.environ.items() if k not in passed}
    argv = ["make", "-s", "-n", "-p", "-f", "Makefile", "help"]
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    (value,) = {ln.split("=", 1)[1].strip() for ln in r.stdout.splitlines() if re.match(rf"^{name} :?\??= ", ln)}
    return value


def test_the_nodes_kubernetes_has_one_source():
    assert re.fullmatch(r"\d+\.\d+\.\d+", NODE_K8S)
    assert make_variable("NODE_K8S_VERSION") == NODE_K8S
    assert node_config.K8S_VERSION == NODE_K8S or "NODE_K8S_VERSION" in os.environ
    for script in ("hack/node/build.sh", "hack/kind/build-node-image.sh"):
        (default,) = found([ROOT / script], r"^K8S_VERSION=\$\{K8S_VERSION:-(.*?)\}")
        assert "k8s-version" in default[1], default


def test_the_oldest_kubernetes_copies_agree_with_the_makefile():
    api = make_variable("K8S_API_VERSION")
    copies = found([ROOT / "hack" / "apiserver" / "build.sh"], r"K8S_VERSION:-(\d+\.\d+\.\d+)")
    copies += found([ROOT / "tests" / "e2e" / "test_apiserver.py"], r"\"K8S_VERSION\", \"(\d+\.\d+\.\d+)\"")
    assert len(copies) == 2 and {v for _, v in copies} == {api}, copies


def test_kubernetes_versions_in_the_docs_are_ones_the_repository_uses():
    """A full Kubernetes version (1.2x-1.9x.y) in prose is the node's, the oldest supported, kubectl's
    (tooling/bootstrap.py) or the chart's kubeVersion floor: after a bump, a stale one fails here."""
    (kubectl,) = found(
        [ROOT / "tooling" / "bootstrap.py"], r"dl\.k8s\.io/release/v(1\.\d+\.\d+)/bin/linux/amd64/kubectl"
    )
    (floor,) = found([ROOT / "charts" / "tf-cluster" / "Chart.yaml"], r"^kubeVersion: \">=(1\.\d+\.\d+)-0\"")
    known = {NODE_K8S, make_variable("K8S_API_VERSION"), kubectl[1], floor[1]}
    mentions = found([*tracked("*.md")], r"(?<![\w.])v?(1\.(?:2[5-9]|[3-9]\d)\.\d+)(?![\w.])")
    assert mentions and [m for m in mentions if m[1] not in known] == [], f"known: {sorted(known)}"
