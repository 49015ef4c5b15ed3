"""make e2e's lanes (tests/e2e/lanes.py) run every e2e scenario exactly once: none lost when a
module is added or a scenario is named to run alone, none run twice."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import lanes  # noqa: E402


def collected(args: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "::" in line]


def test_the_lanes_run_every_e2e_scenario_exactly_once():
    everything = collected([str(lanes.SUITE)])
    by_lane = {name: collected(args) for name, args in lanes.lanes().items()}
    seen = Counter(t for tests in by_lane.values() for t in tests)
    assert len(everything) > 30
    assert sorted(seen) == sorted(everything), set(everything) ^ set(seen)
    assert max(seen.values()) == 1, [t for t, n in seen.items() if n > 1]
    # what ALONE names one by one is in the alone lane only
    singles = [n.split("::")[1] for n in lanes.ALONE if "::" in n]
    assert all(any(s in t for t in by_lane["alone"]) for s in singles)
    assert not any(s in t for s in singles for t in by_lane["single-node"])


def test_make_check_moves_later_modules_from_make_test_to_beside_the_alone_scenarios(monkeypatch):
    """The modules LATER names leave `make test` in `make check` and run in `make e2e` instead:
    both sides read the one list, so none is lost or run twice."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests/e2e/lanes.py"), "--later-ignores"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [f"--ignore={m}" for m in lanes.LATER]
    for m in lanes.LATER:  # modules of `make test` (tests/, not the cluster suite), each collected there
        assert (ROOT / m).is_file() and not m.startswith("tests/e2e/cluster/")
        assert collected([m]), m
    monkeypatch.delenv(lanes.LATER_ENV, raising=False)
    assert lanes.later() == []  # `make e2e` alone: they stay in `make test`
    monkeypatch.setenv(lanes.LATER_ENV, "1")
    assert lanes.later() == [str(ROOT / m) for m in lanes.LATER]
    check = (ROOT / "tooling" / "check.sh").read_text()
    assert "lanes.py --later-ignores" in check and f"{lanes.LATER_ENV}=1" in check
