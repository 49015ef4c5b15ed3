"""tf-cluster: build, render, validate and run the tf-cluster Helm chart.

Where its files come from: an installed package (a wheel, `pipx install`, `uv tool install`)
carries the chart, the images' build files and example trainers, and the pinned requirements as
package data under `tf_cluster/_data/` (read through importlib.resources); a checkout (an
editable install, `make setup`) has no `_data/` and reads them from the repository itself. Nothing
here reads a file at import time.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _data() -> Path | None:
    """`tf_cluster/_data/` of an installed package, or None in a checkout (editable install)."""
    data = resources.files(__name__) / "_data"
    if isinstance(data, Path) and (data / "chart" / "Chart.yaml").is_file():
        return data
    return None  # a zipped install (not made by pip) falls back to a checkout too


DATA = _data()
#: The repository root when the tool runs from a checkout; only the verbs that need one
#: (package, release, publish, the tests) use it: `checkout()` says so to an installed tool.
ROOT = Path(__file__).resolve().parents[2]
IN_CHECKOUT = (ROOT / "charts" / "tf-cluster" / "Chart.yaml").is_file() and (ROOT / "tooling").is_dir()
#: The chart, the images' build context and the pinned requirements: package data first.
CHART = DATA / "chart" if DATA else ROOT / "charts" / "tf-cluster"
IMAGES = DATA / "images" if DATA else ROOT / "images"
REQUIREMENTS = DATA / "requirements.txt" if DATA else ROOT / "tooling" / "requirements.txt"
DOCS = DATA / "docs" if DATA else ROOT / "docs"  # the user guide (`tf-cluster docs`)
TOOLS_BIN = ROOT / ".tools" / "bin"  # a checkout's pinned tools (`make setup`); absent when installed


def work_dir(name: str) -> Path:
    """Where the tool writes its outputs (`runs`, `build`): the checkout's folder of that name, or the
    current directory's for an installed tool (never inside site-packages)."""
    return (ROOT if IN_CHECKOUT else Path.cwd()) / name


def checkout(verb: str) -> Path:
    """The repository root, for verbs that work on the repository itself (its git history, its
    releases record); an installed tool says where to run them instead."""
    if IN_CHECKOUT:
        return ROOT
    from .errors import UsageError

    raise UsageError(
        f"`tf-cluster {verb}` works on the chart's repository (its git history and charts/releases.yaml): "
        "run it from a clone of the repository (`make setup` there), not from an installed tf-cluster"
    )


def version() -> str:
    """The one version number: the chart's (Chart.yaml `version`), which the CLI is released with;
    the wheel's metadata reads the same line (pyproject.toml, [tool.hatch.version])."""
    for line in (CHART / "Chart.yaml").read_text().splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip().strip("\"'")
    raise RuntimeError(f"{CHART / 'Chart.yaml'} has no version line")
