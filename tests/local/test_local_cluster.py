"""LocalCluster carries out the Job rules' decisions (localrun/jobs.py) with real processes: the
chart's launcher around stand-in commands (sleeps), no TensorFlow, a few seconds each."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from rendering import deep_merge, render
from tf_cluster import ROOT, manifests
from tf_cluster.localrun.local_runner import LocalRunner
from tf_cluster.localrun.processes import sandbox_problem

EX = ROOT / "values-examples"
# The chief trains for 3 s; every other task would serve for 10 minutes.
SLEEP = "import os, time; time.sleep(3 if os.environ['TF_CLUSTER_ROLE'] == 'chief' else 600)"


def runner(tmp_path: Path, example: str, extra: dict, isolate: bool = False) -> LocalRunner:
    values = deep_merge(yaml.safe_load((EX / example).read_text()), extra)
    docs = render(values)
    pods = manifests.pods(docs, node_cpus=os.cpu_count() or 1)
    return LocalRunner(docs, pods, tmp_path / "run", poll_seconds=0.3, restart_delay=0.5, isolate=isolate)


@pytest.mark.parametrize(
    "isolate",
    [False, pytest.param(True, marks=pytest.mark.skipif(bool(sandbox_problem()), reason="no namespaces here"))],
    ids=["plain", "isolated"],
)
def test_a_killed_server_is_replaced_and_the_servers_stop_when_the_chief_completes(tmp_path, isolate):
    command = ["python3", "-c", SLEEP]
    r = runner(
        tmp_path, "parameter-server.yaml", {"command": command, "roles": {"chief": {"command": command}}}, isolate
    )
    try:
        r.start()
        time.sleep(1)
        r.kill("worker", 1, signal.SIGKILL)
        report = r.watch(60, on_update=lambda _text: None)
    finally:
        r.stop()
    assert report.ok, report.table()
    codes = {t.name: t.exit_codes for t in report.tasks}
    assert codes == {"chief-0": [0], "worker-0": [0], "worker-1": [137, 0], "ps-0": [0]}, report.table()
    assert [t.restarts for t in report.tasks if t.name == "worker-1"] == [1]
    assert (tmp_path / "run" / "api" / "leader-status").read_text() == "Complete"


def test_the_timeout_deletes_every_pod_and_fails_every_job(tmp_path):
    r = runner(tmp_path, "mwms-cpu.yaml", {"command": ["python3", "-c", "import time; time.sleep(600)"]})
    t0 = time.monotonic()
    report = r.run(2, on_update=lambda _text: None)
    assert time.monotonic() - t0 < 30  # SIGTERM: the launcher stops its child and exits
    assert [j.condition for j in report.jobs] == ["Failed"]
    assert report.jobs[0].reason == "Stopped: run-local --timeout 2s reached"
    assert all(t.exit_codes == [143] and t.state == "failed" for t in report.tasks), report.table()
