"""The node's CPU in make check's timing table (hack/node/ledger.py): `down` records what each of
the harness's processes and each node's pods used while the node was up, which no step's own CPU
column counts (they are no step's children)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tooling"))
import timings  # noqa: E402
from node import ledger  # noqa: E402
from node.config import EXTRA_NODES, HOST_NODE  # noqa: E402

# a long-lived "component": burns ~0.8 s of CPU in a child it reaps, then itself, then sleeps
BUSY = (
    "import subprocess, sys, time\n"
    "subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
    "while time.process_time() - t < 0.5: pass'])\n"
    "t = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    "open(sys.argv[1], 'w').close()\ntime.sleep(60)\n"
)


def test_each_process_and_each_nodes_pods_get_a_line_under_one_phase(tmp_path, monkeypatch):
    pids, cgroups = tmp_path / "run", tmp_path / "cpuacct"
    pids.mkdir()
    (cgroups / "kubepods").mkdir(parents=True)
    (cgroups / "kubepods" / "cpuacct.usage").write_text("2500000000\n")  # the host's pods: 2.5 s
    extra = EXTRA_NODES[0]
    (cgroups / extra.netns / "kubepods").mkdir(parents=True)
    (cgroups / extra.netns / "kubepods" / "cpuacct.usage").write_text("1000000000\n")
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", BUSY, str(ready)])
    try:
        (pids / "python.pid").write_text(str(proc.pid))  # pid_of checks the name is in its cmdline
        (pids / "etcd.pid").write_text("999999999")  # gone: left out
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()
        record = tmp_path / "t.tsv"
        monkeypatch.setenv(timings.ENV, str(record))
        monkeypatch.setenv(timings.PARENT, "e2e/node-down")  # `make e2e` runs `down` as a step
        ledger.record(pid_dir=pids, cgroups=cgroups, nodes=[HOST_NODE, extra])
    finally:
        proc.kill()
        proc.wait()
    rows = {p.name: p for p in timings.read(record)}
    assert set(rows) == {
        ledger.PHASE,
        f"{ledger.PHASE}/python",
        f"{ledger.PHASE}/pods on {HOST_NODE.name}",
        f"{ledger.PHASE}/pods on {extra.name}",
    }
    assert 0.8 <= rows[f"{ledger.PHASE}/python"].cpu < 3  # its own CPU and its reaped child's
    assert rows[f"{ledger.PHASE}/pods on {HOST_NODE.name}"].cpu == 2.5
    assert rows[f"{ledger.PHASE}/pods on {extra.name}"].cpu == 1.0
    parts = sum(r.cpu for n, r in rows.items() if n != ledger.PHASE)
    assert abs(rows[ledger.PHASE].cpu - parts) < 0.2  # the phase is their sum (each line rounded to 0.1 s)
    assert 0 < rows[f"{ledger.PHASE}/python"].seconds < 60


def test_without_a_timing_record_nothing_is_read(tmp_path, monkeypatch):
    monkeypatch.delenv(timings.ENV, raising=False)
    monkeypatch.setattr(ledger, "lines", lambda **_: (_ for _ in ()).throw(AssertionError("read")))
    ledger.record(pid_dir=tmp_path)


def test_a_ledger_that_fails_says_so_and_down_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(timings.ENV, str(tmp_path / "t.tsv"))
    monkeypatch.setattr(ledger, "lines", lambda **_: (_ for _ in ()).throw(PermissionError("cpuacct")))
    ledger.record()
    assert "the node's CPU was not recorded: cpuacct" in capsys.readouterr().out
    assert not (tmp_path / "t.tsv").exists()


def test_a_pods_counter_left_by_an_earlier_run_is_not_counted_again(tmp_path):
    """A `kubepods` cgroup outlives `down`: the kubelet's first start after `up` notes its counter,
    a restart does not note it again, and the line is what came after the first note."""
    pids, cgroups = tmp_path / "run", tmp_path / "cpuacct"
    usage = cgroups / "kubepods" / "cpuacct.usage"
    usage.parent.mkdir(parents=True)
    usage.write_text("1250000000000\n")  # 1250 s from the run before
    ledger.mark_pods_start(HOST_NODE, cgroups, pids)
    usage.write_text("1300000000000\n")
    ledger.mark_pods_start(HOST_NODE, cgroups, pids)  # the kubelet restarted: the first note stays
    usage.write_text("1312500000000\n")
    assert ledger.pods_cpu(HOST_NODE, cgroups, pids) == 62.5
    (line,) = [x for x in ledger.lines(pids, cgroups, [HOST_NODE]) if x[0].startswith("pods on")]
    assert line[3] == 62.5
