"""`tf-cluster chart`: the chart this command carries, for Helm and Argo CD users.

    tf-cluster chart path                     # where it is: helm install mnist "$(tf-cluster chart path)" -f v.yaml
    tf-cluster chart export ./charts          # a copy in ./charts/tf-cluster, to commit for Argo CD or `helm package`

An installed tf-cluster (pipx, uv tool, pip) carries the chart as package data; a checkout's is
charts/tf-cluster. Both print the same version (`tf-cluster --version`).
"""

from __future__ import annotations

import argparse
import fnmatch
import shutil
from pathlib import Path

from .. import CHART
from ..errors import UsageError
from . import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "chart",
        help="the bundled chart: its path, or a copy to install with helm or Argo CD",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="chart_verb", required=True, metavar="VERB")
    verbs.add_parser("path", help="print the bundled chart's directory")
    export = verbs.add_parser("export", help="copy the chart to DIR/tf-cluster (which must not exist, or be empty)")
    export.add_argument("dir", type=Path, metavar="DIR")
    p.set_defaults(func=run)


def ignored(chart: Path) -> list[str]:
    """The chart's .helmignore patterns (what `helm package` leaves out), without comments."""
    f = chart / ".helmignore"
    lines = f.read_text().splitlines() if f.is_file() else []
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def export(dest: Path) -> Path:
    """A copy of the chart in dest/tf-cluster, as `helm package` would take it (.helmignore applied)."""
    target = dest / "tf-cluster"
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} exists and is not an empty directory: export to another DIR (nothing was written)")
    patterns = ignored(CHART)

    def skip(directory: str, names: list[str]) -> set[str]:
        rel = Path(directory).relative_to(CHART)
        out = set()
        for name in names:
            path = (rel / name).as_posix()
            for pat in patterns:
                anchored = pat.startswith("/")  # `/tests/`: the chart's own tests/, not templates/tests/
                pat = pat.strip("/")
                if fnmatch.fnmatch(path, pat) if anchored else fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(path, pat):
                    out.add(name)
        return out

    shutil.copytree(CHART, target, ignore=skip, dirs_exist_ok=True)
    return target


def run(args: argparse.Namespace) -> int:
    if args.chart_verb == "path":
        print(CHART)
        return 0
    target = export(args.dir)
    print(f"exported the chart to {target}")
    print(f"  helm install RELEASE {target} -f values.yaml        (or: helm package {target})")
    return 0
