"""What the node used of the CPU while it was up, into `make check`'s timing record.

The timing table's CPU column counts each step's own processes and those it waited for; the
node's long-lived processes (kube-apiserver, etcd, the kubelets, containerd, Cilium, Argo CD, ...)
and its pods belong to none of them, yet they are most of `make e2e`'s CPU. `down` calls
:func:`record` first, while every process still runs: one line per process of the harness (its
pid files), with the CPU it and the children it reaped used since it started, and one per node for
its pods (cgroup v1's cpuacct of the kubelet's `kubepods`, which counts pods already gone), all under
one phase, `node CPU (while up)`, whose CPU is their sum. A `kubepods` cgroup outlives `down`, its
counter with it: the kubelet's first start after `up` notes what it had counted already
(:func:`mark_pods_start`), and only what came after is this run's. A process a scenario restarted
(the kube-apiserver outage, the kubelet restart) counts from its restart only: its line's seconds
say so. Nothing is recorded without $TF_CLUSTER_TIMINGS; a value that cannot be read is left out,
and an error is said, never raised (a figure missing from the table must not keep the node up).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from .config import EXTRA_NODES, HOST_NODE, ROOT, Node, run
from .proc import pid_of, say

PHASE = "node CPU (while up)"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TICKS = os.sysconf("SC_CLK_TCK")


def boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def process_cpu(pid: int, booted: float) -> tuple[float, float]:
    """(CPU seconds of `pid` and of the children it reaped, its start as epoch seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # after the command's ")": state is field 3 of proc(5); utime..cstime are 14-17, starttime 22
    cpu = sum(int(f) for f in fields[11:15]) / TICKS
    return cpu, booted + int(fields[19]) / TICKS


def pods_counter(node: Node, cgroups: Path = CPUACCT) -> float | None:
    """CPU seconds every pod the node's kubelets ran has used (its cgroupRoot: `/` on the host,
    `/<netns>` on the others; hack/node/kubelet.py), since the cgroup was made."""
    usage = cgroups / ("" if node.host else node.netns) / "kubepods" / "cpuacct.usage"
    try:
        return int(usage.read_text()) / 1e9
    except (OSError, ValueError):
        return None


def pods_start_file(node: Node, pid_dir: Path) -> Path:
    return pid_dir / f"pods-cpu-at-start@{node.name}"  # in `run`, which `down` removes


def mark_pods_start(node: Node, cgroups: Path = CPUACCT, pid_dir: Path | None = None) -> None:
    """Before the node's first kubelet start since `up`: what its pods' counter holds already."""
    f = pods_start_file(node, pid_dir or run)
    try:
        if not f.exists():
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(str(pods_counter(node, cgroups) or 0.0))
    except OSError as e:  # a figure of the table: never a reason for the node not to start
        say(f"the pods' CPU counter of {node.name} was not noted: {e}")


def pods_cpu(node: Node, cgroups: Path = CPUACCT, pid_dir: Path | None = None) -> float | None:
    """CPU seconds the node's pods used since `up` (since the cgroup was made if no start was noted)."""
    now = pods_counter(node, cgroups)
    try:
        before = float(pods_start_file(node, pid_dir or run).read_text())
    except (OSError, ValueError):
        before = 0.0
    return None if now is None else max(now - before, 0.0)


def lines(
    pid_dir: Path | None = None, cgroups: Path = CPUACCT, nodes: list[Node] | None = None
) -> list[tuple[str, float, float, float]]:
    """(name, seconds up, start, CPU seconds) of each running process of the harness (pid files in
    `pid_dir`, default the harness's) and of each node's pods, the processes' by CPU, most first."""
    pid_dir = pid_dir or run
    booted, now = boot_time(), time.time()
    procs = []
    for f in sorted(pid_dir.glob("*.pid")):
        pid = pid_of(f.stem, pid_dir)
        if not pid:
            continue
        try:
            cpu, started = process_cpu(pid, booted)
        except (OSError, ValueError, IndexError):
            continue
        procs.append((f.stem, now - started, started, cpu))
    procs.sort(key=lambda p: -p[3])
    kubelets = {p[0]: p for p in procs}
    for node in nodes if nodes is not None else [HOST_NODE, *EXTRA_NODES]:
        cpu = pods_cpu(node, cgroups, pid_dir)
        if cpu is None:
            continue
        kubelet = kubelets.get(node.proc("kubelet"))
        up, started = (kubelet[1], kubelet[2]) if kubelet else (0.0, now)
        procs.append((f"pods on {node.name}", up, started, cpu))
    return procs


def record(**where) -> None:
    """The lines above into $TF_CLUSTER_TIMINGS (top level, whatever step calls `down`); `where`:
    lines()' arguments."""
    if not os.environ.get("TF_CLUSTER_TIMINGS"):
        return
    try:
        sys.path.insert(0, str(ROOT / "tooling"))
        import timings

        found = lines(**where)
        if not found:
            return
        os.environ.pop(timings.PARENT, None)  # its own phase, not one under `node-down`
        first = min(start for _, _, start, _ in found)
        timings.record(PHASE, time.time() - first, first, 0, sum(cpu for *_, cpu in found))
        for name, up, started, cpu in found:
            timings.record(f"{PHASE}/{name}", up, started, 0, cpu)
    except Exception as e:  # noqa: BLE001 - a figure missing from the table never keeps the node up
        say(f"the node's CPU was not recorded: {e}")
