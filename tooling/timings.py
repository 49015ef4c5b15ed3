#!/usr/bin/env python3
"""Where the minutes of `make check` go: phases recorded as they end, one report at the end.

Stdlib only (it runs before the virtualenv exists). Every recorder appends one line to the file
named by ``$TF_CLUSTER_TIMINGS`` (nothing is recorded when it is unset):

    <phase>\t<seconds>\t<start, epoch seconds>\t<exit code>[\t<CPU seconds>]

The CPU seconds (user + system) are those of the phase's own processes and of every process they
started and waited for: on CI's two CPU-bound cores a cold run is its CPU work, so the table says
which steps that work is, not only how long they took beside each other. A recorder that cannot
tell its phase's CPU apart (bootstrap.py's steps run beside each other in threads) leaves it out.

A phase name is a path: ``e2e/build/cilium`` is part of ``e2e/build``, which is part of ``e2e``.
Recorders: ``timings.py run PHASE -- ARGV...`` (the Makefile's steps), :func:`record` and
:func:`phase` (bootstrap.py), the ``timing`` function of ``hack/node/build.sh`` and the
pytest plugin in ``tests/conftest.py`` (one line per test module).

    tooling/timings.py start                      # a new, empty record (make check does this)
    tooling/timings.py run PHASE -- ARGV...       # run ARGV, record PHASE, exit with its code
    tooling/timings.py report [--file F]          # the table: phase -> seconds, nested, in start order
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENV = "TF_CLUSTER_TIMINGS"
PARENT = "TF_CLUSTER_TIMING_PHASE"  # set by `run` for its child: what the child records nests under it
QUICK = 1.0  # phases shorter than this (cached builds, no-op installs) are counted, not listed


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    start: float
    rc: int
    cpu: float | None = None  # user + system seconds of its processes; None: not measured


def cpu_seconds() -> float:
    """User + system seconds of this process and of the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def record(name: str, seconds: float, start: float, rc: int = 0, cpu: float | None = None) -> None:
    """Append one finished phase to $TF_CLUSTER_TIMINGS (no-op when unset)."""
    path = os.environ.get(ENV)
    if not path:
        return
    parent = os.environ.get(PARENT)
    clean = (f"{parent}/{name}" if parent else name).replace("\t", " ").replace("\n", " ")
    with open(path, "a", encoding="utf-8") as f:  # one short write: lines from parallel recorders stay whole
        f.write(f"{clean}\t{seconds:.1f}\t{start:.1f}\t{rc}" + ("" if cpu is None else f"\t{cpu:.1f}") + "\n")


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Record the enclosed block as `name` (its exit code 1 when it raised)."""
    start, t0, rc = time.time(), time.monotonic(), 1
    try:
        yield
        rc = 0
    finally:
        record(name, time.monotonic() - t0, start, rc)


def read(path: Path) -> list[Phase]:
    phases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) not in (4, 5):
            continue  # a line cut by a crash: the rest of the report still stands
        try:
            cpu = float(parts[4]) if len(parts) == 5 else None
            phases.append(Phase(parts[0], float(parts[1]), float(parts[2]), int(parts[3]), cpu))
        except ValueError:
            continue
    return sorted(phases, key=lambda p: p.start)


def fmt(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m:d} min {s:02d} s" if m else f"{s:d} s"


def tree(phases: list[Phase]) -> list[tuple[int, str, Phase]]:
    """(depth, label, phase) in tree order: each phase under its nearest recorded ancestor (by
    name: `a/b/c` under `a/b`, else `a`), siblings in the order they started. Overlapping
    siblings (builds beside tests) stay apart under their own parents."""
    by_name = {p.name: p for p in phases}
    children: dict[str, list[Phase]] = {}
    for p in phases:
        parts = p.name.split("/")
        parent = next(("/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1) if "/".join(parts[:i]) in by_name), "")
        children.setdefault(parent, []).append(p)
    out: list[tuple[int, str, Phase]] = []

    def walk(parent: str, depth: int) -> None:
        for p in sorted(children.get(parent, []), key=lambda p: p.start):
            out.append((depth, p.name[len(parent) + 1 :] if parent else p.name, p))
            walk(p.name, depth + 1)

    walk("", 0)
    return out


def report(phases: list[Phase], width: int = 64) -> str:
    """The table CI prints: each phase with its seconds and, where measured, its CPU seconds,
    children indented under their parent (siblings in the order they started), quick ones
    counted; the wall time from the first start to the last end."""
    if not phases:
        return "[timing] nothing recorded"
    first = min(p.start for p in phases)
    last = max(p.start + p.seconds for p in phases)
    lines = [
        f"[timing] where the time went ({ENV}); top-level phases may run side by side; CPU s: user + system"
        " seconds of the step's processes and of those they waited for (not the node's daemons)"
    ]
    lines.append(f"  {'phase':<{width}} {'seconds':>8} {'CPU s':>8}  {'from start':>10}")
    quick = 0
    for depth, label, p in tree(phases):
        if p.seconds < QUICK and depth > 0 and not p.rc:
            quick += 1
            continue
        text = "  " * depth + label + ("  FAILED" if p.rc else "")
        cpu = "" if p.cpu is None else f"{p.cpu:.1f}"
        lines.append(f"  {text:<{width}} {p.seconds:>8.1f} {cpu:>8}  {p.start - first:>9.0f}s")
    if quick:
        lines.append(f"  ({quick} phases under {QUICK:.0f} s not listed: cached or nothing to do)")
    lines.append(f"  {'wall, first start to last end':<{width}} {last - first:>8.1f}  ({fmt(last - first)})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="timings.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    sub.add_parser("start", help="begin a new, empty record")
    r = sub.add_parser("run", help="run a command and record its phase")
    r.add_argument("phase")
    r.add_argument("argv", nargs=argparse.REMAINDER)
    rep = sub.add_parser("report", help="print the table")
    rep.add_argument("--file", default=os.environ.get(ENV, ""))
    args = ap.parse_args(argv)
    if args.verb == "start":
        path = os.environ.get(ENV)
        if not path:
            print(f"timings.py start: set {ENV} to the record's path", file=sys.stderr)
            return 2
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("", encoding="utf-8")
        return 0
    if args.verb == "run":
        cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not cmd:
            print("timings.py run PHASE -- ARGV...", file=sys.stderr)
            return 2
        start, t0, cpu0 = time.time(), time.monotonic(), cpu_seconds()
        parent = os.environ.get(PARENT)
        env = dict(os.environ, **{PARENT: f"{parent}/{args.phase}" if parent else args.phase})
        rc = subprocess.call(cmd, env=env)
        record(args.phase, time.monotonic() - t0, start, rc, cpu_seconds() - cpu0)
        return rc
    if not args.file or not Path(args.file).exists():
        print(f"[timing] no record (set {ENV}, or --file)")
        return 0
    print(report(read(Path(args.file))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
