"""`make e2e`'s scenarios in lanes: two lanes side by side, then the scenarios that need the
cluster to themselves, one after another.

The multi-node scenarios (test_nodes.py) spend most of their time waiting for a lost node to be
noticed and fenced; they kill, cut off and drain the other two nodes only, which carry a taint no
single-node scenario tolerates, so they run beside the single-node modules. Lane 2 then goes on
with single-node modules (BESIDE's tail) so that both lanes end at about the same time: measured
in a warm `make check` before this split, lane 1 took 1,670 s and lane 2 1,033 s. What cannot
share the cluster runs afterwards, alone: node faults on the first node (kube-apiserver and
kubelet stopped), gang sizing from the cluster's free CPU, and the check of every node's
listeners (lane 2 restarts nodes); beside them, the simulated cluster's CPU-heavy start, on a
control plane of its own, and in `make check` (TF_CLUSTER_E2E_LATER) the `make test` modules
LATER names, which it leaves out of its `make test`.

    python tests/e2e/lanes.py [--lanes 2|1] [pytest args...]     (TF_CLUSTER_E2E_KUBECONFIG set)

--lanes 1 runs everything one module after another, as before. A lane that ran no test (a `-k` or
`-m` that selects none there) is not a failure; any other pytest exit code is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "e2e" / "cluster"
# Lane 2, in this order: the multi-node module, then single-node modules that balance the lanes
# (their scenarios use the first node only, as lane 1's do; Argo CD and chromium run on the host)
BESIDE = [
    "test_nodes.py",
    "test_argocd.py",
    # test_faults.py::test_an_evicted_mwms_worker_costs_no_step (~150 s) ran here to balance the
    # lanes (lane 1 ended ~530 s after lane 2 in the cold run of 366f10d); with test_nodes.py's
    # cut-off node (~450 s) lane 2 is the longer one again, so it went back to lane 1.
    # test_notebook.py (148 s) ran here too, until the fresh-clone run of b4408bb: lane 1 took
    # 1,182 s and lane 2 1,581 s with it; in lane 1 they took ~1,330 and ~1,430. Back here since
    # test_nodes.py's [kill] (445 s in the fresh-clone run of 69b826e) moved to `make check-all`.
    "test_notebook.py",
    # test_tune_on_node.py (66 s in the CI run of d965178) since the eviction scenario in lane 1
    # runs 36 epochs instead of 16 (+20 to +55 s): lane 1 took 1,176 s and lane 2 1,107 s cold
    "test_tune_on_node.py",
    # test_quota.py (38 s) since `make test` runs on both cores (54988f0) and the cut-off node's
    # run is shorter (92e52f8): in the fresh-clone run of 92e52f8 lane 1 took 2,080 s, lane 2 1,977
    "test_quota.py",
    # back here (~160-190 s, docs/development/e2e-soak.md) since the cut-off node's run ends 2 epochs
    # after it resumes (EPOCHS_AFTER_RESUME): that scenario took 752 s of lane 2's 1,990 s in the
    # cold run of d1462ab, ~300 s of it the 14 epochs its replacement trained after resuming
    "test_faults.py::test_an_evicted_mwms_worker_costs_no_step",
]
# Alone, after the lanes: whole modules, or single scenarios of a module whose others share the cluster
ALONE = [
    "test_faults.py::test_training_goes_on_while_kube_apiserver_is_down_for_60s",  # everyone's API gone
    "test_faults.py::test_pods_keep_running_through_a_kubelet_restart",  # the first node's kubelet stopped
    "test_gang.py",  # sizes its gangs from the cluster's free CPU
    "test_gang_coscheduling.py",  # adds and removes a CRD: the API list Argo CD's cache follows
    "test_harness_ports.py",  # every node's listeners: lane 2 restarts nodes
    "test_harness_recovery.py",  # kills the host's storage client: no pod may use the volume then
]
# Beside the alone ones: a simulated cluster's start (CPU-heavy: not beside the lanes, which leave
# ~10 % of the cores idle) on a control plane of its own (node/sim.py: its own etcd, kube-apiserver,
# controller manager, scheduler and kwok on ports chosen free, none of the node's), so the node's
# faults cannot touch it; the alone scenarios leave ~65 % idle. In the cold run of d965178 it ran
# after them (83 s of the alone phase's 406).
BESIDE_ALONE = ["test_scale.py"]
# Modules of `make test` that `make check` runs here instead, after BESIDE_ALONE (tooling/check.sh
# leaves them out of its `make test` and sets TF_CLUSTER_E2E_LATER): real TensorFlow on this host,
# no cluster. While `make test` runs, the node's Go builds keep both cores busy (0-1 % idle in the
# cold run of d965178), so what moves out of it shortens the builds' critical path; here it uses a
# core the alone scenarios leave idle. Chosen so that the lane ends with the alone ones: in that
# run 120 + 92 s, test_scale.py 83 s, the alone ones ~320 s.
LATER = ["tests/local/test_run_local.py", "tests/local/test_tune.py"]
LATER_ENV = "TF_CLUSTER_E2E_LATER"
NO_TESTS = 5  # pytest's exit code when nothing was selected
JUNIT_DIR: Path | None = None  # --junit-dir: each lane's results as <lane>.xml there (tests/soak.py)


def modules(names: list[str]) -> list[str]:
    """Paths (and node ids) under the suite; a module that is not there is an error, not nothing run."""
    missing = [n for n in names if not (SUITE / n.split("::")[0]).is_file()]
    if missing:
        raise SystemExit(f"lanes.py names modules that are not in {SUITE}: {missing}")
    return [str(SUITE / n) for n in names]


def the_rest() -> list[str]:
    """Every other module, with the scenarios BESIDE and ALONE name one by one deselected from theirs."""
    whole = {n for n in BESIDE + ALONE + BESIDE_ALONE if "::" not in n}
    rest = [str(p) for p in sorted(SUITE.glob("test_*.py")) if p.name not in whole]
    ids = [str((SUITE / n).relative_to(ROOT)) for n in BESIDE + ALONE if "::" in n]  # rootdir-relative
    return rest + [f"--deselect={i}" for i in ids]


def lanes() -> dict[str, list[str]]:
    """Each lane's pytest arguments: lane 2 beside the single-node lane, then the alone one and the
    one beside it."""
    return {
        "single-node": the_rest(),
        "multi-node": modules(BESIDE),
        "alone": modules(ALONE),
        "beside-alone": modules(BESIDE_ALONE),
    }


def later() -> list[str]:
    """LATER's paths when this run takes them over from `make test` (TF_CLUSTER_E2E_LATER), else []."""
    if not os.environ.get(LATER_ENV):
        return []
    missing = [m for m in LATER if not (ROOT / m).is_file()]
    if missing:
        raise SystemExit(f"lanes.py's LATER names modules that are not there: {missing}")
    return [str(ROOT / m) for m in LATER]


