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
