"""The simulated-cluster benchmark (bench_sim.py) in parts, so that its ~7 hours on 2 cores can be
measured over several sittings without mixing figures of different code.

Each floor, start and launchers' run is one *part*, saved on its own as soon as it ends, under
tests/bench/measured/sim/ (committed: the figures outlive the machine that measured them), with a
*fingerprint*: a hash of everything the part's figures depend on (the chart's templates, launcher and
values, the two values examples the releases use, the simulated cluster, the benchmark's own code) and
of its setup (nodes, windows, the revisions compared with). A run measures the parts that are missing
or whose fingerprint is not today's, as many as fit the minutes it is given; build/bench/sim.json,
which report.py reads, is assembled from today's parts alone and names those still missing (the report
publishes no table while any is)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tf_cluster import ROOT

MEASURED = Path(__file__).with_name("measured") / "sim"

# what a part's figures depend on (files or folders, from the repository's root)
FINGERPRINTED = (
    "charts/tf-cluster/templates",
    "charts/tf-cluster/files",
    "charts/tf-cluster/values.yaml",
    "values-examples/mwms-cpu.yaml",
    "values-examples/parameter-server.yaml",
    "hack/node/sim.py",
    "hack/node/k8s-version",
    "tests/bench/bench_sim.py",
    "tests/bench/sim_audit.py",
    "tests/bench/sim_parts.py",
)

# the releases each size measures, in order: (shape, gang)
KINDS = (("mwms", False), ("mwms", True), ("ps", False), ("ps", True))

CLUSTER_MINUTES = 3.0  # a new simulated cluster of 256 nodes up and down again, with room
CREATE_QPS = 20  # kube-controller-manager's client rate: a start or a floor creates its pods at it


def fingerprint(setup: dict, root: Path = ROOT) -> str:
    """A hash of the FINGERPRINTED files' paths and bytes (as they are in the working tree) and of the setup."""
    h = hashlib.sha256(json.dumps(setup, sort_keys=True).encode())
    for name in FINGERPRINTED:
        path = root / name
        files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for f in files if path.is_dir() else [path]:
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def commit(root: Path = ROOT) -> str:
    """The commit measured: HEAD, with "+changes" when a fingerprinted file differs from it."""
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", *FINGERPRINTED], cwd=root, capture_output=True, text=True
    ).stdout
    return rev.strip() + ("+changes" if dirty.strip() else "")


@dataclass(frozen=True)
class Part:
    """One measurement: a floor (bare pods), a start (a release until all its pods run), or one
    launcher's four windows in a cluster of its own, its release started there first."""

    kind: str  # floor | start | launchers
    shape: str  # mwms | ps
    tasks: int
    gang: bool = False
    chart: str = "this"  # a start: this checkout's chart, or an earlier one's revision
    launcher: str = ""  # launchers: before | after

    @property
    def beside(self) -> bool:
        """Measured beside others (a launchers' part: its windows count requests, not seconds), after
        the sitting's floors and starts, which run alone, each group's all or none."""
        return self.kind == "launchers"

    @property
    def slots(self) -> int:
        """How many of a sitting's --beside slots it holds while measured: two past 1024 tasks (the
        API server of a 4096-task release holds GBs; four such clusters, --beside 8, ran at once on
        this machine's 24 GiB for the launchers' 4096-task parts, 13.1 GB used)."""
        return 2 if self.tasks > 1024 else 1

    @property
    def name(self) -> str:
        gang = "gang" if self.gang else "nogang"
        if self.beside:
            return f"launchers-{self.shape}-{self.tasks}-{self.launcher}"
        chart = "" if self.chart == "this" else f"-chart-{self.chart}"
        return f"{self.kind}-{self.shape}-{self.tasks}-{gang}{chart}"

    def minutes(self, windows: dict) -> float:
        """At most how long it takes (to plan a sitting): the pods' creation at the controller's rate,
        a gang's binding after it (as long again), the launchers' windows at their limits after their
        release's start."""
        create = self.tasks / CREATE_QPS * (2.0 if self.gang else 1.2)
        if self.beside:
            started, listed = 120.0, windows["list_limit_s"] if self.tasks > 1024 else 60.0
            windows_s = started + listed + windows["steady_s"] + windows["fault_s"] + 180.0
            return CLUSTER_MINUTES + (create + windows_s) / 60
        return CLUSTER_MINUTES + create / 60


def plan(sizes: list[int], kinds: set[str], launchers: list[str], chart_before: str, before_sizes: list[int]):
    """The benchmark's parts in groups, one a release: its floor (bare pods, a cluster of its own), its
    start with the earlier chart where asked, its start with this chart, each measured alone and all in
    one sitting (a start is compared with its floor, so the two are never measured on different machines
    or days); and (gang off) its launchers' parts, each in a cluster of its own, in any sitting.
    `kinds`: "mwms", "mwms-gang", "ps", "ps-gang"."""
    groups: list[list[Part]] = []
    for n in sizes:
        for shape, gang in ((s, g) for s, g in KINDS if f"{s}{'-gang' if g else ''}" in kinds):
            group = [Part("floor", shape, n, gang)]
            if n in before_sizes:
                group.append(Part("start", shape, n, gang, chart=chart_before))
            group.append(Part("start", shape, n, gang))
            group += [] if gang else [Part("launchers", shape, n, launcher=who) for who in launchers]
            groups.append(group)
    return groups


