"""Flakes found before they land (issue 41): the e2e suite N times on one cluster, each scenario's pass
rate and time spread. Writes docs/development/e2e-soak.md (the table, the commit, the command).

The cluster is brought up once by `make e2e-soak` and kept between runs (as `make e2e` would find it);
each run is the suite as `make e2e` runs it (tests/e2e/lanes.py, the marker CI uses), its results
read from each lane's JUnit XML. A run that fails goes on to the next: the table counts it.

    python tests/soak.py --runs 3 --kubeconfig KUBECONFIG [--mark "not extended"] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import lanes  # noqa: E402 - the one list of the modules that run LATER

PAGE = ROOT / "docs" / "development" / "e2e-soak.md"


def outcomes(junit: Path) -> dict[str, tuple[str, float, str]]:
    """scenario -> (passed/failed/error/skipped, seconds, first line of the failure) from a JUnit file."""
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        state, why = "passed", ""
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                state, why = kind if kind != "failure" else "failed", (el.get("message") or "").splitlines()[0:1]
                why = why[0][:120] if why else ""
                break
        out[name] = (state, float(case.get("time") or 0), why)
    return out


def table(runs: list[dict[str, tuple[str, float, str]]]) -> str:
    scenarios: dict[str, list[tuple[str, float, str]]] = defaultdict(list)
    for run in runs:
        for name, result in run.items():
            scenarios[name].append(result)
    rows = [
        "| scenario | passed | min s | median s | max s | what failed |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name in sorted(scenarios):
        results = scenarios[name]
        times = [t for _, t, _ in results]
        passed = sum(s == "passed" for s, _, _ in results)
        why = "; ".join(sorted({f"{s}: {w}" for s, _, w in results if s != "passed"}))
        rows.append(
            f"| `{name}` | {passed} of {len(runs)} | {min(times):.0f} | {statistics.median(times):.0f} "
            f"| {max(times):.0f} | {why} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--mark", default="not extended")
    ap.add_argument("--lanes", default="2", help="as make e2e's E2E_LANES")
    ap.add_argument("--out", type=Path, default=PAGE)
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k notebook)")
    args = ap.parse_args()
    work = ROOT / "build" / "soak"
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TF_CLUSTER_E2E_KUBECONFIG": args.kubeconfig}
    env.pop("TF_CLUSTER_TIMINGS", None)  # not make check's timing table
    runs, walls = [], []
    for i in range(1, args.runs + 1):
        junit = work / f"run-{i}"
        print(f"[soak] run {i} of {args.runs}: tests/e2e/lanes.py -m '{args.mark}' ...", flush=True)
        t0 = time.monotonic()
        argv = [sys.executable, "tests/e2e/lanes.py", "--lanes", args.lanes, "--junit-dir", str(junit)]
        rc = subprocess.run([*argv, "-m", args.mark, *args.pytest_args], cwd=ROOT, env=env).returncode
        walls.append(time.monotonic() - t0)
        results = sorted(junit.glob("*.xml"))
        if not results:
            print(f"[soak] run {i} wrote no results (exit {rc}): stopping", flush=True)
            return rc or 1
        runs.append({name: r for f in results for name, r in outcomes(f).items()})
        failed = [n for n, (s, _, _) in runs[-1].items() if s != "passed"]
        print(f"[soak] run {i}: {len(runs[-1]) - len(failed)} of {len(runs[-1])} passed in {walls[-1]:.0f}s"
              + (f"; not passed: {', '.join(failed)}" if failed else ""), flush=True)  # fmt: skip
    commit = subprocess.run(["git", "log", "-1", "--format=%h %cs"], cwd=ROOT, capture_output=True, text=True).stdout
    body = table(runs)
    times = "once" if args.runs == 1 else f"{args.runs} times"
    later = (
        f" With `{lanes.LATER_ENV}` set (as `make check` sets it), the lanes also ran "
        + ", ".join(f"`{m}`" for m in lanes.LATER)
        + " beside the scenarios that need the cluster alone: their rows are here too."
        if os.environ.get(lanes.LATER_ENV)
        else ""
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        "# The e2e suite, soaked\n\n"
        f"Written by `make e2e-soak N={args.runs}` (`tests/soak.py`) at {commit.strip()}: the suite of "
        f'`make e2e` (`-m "{args.mark}"`) run {times} on one cluster, brought up once and kept between runs. '
        f"Whole runs took {', '.join(f'{w / 60:.1f}' for w in walls)} min. A scenario that did not pass every "
        f"run is a flake to fix before it lands.{later}\n\n" + body + "\n"
    )
    print(body)
    print(f"[soak] written to {args.out}")
    flaky = [line for line in body.splitlines()[2:] if f"| {args.runs} of {args.runs} |" not in line]
    return 1 if flaky else 0


if __name__ == "__main__":
    sys.exit(main())