def pytest(
    lane: str, paths: list[str], extra: list[str], log: Path | None = None, append: bool = False
) -> subprocess.Popen:
    argv = [sys.executable, "-m", "pytest", *paths, "-rs", "-s", "--durations=0", "-p", "no:cacheprovider", *extra]
    if JUNIT_DIR:
        argv.append(f"--junitxml={JUNIT_DIR / f'{lane}.xml'}")
    out = log.open("a" if append else "w") if log else None
    return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT if out else None)


def one_after_another(steps: dict[str, list[str]], extra: list[str], log: Path) -> tuple[threading.Thread, dict]:
    """A thread running each lane's pytest after the previous one (all into `log`); rcs by lane."""
    rcs: dict[str, int] = {}

    def go() -> None:
        for i, (lane, paths) in enumerate(steps.items()):
            rcs[lane] = pytest(lane, paths, extra, log, append=i > 0).wait()

    thread = threading.Thread(target=go)
    thread.start()
    return thread, rcs


def ok(rc: int) -> bool:
    return rc in (0, NO_TESTS)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    ap.add_argument("--lanes", type=int, choices=(1, 2), default=2)
    ap.add_argument("--junit-dir", type=Path, help="write each lane's JUnit XML there")
    ap.add_argument(
        "--later-ignores",
        action="store_true",
        help="print the pytest arguments that leave LATER out of `make test` (tooling/check.sh), and exit",
    )
    args, extra = ap.parse_known_args()
    if args.later_ignores:
        print(" ".join(f"--ignore={m}" for m in LATER))
        return 0
    global JUNIT_DIR
    JUNIT_DIR = args.junit_dir
    if args.lanes == 1:
        return 0 if ok(rc := pytest("all", [str(SUITE), *later()], extra).wait()) else rc
    t0 = time.monotonic()
    log = ROOT / "build" / "e2e-multi-node.log"
    beside_log = ROOT / "build" / "e2e-beside-alone.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"[e2e] lane 2: {', '.join(BESIDE)} beside the single-node modules (its log: {log}, shown when it ends)")
    paths = lanes()
    side = pytest("multi-node", paths["multi-node"], extra, log)

    def tell() -> None:  # a line a minute, so the lane's progress is visible while the main lane prints
        while side.poll() is None:
            time.sleep(60)
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("[e2e]")]
            if side.poll() is None and lines:
                print(f"[e2e] lane 2, {time.monotonic() - t0:.0f}s: {lines[-1][:160]}", flush=True)

    threading.Thread(target=tell, daemon=True).start()
    main_rc = pytest("single-node", paths["single-node"], extra).wait()
    side_rc = side.wait()
    print(f"\n[e2e] ===== lane 2 ({', '.join(BESIDE)}): exit {side_rc}, its output:", flush=True)
    sys.stdout.write(log.read_text(errors="replace"))
    steps = {"beside-alone": paths["beside-alone"], **({"later": later()} if later() else {})}
    beside_names = BESIDE_ALONE + (LATER if later() else [])
    print(
        f"[e2e] both lanes done in {time.monotonic() - t0:.0f}s; now alone: {', '.join(ALONE)}; beside them: "
        f"{', '.join(beside_names)} (its log: {beside_log}, shown when it ends)",
        flush=True,
    )
    beside, beside_rcs = one_after_another(steps, extra, beside_log)
    alone_rc = pytest("alone", paths["alone"], extra).wait()
    beside.join()
    print(
        f"\n[e2e] ===== beside the alone ones ({', '.join(beside_names)}): exit {beside_rcs}, its output:", flush=True
    )
    sys.stdout.write(beside_log.read_text(errors="replace"))
    rcs = {"single-node": main_rc, "multi-node": side_rc, "alone": alone_rc, **beside_rcs}
    failed = [name for name, rc in rcs.items() if not ok(rc)]
    failed += [lane for lane in steps if lane not in beside_rcs]  # a step that never ran (its thread died)
    if failed:
        print(f"[e2e] FAILED in: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
