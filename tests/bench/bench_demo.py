"""Print the wall time of `make demo`'s run (run-local of an example) with each task isolated as
its pod (the default) and as plain processes (--no-isolation), a few runs each, interleaved.

.venv/bin/python tests/bench/bench_demo.py [EXAMPLE] [RUNS]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

from tf_cluster import ROOT


def once(example: str, isolate: bool) -> float:
    with tempfile.TemporaryDirectory() as workdir:
        argv = [str(ROOT / ".venv" / "bin" / "tf-cluster"), "run-local", "-f", example, "--quiet", "--workdir", workdir]
        t0 = time.perf_counter()
        r = subprocess.run(argv + ([] if isolate else ["--no-isolation"]), capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"run failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return seconds


def main() -> None:
    example = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "values-examples" / "mwms-cpu.yaml")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    times: dict[str, list[float]] = {"isolated": [], "plain": []}
    for i in range(runs):
        for mode in times:
            times[mode].append(once(example, mode == "isolated"))
            print(f"run {i + 1}/{runs} {mode:>8}: {times[mode][-1]:.1f}s", flush=True)
    print(f"\n{example}: run-local wall time over {runs} run(s), seconds")
    print(f"{'mode':>8} {'median':>7} {'min':>6} {'max':>6}")
    for mode, ts in times.items():
        print(f"{mode:>8} {statistics.median(ts):7.1f} {min(ts):6.1f} {max(ts):6.1f}")
    ratio = statistics.median(times["isolated"]) / statistics.median(times["plain"])
    print(f"isolated / plain: {ratio:.2f}x")


if __name__ == "__main__":
    main()
