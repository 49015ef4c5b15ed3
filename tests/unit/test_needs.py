"""A missing component of the harness (tests/needs.py): a developer's run skips, CI fails, naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
MODULE = """
import pytest
from needs import absent


@pytest.mark.needs("Argo CD (argocd-application-controller)", False, "make e2e starts it")
def test_marked():
    pass


def test_asked_in_the_test():
    absent("Prometheus (/usr/bin/prometheus)", "hack/node/build.sh installs it")
"""


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_component.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(TESTS)}
    if ci is not None:
        env["CI"] = ci
    argv = [sys.executable, "-m", "pytest", "-p", "needs", "-rfs", "-p", "no:cacheprovider", str(tmp_path)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_a_missing_component_fails_its_scenarios_naming_it(tmp_path, ci):
    r = run(tmp_path, ci)
    assert r.returncode == 1, r.stdout
    assert "1 failed, 1 error" in r.stdout, r.stdout  # the marked one fails at its setup
    assert (
        "CI=true and a component of the harness is missing: Argo CD (argocd-application-controller) is missing"
        in r.stdout
    )
    assert "missing: Prometheus (/usr/bin/prometheus) is missing: hack/node/build.sh installs it" in r.stdout


@pytest.mark.parametrize("ci", [None, "false"], ids=["unset", "false"])
def test_a_developers_run_skips_them_saying_which(tmp_path, ci):
    r = run(tmp_path, ci)
    assert r.returncode == 0, r.stdout
    assert "2 skipped" in r.stdout, r.stdout
    assert "Argo CD (argocd-application-controller) is missing: make e2e starts it" in r.stdout
