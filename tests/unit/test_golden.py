"""Golden renders: every example, every tests/golden/cases file and the defaults render to the
checked-in bytes under Helm 4 and Helm 3. A change to the templates shows its effect as a diff
of tests/golden/renders (`make golden` re-renders them)."""

from __future__ import annotations

import difflib
import sys

import pytest

from tf_cluster import ROOT

sys.path.insert(0, str(ROOT / "tests" / "golden"))
from update import RENDERS, cases, render  # noqa: E402

CASES = cases()


def test_every_case_has_a_golden_file_and_no_golden_file_is_stale():
    assert sorted(p.stem for p in RENDERS.glob("*.yaml")) == sorted(CASES), "run `make golden`"


@pytest.mark.parametrize("name", sorted(CASES))
def test_render_is_byte_identical_to_its_golden_file(name, helm_major):
    want = (RENDERS / f"{name}.yaml").read_text()
    got = render(CASES[name], helm_major)
    if got != want:
        diff = "".join(
            list(
                difflib.unified_diff(
                    want.splitlines(True), got.splitlines(True), f"golden/{name}.yaml", f"helm{helm_major}"
                )
            )[:80]
        )
        pytest.fail(f"render of {name} differs from its golden file (`make golden`, then review):\n{diff}")
