"""CI's timing table (tooling/timings.py): phases recorded by nested steps, shown as a tree."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tf_cluster import ROOT

sys.path.insert(0, str(ROOT / "tooling"))
import timings  # noqa: E402


def phase(name: str, seconds: float, start: float, rc: int = 0) -> timings.Phase:
    return timings.Phase(name, seconds, start, rc)


def test_children_sit_under_their_parent_even_when_a_sibling_started_in_between():
    phases = [
        phase("node components", 1500, 0),
        phase("setup", 580, 1),
        phase("node components/kubernetes", 660, 0),
        phase("test", 510, 584),
        phase("node components/cilium", 240, 1300),
        phase("test/pytest", 430, 669),
        phase("test/pytest/test_tune.py", 85, 885),
    ]
    rows = [(depth, label) for depth, label, _ in timings.tree(phases)]
    assert rows == [
        (0, "node components"),
        (1, "kubernetes"),
        (1, "cilium"),
        (0, "setup"),
        (0, "test"),
        (1, "pytest"),
        (2, "test_tune.py"),
    ]


def test_a_phase_whose_parent_was_not_recorded_hangs_under_the_nearest_ancestor():
    rows = [(d, label) for d, label, _ in timings.tree([phase("e2e", 10, 0), phase("e2e/a/b", 2, 1)])]
    assert rows == [(0, "e2e"), (1, "a/b")]


def test_the_table_counts_quick_phases_marks_failures_and_gives_the_wall_time():
    text = timings.report([phase("test", 100, 0, rc=1), phase("test/setup", 0.2, 0), phase("e2e", 50, 200)])
    assert "test  FAILED" in text
    assert "(1 phases under 1 s not listed" in text
    assert "250.0  (4 min 10 s)" in text  # first start to last end, not the sum


@pytest.mark.parametrize("rc", [0, 3])
def test_run_records_the_phase_under_its_parent_and_passes_the_exit_code_on(tmp_path, rc):
    record = tmp_path / "t.tsv"
    env = {"PATH": "/usr/bin:/bin", "TF_CLUSTER_TIMINGS": str(record), "TF_CLUSTER_TIMING_PHASE": "check"}
    script = ROOT / "tooling" / "timings.py"
    r = subprocess.run([sys.executable, script, "run", "step", "--", sys.executable, "-c", f"exit({rc})"], env=env)
    assert r.returncode == rc
    (row,) = timings.read(record)
    assert (row.name, row.rc) == ("check/step", rc)


def test_a_failed_test_is_named_in_the_table_under_its_module(tmp_path):
    """CI's log shows its last lines: the table at the end must name what failed."""
    (tmp_path / "test_mod.py").write_text("def test_fine():\n    pass\n\n\ndef test_broken():\n    assert 1 == 2\n")
    record = tmp_path / "t.tsv"
    env = {
        **{k: v for k, v in os.environ.items() if k != timings.PARENT},  # `make check` sets it: no nesting here
        "TF_CLUSTER_TIMINGS": str(record),
        "PYTHONPATH": str(ROOT / "tests"),  # tests/conftest.py, loaded as a plugin by its module name
    }
    args = ["-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", str(tmp_path / "test_mod.py")]
    r = subprocess.run([sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {p.name: p.rc for p in timings.read(record)}
    assert rows == {"test_mod.py": 1, "test_mod.py/test_broken": 1}
    assert "test_broken  FAILED" in timings.report(timings.read(record))


# ------------------------------------------------------------ CPU seconds per phase
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_a_phase_line_carries_its_cpu_seconds_and_a_line_without_them_still_reads(tmp_path, monkeypatch):
    record = tmp_path / "t.tsv"
    monkeypatch.setenv(timings.ENV, str(record))
    monkeypatch.delenv(timings.PARENT, raising=False)
    timings.record("build", 20.0, 100.0, 0, 31.25)
    with record.open("a") as f:
        f.write("test\t5.0\t120.0\t0\n")  # a recorder that does not measure CPU (bootstrap.py's steps)
    rows = {p.name: p for p in timings.read(record)}
    assert rows["build"].cpu == pytest.approx(31.2, abs=0.051) and rows["test"].cpu is None
    table = timings.report(list(rows.values()))
    (build_row,) = [line for line in table.splitlines() if line.strip().startswith("build")]
    assert build_row.split()[1:3] == ["20.0", "31.2"], build_row
    (test_row,) = [line for line in table.splitlines() if line.strip().startswith("test")]
    assert test_row.split()[1:3] == ["5.0", "20s"], test_row  # no CPU column: seconds, then from start


def test_run_records_the_cpu_its_command_and_the_children_it_waited_for_used(tmp_path):
    record = tmp_path / "t.tsv"
    env = {"PATH": "/usr/bin:/bin", "TF_CLUSTER_TIMINGS": str(record)}
    child = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN.format(s=0.6)!r}])"
    timings_py = ROOT / "tooling" / "timings.py"
    r = subprocess.run([sys.executable, timings_py, "run", "step", "--", sys.executable, "-c", child], env=env)
    assert r.returncode == 0
    (row,) = timings.read(record)
    assert 0.6 <= row.cpu < 10, row


def test_the_node_builds_line_has_the_cpu_of_what_ran_between_stamp_and_timing(tmp_path):
    """hack/node/build.sh's recorder (hack/node/timing.sh): the CPU of the component's build, not of
    the wall clock it took (a sleep uses none)."""
    record = tmp_path / "t.tsv"
    script = (
        f". {ROOT / 'hack' / 'node' / 'timing.sh'}\n"
        f"t0=$(stamp)\n{sys.executable} -c '{BURN.format(s=0.6)}'\nsleep 1\n"
        'timing "coredns" "$t0"\n'
    )
    env = {"PATH": "/usr/bin:/bin", "TF_CLUSTER_TIMINGS": str(record), "TF_CLUSTER_TIMING_PHASE": "node"}
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, check=True)
    (row,) = timings.read(record)
    assert row.name == "node/coredns" and row.rc == 0
    assert row.seconds >= 1.5 and 0.6 <= row.cpu < 1.5, row


def test_each_test_modules_cpu_is_recorded_with_what_its_tests_and_their_children_used(tmp_path):
    (tmp_path / "test_busy.py").write_text(
        "import subprocess, sys\n\n\n"
        f"def test_child():\n    subprocess.run([sys.executable, '-c', {BURN.format(s=0.6)!r}], check=True)\n\n\n"
        f"def test_here():\n    exec({BURN.format(s=0.4)!r})\n"
    )
    (tmp_path / "test_idle.py").write_text("import time\n\n\ndef test_sleeps():\n    time.sleep(0.5)\n")
    record = tmp_path / "t.tsv"
    env = {
        **{k: v for k, v in os.environ.items() if k != timings.PARENT},
        "TF_CLUSTER_TIMINGS": str(record),
        "PYTHONPATH": str(ROOT / "tests"),
    }
    args = ["-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "-p", "no:xdist"]
    for module in ("test_busy.py", "test_idle.py"):
        r = subprocess.run([sys.executable, *args, module], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    busy, idle = timings.read(record)  # each run sums its one module (under 15 s) into one line
    assert busy.name == idle.name == "1 modules under 15 s each"
    assert 1.0 <= busy.cpu < 5, busy
    assert idle.cpu < 0.3 and idle.seconds >= 0.5, idle
