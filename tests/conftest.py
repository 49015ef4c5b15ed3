"""Shared fixtures. The render helpers live in tests/rendering.py."""

from __future__ import annotations

import os
import shutil
import subprocess

import needs
import pytest
from needs import absent

from rendering import HELM_VERSIONS

# A missing component of the harness: skipped, or failed in CI (tests/needs.py, its hooks)
pytest_configure, pytest_runtest_setup = needs.pytest_configure, needs.pytest_runtest_setup


@pytest.fixture(params=HELM_VERSIONS, ids=lambda v: f"helm{v}")
def helm_major(request) -> str:
    """Helm's major version, "4" or "3": the test runs under each. A Helm 3 that is nowhere (no
    `make setup`, none on PATH) skips the helm3 case, saying so, in a developer's partial run; CI
    fails it (tests/needs.py)."""
    if request.param == "3":
        from tf_cluster.errors import ToolMissing
        from tf_cluster.toolcache import helm_path

        try:
            helm_path("3")
        except ToolMissing as e:
            absent("Helm 3", f"`make setup` builds it into .tools/bin ({e})")
    return request.param


@pytest.fixture(scope="session")
def signing_keyrings(tmp_path_factory):
    """A signing key made here (no passphrase), exported as Helm reads keyrings."""
    if not shutil.which("gpg"):
        absent("gpg (GnuPG)", "apt-get install gnupg to test signed packages")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(
        [*gpg, "--quick-gen-key", "tf-cluster test <test@example.invalid>", "rsa3072", "sign", "never"],
        env=env,
        check=True,
        capture_output=True,
    )
    secring, pubring = home / "secring.gpg", home / "pubring.export.gpg"
    secring.write_bytes(subprocess.run([*gpg, "--export-secret-keys"], env=env, check=True, capture_output=True).stdout)
    pubring.write_bytes(subprocess.run(["gpg", "--batch", "--export"], env=env, check=True, capture_output=True).stdout)
    yield secring, pubring
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, capture_output=True)  # the agent gpg started


# ------------------------------------------------------------ where CI's minutes go
# With $TF_CLUSTER_TIMINGS set (make check), each test module's time (setup + call + teardown of
# its tests) goes into the timing record that `make check` prints at its end (tooling/timings.py).
# Modules under TIMED_MODULE_SECONDS are summed into one line. A failed test is recorded under its
# module, marked FAILED, so the end of CI's log names it (the pytest summary scrolls off above it).
# Each module's CPU seconds too: each test phase's report carries what its process (a pytest-xdist
# worker under `make test`) and the children it waited for used since the phase before, from the
# end of collection on (`cpu_s`, an attribute xdist passes on with the report).
TIMED_MODULE_SECONDS = 15.0
_module_times: dict[str, list[float]] = {}  # module -> [seconds, first start, CPU seconds]
_failed: dict[str, list[tuple[str, float, float]]] = {}  # module -> [(test, seconds, start)]
_cpu_read: list[float] = []  # this process's CPU seconds at the end of collection, then of each test phase


def _cpu_now() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def pytest_collection_finish(session) -> None:
    if os.environ.get("TF_CLUSTER_TIMINGS"):
        _cpu_read.append(_cpu_now())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _cpu_read:
        now = _cpu_now()
        outcome.get_result().cpu_s = now - _cpu_read[-1]
        _cpu_read.append(now)
        del _cpu_read[:-1]


def pytest_runtest_logreport(report) -> None:
    module, _, test = report.nodeid.partition("::")
    spent = _module_times.setdefault(module, [0.0, report.start, 0.0])
    spent[0] += report.duration
    spent[2] += getattr(report, "cpu_s", 0.0)
    if report.failed:
        label = test.replace("/", "_") + ("" if report.when == "call" else f" ({report.when})")
        _failed.setdefault(module, []).append((label, report.duration, report.start))


def pytest_sessionfinish(session) -> None:
    # under pytest-xdist (make test) the controller records: it receives every worker's reports
    worker = hasattr(session.config, "workerinput")
    if worker or not os.environ.get("TF_CLUSTER_TIMINGS") or not _module_times:
        return
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tooling"))
    from timings import record

    rest, rest_cpu, rest_start, n = 0.0, 0.0, None, 0
    for module, (seconds, start, cpu) in _module_times.items():
        failed = _failed.get(module, [])
        if seconds >= TIMED_MODULE_SECONDS or failed:
            name = Path(module).name  # basenames are unique (tests/unit/test_seams.py)
            record(name, seconds, start, 1 if failed else 0, cpu)
            for test, spent, began in failed:
                record(f"{name}/{test}", spent, began, 1)
        else:
            rest, rest_cpu, n = rest + seconds, rest_cpu + cpu, n + 1
            rest_start = start if rest_start is None else min(rest_start, start)
    if n:
        record(f"{n} modules under {TIMED_MODULE_SECONDS:.0f} s each", rest, rest_start or 0.0, 0, rest_cpu)