def schedule(parts: list[Part], estimate: Callable[[Part], float], slots: int) -> list[tuple[Part, float, float]]:
    """When each part would begin and end (minutes from the first), measured beside others on `slots`
    slots in the order given: each begins as soon as it has its Part.slots free."""
    free_at = [0.0] * slots  # when each slot is next free
    out = []
    for part in parts:
        need = min(part.slots, slots)
        free_at.sort()
        begin = free_at[need - 1]
        end = begin + estimate(part)
        free_at[:need] = [end] * need
        out.append((part, begin, end))
    return out


def fitting(
    groups: list[list[Part]], estimate: Callable[[Part], float], minutes: float, slots: int = 1
) -> tuple[list[list[Part]], list[Part]]:
    """What of a sitting's parts fits in `minutes` (each part's `estimate`): first the floors and starts,
    one after the other, each group's all or none, in order; then, in what is left, as many launchers'
    parts (in order) as `schedule` ends in time with `slots` of them at once."""
    heads: list[list[Part]] = []
    for group in groups:
        head = [p for p in group if not p.beside]
        cost = sum(estimate(p) for p in head)
        if head and cost <= minutes:
            heads.append(head)
            minutes -= cost
    runs: list[Part] = []
    for part in (p for g in groups for p in g if p.beside):
        if max(end for _, _, end in schedule([*runs, part], estimate, slots)) <= minutes:
            runs.append(part)
    return heads, runs


class Store:
    """The saved parts of one setup: each a JSON file of its own in `folder`."""

    def __init__(self, folder: Path, setup: dict, root: Path = ROOT):
        self.folder, self.setup, self.root = folder, setup, root
        self.print = fingerprint(setup, root)

    def path(self, part: Part) -> Path:
        return self.folder / f"{part.name}.json"

    def load(self, part: Part) -> dict | None:
        """The part as saved, if it was measured with today's fingerprint."""
        path = self.path(part)
        if not path.is_file():
            return None
        saved = json.loads(path.read_text())
        return saved if saved.get("fingerprint") == self.print else None

    def stale(self, part: Part) -> bool:
        """Saved, but measured with other code or another setup."""
        return self.path(part).is_file() and self.load(part) is None

    def save(self, part: Part, figures: dict, seconds: float) -> Path:
        """`seconds`: how long the part took to measure, which later sittings plan with (`estimate`)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        saved = {
            "part": part.name,
            "fingerprint": self.print,
            "commit": commit(self.root),
            "measured": time.strftime("%Y-%m-%d %H:%M"),
            "seconds": round(seconds),
            "figures": figures,
        }
        path = self.path(part)
        path.write_text(json.dumps(saved, indent=1) + "\n")
        return path

    def estimate(self, part: Part, windows: dict) -> float:
        """Minutes a part will take: what it took when last measured, with any code, and a quarter more,
        plus what its steady window has grown by since; its limits (Part.minutes) when it never was."""
        path = self.path(part)
        saved = json.loads(path.read_text()) if path.is_file() else {}
        took = saved.get("seconds")
        if took is None:
            return part.minutes(windows)
        was = (saved.get("figures") or {}).get("steady", {}).get("seconds", windows["steady_s"])
        return (1.25 * took + max(0.0, windows["steady_s"] - was)) / 60

    def to_measure(self, group: list[Part], again: bool = False) -> list[Part]:
        """What of a group must be measured: its floor and starts, all of them, if any is not saved with
        today's fingerprint (a start is compared with its floor); its launchers' parts not saved (each
        has a cluster of its own). Everything with `again`."""
        missing = [p for p in group if again or self.load(p) is None]
        head = [p for p in group if not p.beside]
        return (head if any(p in missing for p in head) else []) + [p for p in missing if p.beside]

    def assembled(self, groups: list[list[Part]]) -> dict:
        """What report.py reads (bench_sim.py's figures): today's parts, and the names of those missing."""
        out: dict = {**self.setup, "starts": [], "floors": [], "launchers": [], "missing": []}
        measured, commits = [], set()
        for part in (p for g in groups for p in g):
            saved = self.load(part)
            if saved is None:
                out["missing"].append(part.name)
                continue
            measured.append(saved["measured"])
            commits.add(saved["commit"])
            out[{"floor": "floors", "start": "starts", "launchers": "launchers"}[part.kind]].append(saved["figures"])
        if measured:
            span = min(measured) if min(measured) == max(measured) else f"{min(measured)} to {max(measured)}"
            out["measured"] = f"{span}, at {', '.join(sorted(commits))}"
        return out
