"""What every benchmark shares: the timed program's marks, medians, tables, and the JSON each
benchmark leaves in build/bench/ for `report.py` to turn into docs/benchmarks.md."""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path

from tf_cluster import ROOT

OUT = ROOT / "build" / "bench"
PROGRAM = Path(__file__).with_name("programs") / "timed_train.py"


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def marks(text: str) -> dict[str, dict]:
    """The program's BENCH lines by mark (a restarted task: the last of each)."""
    found: dict[str, dict] = {}
    for line in text.splitlines():
        at = line.find("BENCH {")
        if at >= 0:
            try:
                data = json.loads(line[at + 6 :])
            except ValueError:
                continue
            found[data["mark"]] = data
    return found


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: list[str], rows: list[list]) -> str:
    """A plain-text table (printed) — report.py writes the same rows as Markdown."""
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def fmt(value) -> str:
    if isinstance(value, float):
        return "-" if value != value else f"{value:.2f}"
    return str(value)


def save(name: str, data: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    data = {"measured": time.strftime("%Y-%m-%d %H:%M"), **data}
    path.write_text(json.dumps(data, indent=1))
    say(f"wrote {path.relative_to(ROOT)}")
    return path


def chart_at(rev: str, into: Path) -> Path:
    """The chart as of git revision `rev`, written under into/chart-<rev>/ (a before/after comparison)."""
    out = into / f"chart-{rev}"
    out.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev, "charts/tf-cluster"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(out), "--strip-components=2"], input=archive.stdout, check=True)
    return out


def launcher_at(rev: str, into: Path) -> Path:
    """The chart's launcher as of git revision `rev` (launcher.py and, from chart 2.0.0, its package
    tf_cluster_launcher/ beside it), written under into/launcher-<rev>/; its launcher.py (a
    before/after comparison)."""
    out = into / f"launcher-{rev}"
    out.mkdir(parents=True, exist_ok=True)
    files = "charts/tf-cluster/files"
    archive = subprocess.run(["git", "archive", rev, files], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out), "--strip-components=3"], input=archive, check=True)
    return out / "launcher.py"
