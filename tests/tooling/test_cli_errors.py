"""The exit-code table of docs/reference/exit-codes.md, row by row, through the real command: one
line naming what was wrong, no traceback (issue 42)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tf_cluster import ROOT, errors

TABLE = ROOT / "docs" / "reference" / "exit-codes.md"
EXAMPLE = ROOT / "values-examples" / "mwms-cpu.yaml"


def tf_cluster(*argv, env=None, python=sys.executable, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "tf_cluster.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


def one_line(r: subprocess.CompletedProcess, command: str) -> str:
    """The error: one line, `tf-cluster COMMAND: error: ...`, and no traceback."""
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"tf-cluster {command}: error: "), lines[0]
    return lines[0]


def test_the_table_names_every_code_the_command_uses_and_a_test_for_each():
    rows = dict(re.findall(r"^\| (\d+) \| (.+)$", TABLE.read_text(), re.M))
    codes = {c.exit_code for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.TfClusterError)}
    assert codes | {0, 130} == {int(c) for c in rows}
    this = Path(__file__).read_text()
    for code, row in rows.items():
        named = re.findall(r"`(test_\w+)`", row)
        for test in named:
            assert f"def {test}(" in this, f"row {code} names {test}, which is not here"
    from tf_cluster import cli

    documented = dict(re.findall(r"(\d+) ([a-z][^,.]+)", cli.__doc__.split("Exit codes:")[1]))
    assert {int(c) for c in documented} == codes | {0}, documented


def test_exit_0_when_it_renders(tmp_path):
    r = tf_cluster("render", "-f", EXAMPLE)
    assert r.returncode == 0, r.stderr
    assert "kind: Job" in r.stdout


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "bad.yaml").write_text("a: [\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    return tmp_path


@pytest.mark.parametrize(
    "argv,said",
    [
        (["render", "-f", "missing.yaml"], "values file missing.yaml: no such file"),
        (["validate", "-f", "bad.yaml"], "values file bad.yaml is not valid YAML (line 2, column 1)"),
        (["render", "-f", "list.yaml"], "values file list.yaml: expected a mapping of values"),
        (["render", "-f", "."], "values file .: cannot read it (Is a directory)"),
        (["status", "tf", "--kubeconfig", "bad.yaml"], "no cluster to talk to: bad.yaml: not valid YAML (line 2"),
        (["logs", "tf", "--kubeconfig", "missing.yaml"], "no cluster to talk to: missing.yaml"),
        (["validate", "--kube-version", "1.99"], "--kube-version 1.99: no schemas for it; give one of"),
        (["from-tfjob", "missing.yaml"], "missing.yaml: no such file"),
        (["install", "tf", "-f", "missing.yaml"], "values file missing.yaml: no such file"),
        (["upgrade", "tf", "--kubeconfig", "missing.yaml"], "no cluster to talk to: missing.yaml"),
        (["install", "tf", "--timeout", "0"], "--timeout 0.0: a number of seconds above 0"),
        (["install", "tf", "--timeout", "nan"], "--timeout nan: a number of seconds above 0"),
        (["status", "tf", "--interval", "nan"], "--interval nan: a number of seconds above 0"),
        (["uninstall", "tf", "--kubeconfig", "bad.yaml"], "no cluster to talk to: bad.yaml: not valid YAML"),
    ],
    ids=[
        "values-missing",
        "values-not-yaml",
        "values-not-a-mapping",
        "values-a-directory",
        "kubeconfig-not-yaml",
        "kubeconfig-missing",
        "kube-version-unknown",
        "tfjob-missing",
        "install-values-missing",
        "upgrade-kubeconfig-missing",
        "install-timeout",
        "install-timeout-nan",
        "status-interval-nan",
        "uninstall-kubeconfig-not-yaml",
    ],
)
def test_exit_2_for_what_the_user_gave(argv, said, bad_files):
    r = tf_cluster(*argv, cwd=bad_files)
    line = one_line(r, argv[0])
    assert r.returncode == 2, r.stderr
    assert said in line, line


def test_exit_3_for_a_missing_tool_or_extra(tmp_path):
    r = tf_cluster("render", env={"TF_CLUSTER_HELM4": "/nonexistent/helm"})
    assert r.returncode == 3
    assert "TF_CLUSTER_HELM4=/nonexistent/helm: no executable there" in one_line(r, "render")


def test_run_local_without_tensorflow_exits_at_once_naming_the_extra(tmp_path):
    """A real environment without TensorFlow: a venv holding this one's packages but tensorflow's.
    Before, each task died with ModuleNotFoundError and the run crash-looped with backoff."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    (site,) = (venv / "lib").glob("python*/site-packages")
    ours = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p, "yaml").exists()))
    for entry in ours.iterdir():
        if not re.match(r"(tensorflow|tf_keras|keras|_distutils_hack|distutils-precedence)", entry.name, re.I):
            (site / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    check = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('tensorflow'))"], capture_output=True, text=True
    )
    assert check.stdout.strip() == "None", check.stdout + check.stderr  # really without TensorFlow
    t0 = time.monotonic()
    r = tf_cluster("run-local", "-f", EXAMPLE, "--workdir", tmp_path / "run", python=python)
    took = time.monotonic() - t0
    assert r.returncode == 3, r.stdout + r.stderr
    line = one_line(r, "run-local")
    assert "tf-cluster[local]" in line and "pipx install --force '.[local]'" in line, line
    # the whole extra into tf-cluster's environment: TensorFlow alone lacks the trainers' tf-keras
    inject = line.split("pipx inject tf-cluster ", 1)[1]
    assert "'tensorflow==" in inject and "'tf-keras==" in inject and "'tensorboard" in inject, line
    assert took < 10, f"took {took:.1f}s"
    assert not (tmp_path / "run").exists()  # nothing started


def test_exit_4_when_the_chart_refuses_the_values():
    r = tf_cluster("render", "--set", "nope=1", "--set", "roles.worker.replicas=many")
    assert r.returncode == 4
    line = one_line(r, "render")
    assert "values refused by the chart's schema (values.schema.json): " in line, line
    assert "additional properties 'nope' not allowed" in line and "/roles/worker/replicas" in line, line


def test_exit_5_for_an_invalid_manifest():
    """Manifests Kubernetes' schema refuses, though the chart rendered them: a Kubernetes older
    than the chart supports (1.29), whose Job has no podFailurePolicy.onExitCodes alone."""
    r = tf_cluster("validate", "--kube-version", "1.25")
    assert r.returncode == 5, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("tf-cluster validate: error: Kubernetes 1.25: Job/"), r.stderr


def test_help_lists_the_users_verbs_and_names_the_maintainers_apart():
    r = tf_cluster("--help")
    assert r.returncode == 0
    listed = re.findall(r"^    (\S+)", r.stdout.split("commands:")[1].split("Maintainers")[0], re.M)
    assert listed == [
        "render",
        "validate",
        "build",
        "run-local",
        "smoke",
        "install",
        "upgrade",
        "uninstall",
        "status",
        "logs",
        "tune",
        "from-tfjob",
        "chart",
        "docs",
        "completion",
    ]
    assert "SUPPRESS" not in r.stdout and "{" not in r.stdout  # no argparse artefacts
    assert "Maintainers of the chart: package, publish, release" in " ".join(r.stdout.split())
    for verb in ("package", "publish", "release", "tune-show"):
        assert tf_cluster(verb, "--help").returncode == 0
