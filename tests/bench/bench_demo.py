"""run-local's overhead: the wall time of `make demo` (run-local of the default example, each task
isolated as its pod), of the same with --no-isolation, and of the same processes started by hand
with the same TF_CONFIG and env (no launcher, no run-local); then the time from the command to each
task's first training step, run-local vs by hand (the benchmarks' timed program, same shape).

.venv/bin/python tests/bench/bench_demo.py [--example FILE] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import PROGRAM, marks, median, save, say, table

from tf_cluster import ROOT, helm, manifests
from tf_cluster.localrun.local_cluster import LocalCluster
from tf_cluster.values import script_values

TF_CLUSTER = str(ROOT / ".venv" / "bin" / "tf-cluster")
MODES = ("run-local (isolated, the demo)", "run-local --no-isolation", "by hand (same processes)")


def run_local(example: Path, workdir: str, isolate: bool, script: bool) -> float:
    argv = [TF_CLUSTER, "run-local", "-f", str(example), "--quiet", "--workdir", workdir]
    argv += ([] if isolate else ["--no-isolation"]) + (["--script", str(PROGRAM)] if script else [])
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"run-local failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return t0


def by_hand(example: Path, workdir: str, script: bool) -> float:
    """The example's processes as a user would start them by hand: each task's own command (the
    launcher's `--` stripped) with the env and TF_CONFIG run-local would give it (and the inter-op
    thread count the launcher would set), all at once."""
    values = helm.Values.of([example]).plus(script_values(PROGRAM, []) if script else helm.Values())
    docs = helm.parse(helm.Helm("4").template("tf", values))
    pods = manifests.pods(docs, node_cpus=os.cpu_count() or 1)
    cluster = LocalCluster(docs, pods, Path(workdir), isolate=False)
    cluster.write_configmaps(docs)
    t0 = time.time()
    procs = []
    for task in cluster.tasks():
        argv = task.argv[task.argv.index("--") + 1 :] if "--" in task.argv else task.argv
        argv = [sys.executable if a in ("python3", "python") else a for a in argv]
        env = dict(task.env)
        intra = env.get("TF_NUM_INTRAOP_THREADS", "")
        if intra.isdigit() and "TF_NUM_INTEROP_THREADS" not in env:  # as the launcher does: max(2, intra)
            env["TF_NUM_INTEROP_THREADS"] = str(max(2, int(intra)))
        task.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(task.log_path, "w")  # noqa: SIM115 - closed below
        procs.append((task.name, subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    for name, proc, log in procs:
        if proc.wait(timeout=900) != 0:
            sys.exit(f"by hand: {name} exited {proc.returncode}; see {log.name}")
        log.close()
    return t0


def once(example: Path, mode: str, script: bool) -> tuple[float, dict[str, float]]:
    """Wall seconds, and with the timed program each task's seconds to its first step."""
    with tempfile.TemporaryDirectory() as workdir:
        if mode == MODES[2]:
            t0 = by_hand(example, workdir, script)
        else:
            t0 = run_local(example, workdir, mode == MODES[0], script)
        wall = time.time() - t0
        first = {}
        if script:
            for log in sorted((Path(workdir) / "logs").glob("*.log")):
                found = marks(log.read_text())
                first[log.stem] = found["first_step"]["t"] - t0
    return wall, first


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--example", type=Path, default=ROOT / "values-examples" / "mwms-cpu.yaml")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    firsts: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    for i in range(args.runs):  # interleaved: a busy moment hits every mode alike
        for mode in MODES:
            walls[mode].append(once(args.example, mode, script=False)[0])
            say(f"run {i + 1}/{args.runs} demo, {mode}: {walls[mode][-1]:.1f}s")
        for mode in MODES:
            _, first = once(args.example, mode, script=True)
            for task, seconds in first.items():
                firsts[mode].setdefault(task, []).append(seconds)
            say(f"run {i + 1}/{args.runs} first step, {mode}: " + ", ".join(f"{t} {s:.1f}s" for t, s in first.items()))
    wall = {m: median(v) for m, v in walls.items()}
    first_median = {m: {t: median(v) for t, v in tasks.items()} for m, tasks in firsts.items()}
    base = wall[MODES[2]]
    print(f"\n{args.example.name}: wall seconds, median of {args.runs}")
    print(table(["mode", "wall s", "vs by hand"], [[m, wall[m], f"{wall[m] / base:.2f}x"] for m in MODES]))
    tasks = sorted({t for m in MODES for t in first_median[m]})
    print("\nseconds from the command to each task's first step (timed program), median")
    print(table(["mode", *tasks], [[m, *(first_median[m].get(t, float("nan")) for t in tasks)] for m in MODES]))
    save(
        "run-local",
        {"example": str(args.example.relative_to(ROOT)), "runs": args.runs, "wall": wall, "first_step": first_median,
         "all": {"wall": walls, "first_step": firsts}},
    )  # fmt: skip


if __name__ == "__main__":
    main()
