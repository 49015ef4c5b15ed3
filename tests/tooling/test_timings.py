"""CI's timing table (tooling/timings.py): phases recorded by nested steps, shown as a tree."""

from __future__ import annotations

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
