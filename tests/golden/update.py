"""Re-render the golden files: `make golden`, then review `git diff tests/golden/renders`.

Each case is a values example, a file of tests/golden/cases, or the chart's defaults,
rendered by Helm 4 as release `tf` in namespace `default`. tests/unit/test_golden.py
checks that Helm 4 and Helm 3 both still render exactly these bytes, so a refactor
shows its effect here and a change to what is rendered is reviewed as a diff.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tf_cluster import ROOT, helm

GOLDEN = ROOT / "tests" / "golden"
RENDERS = GOLDEN / "renders"


def cases() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {"defaults": []}
    for p in sorted((ROOT / "values-examples").glob("*.yaml")) + sorted((GOLDEN / "cases").glob("*.yaml")):
        out[p.stem] = [p]
    return out


def render(files: list[Path], major: str = "4") -> str:
    """The render with each document's trailing blank lines dropped: Helm 4.3's splitter keeps
    a document's last newline before an in-file `---` (so `helm template` prints a blank line
    there), Helm 3 trims it. That is the only difference between the two; everything else
    must match byte for byte."""
    text = helm.Helm(major).template("tf", helm.Values.of(files))
    return re.sub(r"\n\s*\n---\n", "\n---\n", text).rstrip() + "\n"


def main() -> int:
    RENDERS.mkdir(parents=True, exist_ok=True)
    known = cases()
    for stale in set(p.stem for p in RENDERS.glob("*.yaml")) - set(known):
        (RENDERS / f"{stale}.yaml").unlink()
        print(f"removed {stale}.yaml")
    for name, files in known.items():
        target = RENDERS / f"{name}.yaml"
        text = render(files)
        changed = not target.exists() or target.read_text() != text
        target.write_text(text)
        print(f"{'updated' if changed else 'same   '} {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
