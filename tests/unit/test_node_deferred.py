"""What `make check` builds after the node is up (hack/node/deferred.py: Argo CD and kwok, beside
the first scenarios): a scenario that needs them waits for that build, and gets its failure, with
the build's log, instead of a missing component. Real processes stand for the build."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
from node import deferred, proc  # noqa: E402
from node.proc import NodeError  # noqa: E402


@pytest.fixture
def state(tmp_path, monkeypatch):
    for name in ("STATUS", "LOG", "NAMES"):
        monkeypatch.setattr(deferred, name, tmp_path / name.lower())
    monkeypatch.setattr(deferred, "PID", tmp_path / "deferred.pid")
    monkeypatch.setattr(proc, "run", tmp_path)  # where proc.pid_of reads the harness's pid files
    deferred.NAMES.write_text("argocd kwok")
    return tmp_path


def build_process(state: Path, status: str) -> subprocess.Popen:
    """A live process in the build's place, as start_later records one (`deferred` in its command line)."""
    p = subprocess.Popen(["sh", "-c", "sleep 60", "hack/node deferred"])
    deferred.PID.write_text(str(p.pid))
    deferred.STATUS.write_text(status)
    return p


def test_nothing_deferred_is_not_waited_for(state):
    t0 = time.monotonic()
    assert deferred.wait("argocd") is None
    assert time.monotonic() - t0 < 1


def test_a_running_build_is_waited_for_until_it_says_it_is_done(state):
    p = build_process(state, "running")
    try:
        threading.Timer(3, lambda: deferred.STATUS.write_text("ok")).start()
        t0 = time.monotonic()
        assert deferred.wait("argocd") is None
        assert time.monotonic() - t0 >= 3
    finally:
        p.kill()


def test_what_is_not_deferred_is_not_waited_for_while_the_build_runs(state):
    deferred.NAMES.write_text("kwok")
    p = build_process(state, "running")
    try:
        t0 = time.monotonic()
        assert deferred.wait("argocd") is None
        assert time.monotonic() - t0 < 1
    finally:
        p.kill()


def test_a_failed_build_is_a_failure_with_the_end_of_its_log(state):
    deferred.STATUS.write_text("failed: building the node's binaries failed (see the lines above)")
    deferred.LOG.write_text("[e2e-build] building kwok v0.8.0\ngo: sigs.k8s.io/kwok@v0.8.0: connection refused\n")
    why = deferred.wait("kwok")
    assert why is not None
    assert "building the node's binaries failed" in why and "connection refused" in why


def test_a_build_that_died_without_a_word_is_not_waited_for_forever(state):
    p = build_process(state, "running")
    p.kill()
    p.wait()
    t0 = time.monotonic()
    why = deferred.wait("argocd")
    assert why is not None and "ended without saying how" in why
    assert time.monotonic() - t0 < 5


def test_a_build_past_its_time_is_a_failure_naming_the_time(state):
    p = build_process(state, "running")
    try:
        why = deferred.wait("argocd", timeout=2)
        assert why is not None and "still runs after 2s" in why
    finally:
        p.kill()


def test_a_process_that_took_the_builds_number_is_not_taken_for_it(state):
    other = subprocess.Popen(["sleep", "60"])
    try:
        deferred.PID.write_text(str(other.pid))
        deferred.STATUS.write_text("running")
        why = deferred.wait("argocd")
        assert why is not None and "ended without saying how" in why
        deferred.stop()  # not ours: left running
        assert other.poll() is None
    finally:
        other.kill()


def test_only_argocd_and_kwok_can_be_deferred(monkeypatch):
    monkeypatch.setenv("TF_CLUSTER_NODE_DEFER", "argocd kwok")
    assert deferred.components() == ("argocd", "kwok")
    monkeypatch.setenv("TF_CLUSTER_NODE_DEFER", "argocd cilium")
    with pytest.raises(NodeError, match=r"\['cilium'\].*only argocd kwok"):
        deferred.components()


@pytest.mark.parametrize(
    ("defer", "built"),
    [("", {"argocd", "kwok", "registry"}), ("argocd kwok", {"registry"}), ("kwok", {"argocd", "registry"})],
    ids=["none", "both", "kwok"],
)
def test_the_node_build_leaves_out_what_is_deferred(defer, built, tmp_path):
    """build.sh's default list less TF_CLUSTER_NODE_DEFER (its lines, run up to the list)."""
    script = (Path(deferred.HERE) / "build.sh").read_text()
    head = script[: script.index("log() {")]  # everything before the first build step
    r = subprocess.run(
        # $0 is build.sh's own path: its head sources files beside it
        ["bash", "-c", head + '\nprintf "%s\\n" "${want[@]}"', str(Path(deferred.HERE) / "build.sh")],
        capture_output=True,
        text=True,
        env={"TF_CLUSTER_NODE_DEFER": defer, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        | {"K8S_VERSION": "1.37.2", "TF_CLUSTER_E2E_BIN": str(tmp_path / "bin")},
        check=True,
    )
    names = set(r.stdout.split())
    assert built <= names
    assert not (set(defer.split()) & names)


def test_a_second_up_while_the_build_runs_starts_no_second_build(state, monkeypatch):
    monkeypatch.setenv("TF_CLUSTER_NODE_DEFER", "kwok")
    p = build_process(state, "running")
    started = []  # what start_later would run (not run here: it is the real build)
    monkeypatch.setattr(deferred.subprocess, "Popen", lambda argv, **_: started.append(argv) or p)
    try:
        deferred.start_later()
        assert started == [], "a second build was started beside the running one"
        assert deferred.PID.read_text() == str(p.pid) and deferred.NAMES.read_text() == "argocd kwok"
    finally:
        p.kill()
        p.wait()
    deferred.start_later()  # once it ended, the next `up` starts one
    assert len(started) == 1 and started[0][-1] == "deferred", started
