"""Golden renders: every example, every tests/golden/cases file and the defaults render to the
checked-in bytes under Helm 4 and Helm 3: a few cases as whole releases (tests/golden/renders),
the others as per-template snapshots (tests/golden/templates/<case>/<template>.yaml). A change to
the templates shows its effect as a diff of tests/golden (`make golden` re-renders them)."""

from __future__ import annotations

import difflib
import sys

import pytest

from tf_cluster import ROOT

sys.path.insert(0, str(ROOT / "tests" / "golden"))
from update import RENDERS, TEMPLATES, WHOLE, cases, goldens, on_disk, render  # noqa: E402

CASES = cases()
FIX = "run `make golden`, then review `git diff tests/golden`"


def test_every_case_has_its_golden_files_and_none_is_stale():
    assert set(WHOLE) <= set(CASES), f"WHOLE names a case that is gone: {set(WHOLE) - set(CASES)}"
    assert sorted(p.stem for p in RENDERS.glob("*.yaml")) == sorted(WHOLE), FIX
    snapshotted = sorted(p.name for p in TEMPLATES.iterdir() if p.is_dir()) if TEMPLATES.is_dir() else []
    assert snapshotted == sorted(set(CASES) - set(WHOLE)), FIX


@pytest.mark.parametrize("name", sorted(CASES))
def test_render_is_byte_identical_to_its_golden_files(name, helm_major):
    got, want = goldens(name, render(CASES[name], helm_major)), on_disk(name)
    if got == want:
        return
    lines = []
    for path in sorted(set(want) - set(got)):
        lines.append(f"{path.relative_to(ROOT)}: no longer rendered (stale)\n")
    for path in sorted(set(got) - set(want)):
        lines.append(f"{path.relative_to(ROOT)}: rendered, but has no golden file\n")
    for path in sorted(set(got) & set(want)):
        old = str(path.relative_to(ROOT))
        lines += difflib.unified_diff(want[path].splitlines(True), got[path].splitlines(True), old, f"helm{helm_major}")
    pytest.fail(f"render of {name} (helm{helm_major}) differs from its golden files ({FIX}):\n{''.join(lines[:80])}")
