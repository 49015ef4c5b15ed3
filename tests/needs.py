"""A scenario needs a part of the harness (Argo CD, chromium, Prometheus, kwok, the Cilium agent,
three nodes, a binary the node's build makes). A developer's partial run skips it, saying which;
CI (CI=true, which `make check` sets in tooling/check.sh; .ci/run runs it) fails it, naming the
component: a broken component must not give a green run with skips.

    absent("Prometheus", "hack/node/build.sh installs it")          # in a test or fixture
    pytestmark = pytest.mark.needs("Argo CD", bool(pid), "make e2e starts it")   # the hooks below
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("true", "1")


def absent(component: str, how: str) -> None:
    """`component` is missing here: fail in CI, skip elsewhere; `how` says how to get it."""
    message = f"{component} is missing: {how}"
    if IN_CI:
        pytest.fail(f"CI=true and a component of the harness is missing: {message}", pytrace=False)
    pytest.skip(message)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "needs(component, present, how): the test needs a component of the harness; when `present` (a "
        "bool, or a callable asked when the test starts) is false it skips, or fails in CI (CI=true), "
        "naming the component and `how` to get it",
    )


def pytest_runtest_setup(item) -> None:
    for mark in item.iter_markers("needs"):
        component, present, how = mark.args
        if not (present() if callable(present) else present):  # a callable: asked when the test starts
            absent(component, how)
