"""Thousands of tasks on a simulated cluster (hack/node/sim.py: the real control plane 1.37, kwok's fake
nodes, the real CoreDNS with the addon's Corefile). Three benchmarks, figures into build/bench/sim.json
(report.py: docs/benchmarks.md and its PNG):

1. **Starts.** A MultiWorkerMirrored release of N workers and a ParameterServer release of N tasks
   (N = 64, 512, 4096), gang on and off, each
   on a new cluster of 256 nodes (32 pods each): time from `helm install` to every pod created,
   bound and Running; the Job's and PodGroup's status; EndpointSlices; the API requests the start
   caused (the API server's apiserver_request_total, less nodes and leases: kwok's heartbeats);
   etcd's size.
2. **The floor.** On a new cluster of the same kind, the same release's pods as bare pods (no Job),
   created at kube-controller-manager's default client rate: the time until all are Running, which
   the report shows each start against, as a ratio.
3. **What the launchers ask.** Each on a new cluster of its own, the release started there first
   (gang off), the real launcher for a sample of the release's tasks (up to 32 processes: the
   leading task and others, each with its pod's own environment and a token bound to its pod,
   `-- sleep` as its program, resolving through CoreDNS):
   API requests (the API server's audit log of the tasks' service account, each request's pod named
   by its token) and DNS queries (CoreDNS' coredns_dns_requests_total) in four windows one after the
   other, fixed below before any run: (a) the start, (b) the fencers' first LIST of the release's
   pods, (c) a steady window of STEADY_S, (d) one node lost, for FAULT_S. The same for a
   ParameterServer release (chief, 2 ps, N-3 workers), whose servers follow the leading Job. Each
   with this checkout's launcher and with an older one (--before REV, default 254fea0: the launcher
   before peers were watched and the leader followed by a watch), in the same windows.

Each floor, start and launchers' run is a part saved on its own as it ends (sim_parts.py: under
tests/bench/measured/sim/, committed, with a fingerprint of the code it measured): a run measures what
is missing or was measured with other code, as much as fits --minutes, and assembles
build/bench/sim.json from today's parts. A sitting measures the floors and starts first, one after the
other and alone on the machine (their figures are seconds); then the launchers' runs, whose figures are
requests counted in windows of fixed length, --beside of them at once, each in its own cluster (its
own API server, audit log and CoreDNS): each saves the parts that ran beside it and the machine's idle
CPU in each window, so that a window short of CPU shows. One after the other, the launchers' twelve
runs are ~6 of the whole's ~8 hours at their limits on 2 cores; three at once, the whole is ~4-5 hours,
measured in sittings.

    .venv/bin/python tests/bench/bench_sim.py --plan                  # what is measured, what is left
    .venv/bin/python tests/bench/bench_sim.py [--minutes 90] [--sizes 64,512,4096] [--shapes ...]
    .venv/bin/python tests/bench/bench_sim.py --smoke --out sim-smoke --sizes 64 --shapes mwms
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import sim_audit
import sim_parts
from benchlib import OUT, chart_at, launcher_at, save, table
from benchlib import say as say_plain

from tf_cluster import CHART, ROOT, helm

sys.path.insert(0, str(ROOT / "hack"))  # the node harness: its simulated cluster
from node.sim import SimCluster, missing, pod_env  # noqa: E402

LAUNCHER = CHART / "files" / "launcher.py"
_measuring = threading.local()  # .part: the launchers' part a thread measures (its lines say so)
# Held by one launchers' part at a time from its cluster's start to the end of its window (b): the
# busy minutes of a part (its cluster, its release's pods, 32 launchers importing at once) never
# overlap another's, so that the start's seconds are measured beside others' quiet windows only. In
# a smoke run of four 64-task parts started together, their launchers took 9-12 s to start against
# 3.5-5.5 s alone, with the CPU 0 % idle.
START_GATE = threading.Lock()
# what a sitting's end must stop if a part's own thread did not (a SIGTERM ends the main thread only):
# each live cluster's down() and each live batch of launchers' stop()
ACTIVE: set[Callable[[], None]] = set()
BACKGROUND = {"nodes", "nodes/status", "leases"}  # kwok's heartbeats for its 256 nodes, not the release

# The launchers' windows, chosen before any run (issue 46) and printed in the report. Constants, not
# flags, so that no run moves a window after seeing what it measured; --smoke alone shortens the
# steady one, to check this script, and its figures go to another --out that report.py refuses.
START_LIMIT_S = 600  # (a) every launcher has started its program within this, or the run fails
# (b) the fencers' first LIST of the release's pods, answered whole within this after the start (at
# 4096 tasks ~575 MB read from etcd in pages of 250); a LIST not done by then is reported so
LIST_LIMIT_S = 600
# (c) the steady window: a launcher's watch lasts a random 10-20 min (tf_cluster_launcher.informer
# WATCH_SECONDS; the self-fence's watch of a task's own pod too, while its pod is Ready and the
# bookmarks come; the launcher before, 5-10 min), so 40 min holds at least two whole cycles of every
# watch, whatever its phase: the first watches, all begun at the release's start, end inside it and
# so do the next ones' (a 20-min window would count each task's first renewal only, a quarter below
# the long-run rate)
STEADY_S = 2400
# (d) one node lost, from the steady window's end: the node lifecycle controller finds it NotReady
# after its grace (50 s), evicts its pods after nodeLoss.tolerationSeconds (30), whose deadline is
# job.terminationGracePeriodSeconds (60) later; the fence marks one Failed once it has been not Ready
# for nodeLoss.selfFenceSeconds + fenceAfterSeconds (250) and is checked every fenceCheckSeconds
# (10): ~310 s after the loss with the chart's defaults; 420 s leaves the Job's replacement time to
# run
FAULT_S = 420
SMOKE_STEADY_S = 180  # --smoke: the steady window only (the fault's is the fence's own time)
# kube-controller-manager's default --kube-api-qps and --kube-api-burst, which hack/node/sim.py
# keeps: the Job controller creates pods at this rate, and the floor's bare pods are created at it
FLOOR_QPS, FLOOR_BURST = 20, 30
# A start's limits, chosen before any 4096-task run of the earlier chart: it never reaches Running
# (its pods carry the whole TF_CONFIG; etcd fills), so what ends it is one of these. The API server
# that answers no list of the namespace's pods (a 30 s request) for this long has stopped serving.
START_S = 1800
UNANSWERED_S = 120


@dataclass(frozen=True)
class Windows:
    """The launchers' windows in seconds (the constants above; shorter only with --smoke)."""

    list_limit: float = LIST_LIMIT_S
    steady: float = STEADY_S
    fault: float = FAULT_S
    smoke: bool = False

    def saved(self) -> dict:
        return {"start_limit_s": START_LIMIT_S, "list_limit_s": self.list_limit, "steady_s": self.steady,
                "fault_s": self.fault, "floor_qps": FLOOR_QPS, "floor_burst": FLOOR_BURST}  # fmt: skip


def say(msg: str) -> None:
    """A line of progress; a launchers' part, measured beside others, names itself in each of its own."""
    part = getattr(_measuring, "part", None)
    say_plain(f"[{part}] {msg}" if part else msg)


@contextlib.contextmanager
def live_cluster(work: Path, nodes: int) -> Iterator[SimCluster]:
    """A new simulated cluster, up, that stop_active() takes down from the moment it starts coming up
    (a part's thread may still be starting it when the main thread stops): nothing of it outlives
    the sitting (its down() refuses what the thread would start after)."""
    sim = SimCluster(work, nodes=nodes)
    ACTIVE.add(sim.down)
    try:
        with sim:
            yield sim
    finally:
        ACTIVE.discard(sim.down)


def stop_active() -> None:
    """Take down what parts still measure (their clusters, their launchers): after a SIGTERM or a crash
    of the main thread, whose exit no thread of a part sees."""
    for stop in list(ACTIVE):
        try:
            stop()
        except Exception as e:  # noqa: BLE001 - take down the rest whatever one does
            say_plain(f"taking a part down: {type(e).__name__}: {e}")
    ACTIVE.clear()


def values_for(shape: str, n: int, gang: bool) -> helm.Values:
    common = [
        "fullnameOverride=t",  # 4096 tasks' TF_CONFIG fits the 128 KiB environment with short names only
        f"scheduling.gang={str(gang).lower()}",
        "scheduling.singleNode=false",
        "storage.checkpoints.type=emptyDir",
    ]
    if shape in ("mwms", "custom"):  # custom: the same workers, each waiting for every peer (bench_sim_events)
        return helm.Values.of(
            [ROOT / "values-examples" / "mwms-cpu.yaml"],
            set=[
                *common,
                *(["strategy=custom"] if shape == "custom" else []),
                f"roles.worker.replicas={n}",
                "roles.worker.resources.requests.cpu=100m",
                "roles.worker.resources.requests.memory=256Mi",
            ],
        )
    return helm.Values.of(
        [ROOT / "values-examples" / "parameter-server.yaml"],
        set=[*common, f"roles.worker.replicas={n - 3}", "roles.ps.replicas=2"]
        + [
            f"roles.{r}.resources.requests.{k}={v}"
            for r in ("chief", "worker", "ps")
            for k, v in (("cpu", "100m"), ("memory", "256Mi"))
        ],
    )


def follow_pods(
    sim: SimCluster, ns: str, n: int, t0: float, what: str, check: Callable[[], object] | None = None
) -> tuple[list, dict]:
    """Follow the namespace's pods until all n are Running (or the cluster cannot go on): the curve of
    (seconds after t0, created, bound, Running) and when each reached n. `check` is called each poll
    (it raises when what creates the pods failed)."""
    curve: list[tuple] = []
    marks: dict = {}
    last_say = 0.0
    answered = time.time()
    while True:
        sim.check_alive()
        if check is not None:
            check()
        try:
            rows = sim.pod_table(ns)
        except (OSError, http.client.HTTPException) as e:  # a timeout, a reset: the API server is swamped
            marks["unanswered_polls"] = marks.get("unanswered_polls", 0) + 1
            now = time.time() - t0
            silent = time.time() - answered
            stalled = sim.stalled()
            if stalled or silent >= UNANSWERED_S or now > START_S:
                reached = marks.get("reached", {})
                marks["stopped"] = stalled or (
                    f"the API server answered no list of the pods for {silent:.0f} s "
                    f"(last: {type(e).__name__}; etcd {etcd_mb(sim)})"
                )
                say(f"  stopped at {now:.0f}s: {marks['stopped']} (last answer: {reached})")
                break
            say(f"  {what}: {now:.0f}s: the list of the pods went unanswered ({type(e).__name__}); asking again")
            time.sleep(2.0)
            continue
        answered = time.time()
        now = time.time() - t0
        created = len(rows)
        bound = sum(1 for p in rows if p.get("Node") not in (None, "", "<none>"))
        running = sum(1 for p in rows if p.get("Status") == "Running")
        curve.append((round(now, 2), created, bound, running))
        for key, count in (("created", created), ("bound", bound), ("running", running)):
            if key not in marks and count >= n:
                marks[key] = round(now, 2)
        marks["reached"] = {"created": created, "bound": bound, "running": running}
        if "running" in marks:
            break
        if now - last_say >= 10:
            say(f"  {what}: {now:.0f}s: {created} created, {bound} bound, {running} Running")
            last_say = now
        stalled = sim.stalled()
        if stalled or now > START_S:
            # Kubernetes could not go on (etcd full): what was reached is the figure, and why it stopped
            marks["stopped"] = stalled or f"{n - running} of {n} pods not Running after {START_S} s"
            say(f"  stopped at {now:.0f}s: {marks['stopped']} ({created} created, {bound} bound, {running} Running)")
            break
        time.sleep(0.5 if n <= 1024 else 2.0)  # a table of 4096 pods a poll costs the API server too
    return curve[:: max(1, len(curve) // 400)], marks


def etcd_mb(sim: SimCluster) -> str:
    try:
        return f"{sim.etcd_db_bytes() / 1e6:.0f} MB"
    except OSError as e:
        return f"its size unread: {type(e).__name__}"


def start_release(
    sim: SimCluster, shape: str, n: int, gang: bool, release: str = "t", chart: Path = CHART, chart_label: str = "this"
) -> dict:
    """helm install (of `chart`), then follow the pods until all n are Running: the timeline and the status."""
    from kubernetes import client

    ns = f"sim-{shape}-{n}-{'gang' if gang else 'nogang'}"
    core = client.CoreV1Api(sim.api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    h = helm.Helm("4", kubeconfig=sim.kubeconfig, namespace=ns)
    before = sim.apiserver_requests()
    t0 = time.time()
    r = h.install(release, values_for(shape, n, gang), chart=chart)
    installed = time.time() - t0
    if r.returncode != 0:
        refused = next((line for line in r.stderr.splitlines() if "TF_CONFIG for" in line), "")
        if not refused:
            raise RuntimeError(f"helm install failed:\n{r.stderr}")
        # past the chart's ceiling (TF_CONFIG over Linux's 128 KiB for one environment string): what stops it
        say(f"  refused at render: {refused}")
        why = "refused at render: " + refused[refused.index("TF_CONFIG for") :]
        return {
            **dict(shape=shape, tasks=n, gang=gang, chart=chart_label, namespace=ns, release=release),
            **dict(helm_install_s=round(installed, 2), marks={"stopped": why}, curve=[]),
            **dict(requests_total=None, endpointslices=None, pod_api_bytes=None, pod_etcd_bytes=None),
            **dict(etcd_db_bytes=None),
        }
    curve, marks = follow_pods(sim, ns, n, t0, f"{shape} N={n} gang={gang}")
    # After a start that stopped, the API server may answer nothing more: each figure read then is
    # None, and why is in marks["unread"] (etcd, read directly, still gives the pod's size).
    timeout = 60

    def read(what: str, fn: Callable[[], object]) -> object:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - an API server that stopped serving fails any way it can
            if "stopped" not in marks:
                raise
            marks.setdefault("unread", {})[what] = f"{type(e).__name__}: {str(e)[:200]}"
            return None

    after = read("requests", sim.apiserver_requests)
    caused = {k: after.get(k, 0) - before.get(k, 0) for k in after} if isinstance(after, dict) else {}
    caused = {f"{v} {r}": int(c) for (v, r), c in caused.items() if c > 0 and r not in BACKGROUND}
    batch = client.BatchV1Api(sim.api)
    listed = read("jobs", lambda: batch.list_namespaced_job(ns, _request_timeout=timeout).items) or []
    jobs = {
        j.metadata.name: {
            "completions": j.spec.completions,
            "parallelism": j.spec.parallelism,
            "active": j.status.active,
            "ready": j.status.ready,
        }
        for j in listed
    }
    groups = []
    if gang:
        sched = client.CustomObjectsApi(sim.api)
        found = read(
            "podgroups",
            lambda: sched.list_namespaced_custom_object(
                "scheduling.k8s.io", "v1beta1", ns, "podgroups", _request_timeout=timeout
            )["items"],
        )
        for g in found or []:
            groups.append(
                {
                    "name": g["metadata"]["name"],
                    "status": g.get("status", {}),
                    "minCount": g["spec"].get("schedulingPolicy", {}).get("gang", {}).get("minCount"),
                }
            )
    discovery = client.DiscoveryV1Api(sim.api)
    slices = read(
        "endpointslices", lambda: discovery.list_namespaced_endpoint_slice(ns, _request_timeout=timeout).items
    )
    # one pod's size: the API server's JSON of it (what a GET returns) and the value etcd stores (protobuf)
    key = sim.etcd_first_key(f"/registry/pods/{ns}/")
    pod = key.rsplit("/", 1)[-1] if key else None
    pod_api_bytes = read("pod_api_bytes", lambda: len(sim.get(f"/api/v1/namespaces/{ns}/pods/{pod}").encode()))
    pod_etcd_bytes = sim.etcd_value_bytes(key) if key else None
    return {
        "shape": shape,
        "tasks": n,
        "gang": gang,
        "chart": chart_label,
        "namespace": ns,
        "release": release,
        "helm_install_s": round(installed, 2),
        "marks": marks,
        "curve": curve,
        "requests": dict(sorted(caused.items(), key=lambda kv: -kv[1])),
        "requests_total": sum(caused.values()) if isinstance(after, dict) else None,
        "jobs": jobs,
        "podgroups": groups,
        "endpointslices": None if slices is None else len(slices),
        "endpoints": None if slices is None else sum(len(s.endpoints or []) for s in slices),
        "pod_api_bytes": pod_api_bytes,
        "pod_etcd_bytes": pod_etcd_bytes,
        "etcd_db_bytes": read("etcd_db_bytes", sim.etcd_db_bytes),
        "nodes_not_ready": read("nodes_not_ready", sim.nodes_not_ready),
    }


# ------------------------------------------------------------------ the launchers' own load


def sample_pods(sim: SimCluster, namespace: str, k: int) -> list[dict]:
    """Up to k of the release's Running pods: every task of the leading role's index 0, each ps, then
    workers (a pod its node's loss left Terminating, or Failed, is no task's any more)."""
    from kubernetes import client

    core = client.CoreV1Api(sim.api)
    picked: list[dict] = []
    for role, count in (("chief", 1), ("ps", 2), ("worker", k)):
        sel = f"app.kubernetes.io/component={role}"
        resp = core.list_namespaced_pod(namespace, label_selector=sel, limit=count + 8, _preload_content=False)
        items = [p for p in json.loads(resp.data)["items"] if running(p)]
        items.sort(
            key=lambda p: int(p["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index", 0))
        )
        picked += items[: min(count, max(0, k - len(picked)))]
    return picked[:k]


def running(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def elected_fencers(sim: SimCluster, pods: list[dict]) -> list[str]:
    """The sampled tasks the launcher elects to fence (fencing.is_fencer: the first two of the leading
    role, the first of each other role), by their pods' TF_CONFIG."""
    sys.path.insert(0, str(LAUNCHER.parent))
    from tf_cluster_launcher.fencing import is_fencer
    from tf_cluster_launcher.tfconfig import cluster_of

    out = []
    for pod in pods:
        tf_config = pod_env(pod, lambda name, ns=pod["metadata"]["namespace"]: sim.config_map(ns, name))["TF_CONFIG"]
        task = json.loads(tf_config)["task"]
        if is_fencer(cluster_of(tf_config), task["type"], int(task["index"])):
            out.append(pod["metadata"]["name"])
    return out


def cpu_times() -> tuple[int, int]:
    """The machine's idle and total CPU time so far, every core's (/proc/stat's first line, in ticks)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return ticks[3] + ticks[4], sum(ticks)  # idle + iowait; user nice system idle iowait irq softirq steal


def counters_now(sim: SimCluster) -> dict:
    """A window's edge: the time, CoreDNS' queries answered, the bytes of every LIST answered, the
    machine's CPU time (idle, total)."""
    dns = sim.dns_requests()
    if dns is None:
        raise RuntimeError(f"CoreDNS' metrics did not answer (logs in {sim.work})")
    return {"t": time.time(), "dns": dns, "listed": sim.list_bytes(), "cpu": cpu_times()}


def idle_shares(edges: list[dict]) -> list[float]:
    """The machine's idle CPU share in each window between two edges, in %: what the parts measured
    beside each other left (a window that ran short of CPU says so here)."""
    out = []
    for a, b in zip(edges, edges[1:], strict=False):
        total = b["cpu"][1] - a["cpu"][1]
        out.append(round(100 * (b["cpu"][0] - a["cpu"][0]) / total, 1) if total else 0.0)
    return out


def children(pid: int) -> list[int]:
    """The processes `pid` started (any of its threads), from /proc."""
    found = []
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in listing.read_text().split()]
    return found


class Launchers:
    """The sampled tasks' real launchers (each with its agent sidecar: hack/node/sim.py `task`), their
    output read as it comes: when each started its program, its log."""

    def __init__(self, sim: SimCluster, pods: list[dict], launcher: Path, workdir: Path, env: dict, lives: float):
        self.sim, self.t0 = sim, time.time()
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, list[str]] = {}
        self.started: dict[str, float] = {}
        self.lost: set[str] = set()  # killed with their node (the fault)
        # the program sleeps until after the last window: all are stopped together. exec: the program
        # is the one `sleep` (dash runs `sh -c "sleep ..."` as two processes, and the "before" launcher
        # signals its child's pid alone: the `sleep` outlived it)
        program = ["sh", "-c", f"exec sleep $(( {int(self.t0 + lives)} - $(date +%s) ))"]
        ACTIVE.add(self.stop)
        for pod in pods:
            name = pod["metadata"]["name"]
            self.logs[name] = []
            self.procs[name] = sim.task(pod, launcher, program, workdir, env)
            threading.Thread(target=self.read, args=(name,), daemon=True).start()

    def read(self, name: str) -> None:
        for line in self.procs[name].stdout:
            self.logs[name].append(line.rstrip())
            if "starting:" in line and name not in self.started:
                self.started[name] = time.time()

    def wait_started(self, limit: float) -> None:
        """Until every launcher has started its program (the start window's end)."""
        while len(self.started) < len(self.procs):
            time.sleep(0.2)
            bad = next((n for n, p in self.procs.items() if p.poll() is not None), None)
            if bad:
                raise RuntimeError(f"launcher of {bad} exited early:\n" + "\n".join(self.logs[bad][-20:]))
            if time.time() - self.t0 > limit:
                raise RuntimeError(f"{len(self.procs) - len(self.started)} launcher(s) not started after {limit:.0f} s")

    def kill(self, name: str) -> None:
        """The task and its agent end at once, as they do when their node dies: nothing said on the way
        out, and the program with them (it would outlive its launcher, in a process group of its own)."""
        self.lost.add(name)
        agent = self.sim.agents.get(name)
        for p in (self.procs[name], agent):
            if p is not None and p.poll() is None:
                programs = children(p.pid)
                p.kill()
                for pid in programs:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def peak_mb(self) -> list[float]:
        """Each live launcher's peak resident memory (the pid is the launcher: unshare and sh exec it)."""
        out = []
        for name, p in self.procs.items():
            try:
                text = Path(f"/proc/{p.pid}/status").read_text()
                out.append(round(int(re.search(r"VmHWM:\s+(\d+)", text).group(1)) / 1024, 1))
            except (OSError, AttributeError):
                if name not in self.lost:
                    continue
        return out

    def stop(self) -> None:
        ACTIVE.discard(self.stop)
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()

    def waits(self) -> list[float]:
        """How long each task waited for its peers (its log: "resolve after N s")."""
        return [
            float(m.group(1))
            for lines in self.logs.values()
            for line in lines
            for m in [re.search(r"resolve after ([\d.]+)s", line)]
            if m
        ]

    def peers(self) -> list[int]:
        """How many peers each task waited for (its log: "all N peer(s) resolve"; none logged: 0)."""
        return [
            next((int(m.group(1)) for line in lines for m in [re.search(r"all (\d+) peer\(s\) resolve", line)] if m), 0)
            for lines in self.logs.values()
        ]


def wait_first_lists(sim: SimCluster, user: str, selector: str, fencers: list[str], since: float, until: float) -> dict:
    """Until every fencer's first LIST of the release's pods has been answered whole (the audit log:
    sim_audit.first_list), or `until`: each fencer's LIST (when begun and done, its pages)."""
    while True:
        events = sim.audit(user, since)
        lists = {f: sim_audit.first_list(events, f, selector) for f in fencers}
        if all(v and v["complete"] for v in lists.values()) or time.time() >= until:
            return lists
        time.sleep(2)


@dataclass(frozen=True)
class Sample:
    """The sampled tasks of one release: their pods, their account, whom the launcher elects to fence."""

    namespace: str
    pods: list[dict]
    user: str  # the release's service account, as the audit log names it
    selector: str  # the release's pods (TF_CLUSTER_RELEASE_SELECTOR)
    fencers: list[str]
    listing: list[str]  # the fencers whose first LIST is waited for: none with the fence off


def sample(sim: SimCluster, namespace: str, k: int, env: dict) -> Sample:
    pods = sample_pods(sim, namespace, k)
    user = f"system:serviceaccount:{namespace}:{pods[0]['spec']['serviceAccountName']}"
    selector = pod_env(pods[0], lambda name: sim.config_map(namespace, name))["TF_CLUSTER_RELEASE_SELECTOR"]
    fencers = elected_fencers(sim, pods)
    # with its fence off (the earlier launcher at 4096 tasks) no task lists the release's pods
    listing = [] if env.get("TF_CLUSTER_FENCE_SECONDS") == "0" else fencers
    return Sample(namespace, pods, user, selector, fencers, listing)


def run_launchers(
    sim: SimCluster, namespace: str, launcher: Path, k: int, workdir: Path, windows: Windows, env: dict | None = None
) -> dict:
    """k real launcher processes for the release's tasks, `-- sleep` as their program, each in a
    mount namespace whose /etc/resolv.conf points at the simulated cluster's CoreDNS; their requests
    and DNS queries in the four windows (Windows), one after the other from their start to the fault's end."""
    env = env or {}
    who = sample(sim, namespace, k, env)
    lives = START_LIMIT_S + windows.list_limit + windows.steady + windows.fault + 120
    edges = [counters_now(sim)]
    tasks = Launchers(sim, who.pods, launcher, workdir, env, lives)
    try:
        lists, fault = measure_windows(sim, who, tasks, windows, edges)
        peak_mb = tasks.peak_mb()
    finally:
        tasks.stop()  # whatever ended the windows (SIGTERM too): no launcher outlives its cluster
    # from t0, not before: the batch measured before this one (the same service account) sends its
    # last requests as it is stopped, a moment before t0 (a server reads the leading Job on SIGTERM)
    events = sim.audit(who.user, edges[0]["t"], edges[-1]["t"])
    k = len(who.pods)
    return {
        "tasks": k,
        "fencers": who.fencers,
        "windows": [round(e["t"] - edges[0]["t"], 1) for e in edges],
        "cpu_idle_pct": idle_shares(edges),  # the machine's, window by window: (a) to (d)
        **start_costs(events, edges, k),
        "list": list_costs(events, edges, lists, windows.list_limit),
        "steady": steady_costs(events, edges, k),
        "fault": {**fault, **fault_costs(events, edges, who, fault["task"])},
        "roles": sorted({n.split("-")[-3] for n in tasks.procs}),
        "waits": tasks.waits(),
        "peak_mb": peak_mb,
        "peers": tasks.peers(),
        "log_sample": {n: lines[:6] for n, lines in list(tasks.logs.items())[:3]},
    }


def measure_windows(sim: SimCluster, who: Sample, tasks: Launchers, windows: Windows, edges: list[dict]) -> tuple:
    """The windows one after the other, each edge appended to `edges` (counters_now); the fencers'
    first LISTs and the fault."""
    tasks.wait_started(START_LIMIT_S)
    edges.append(counters_now(sim))
    started = edges[1]["t"] - edges[0]["t"]
    say(f"  {len(who.pods)} launchers started in {started:.1f}s; fencers {', '.join(who.fencers)}")
    lists = wait_first_lists(
        sim, who.user, who.selector, who.listing, edges[0]["t"], edges[1]["t"] + windows.list_limit
    )
    edges.append(counters_now(sim))
    say(f"  the fencers' first LIST: {edges[2]['t'] - edges[1]['t']:.1f}s after the start")
    let_the_next_start()
    time.sleep(windows.steady)
    edges.append(counters_now(sim))
    fault = lose_a_node(sim, who.namespace, who.pods, who.fencers, tasks, windows.fault)
    edges.append(counters_now(sim))
    sim.check_alive()
    return lists, fault


def start_costs(events: list[dict], edges: list[dict], k: int) -> dict:
    """(a) the start: from the launchers' start until each has started its program."""
    (t0, dns0, listed0), (t1, dns1, listed1) = ((e["t"], e["dns"], e["listed"]) for e in edges[:2])
    at_start = sim_audit.within(events, t0, t1)
    return {
        "start_s": round(t1 - t0, 2),
        "api_start": len(at_start),
        "api_start_per_task": round(len(at_start) / k, 2),
        "api_start_by_verb": sim_audit.by_verb(at_start),
        "dns_start": int(dns1 - dns0),
        "dns_start_per_task": round((dns1 - dns0) / k, 1),
        "list_bytes_start": int(listed1 - listed0),
    }


def list_costs(events: list[dict], edges: list[dict], lists: dict, limit: float) -> dict:
    """(b) from the start's end until the fencers' first LIST of the release's pods was answered whole
    (when that LIST ended before the start did, this window is the time to find that out: its cost is
    the start's); each fencer's LIST as seconds after the launchers began."""
    t0, t1, t2 = edges[0]["t"], edges[1]["t"], edges[2]["t"]
    window = sim_audit.within(events, t1, t2)
    done = [v for v in lists.values() if v and v["complete"]]
    return {
        "seconds": round(t2 - t1, 1),
        "limit_s": limit,
        "requests": len(window),
        "by_verb": sim_audit.by_verb(window),
        "bytes": int(edges[2]["listed"] - edges[1]["listed"]),
        "completed": len(done) == len(lists) and bool(lists),
        "fencers": {
            f: None if v is None else {**v, "began": round(v["began"] - t0, 2), "done": round(v["done"] - t0, 2)}
            for f, v in lists.items()
        },
        "done_s": round(max(v["done"] for v in done) - t0, 2) if done else None,
    }


def steady_costs(events: list[dict], edges: list[dict], k: int) -> dict:
    """(c) the steady window, whole: its requests a task a minute, by verb, and the watches renewed in it
    (a renewal: a task's watch after its first of the same resource and selectors, since t0)."""
    t2, t3 = edges[2]["t"], edges[3]["t"]
    window = sim_audit.within(events, t2, t3)
    renewed = sim_audit.within(sim_audit.renewals(events), t2, t3)
    minutes = (t3 - t2) / 60
    return {
        "seconds": round(t3 - t2, 1),
        "requests": len(window),
        "per_task_min": round(len(window) / k / minutes, 3),
        "by_verb": sim_audit.by_verb(window),
        "renewals": len(renewed),
        "renewals_by_verb": sim_audit.by_verb(renewed),
        "dns_per_task_min": round((edges[3]["dns"] - edges[2]["dns"]) / k / minutes, 2),
        "list_bytes": int(edges[3]["listed"] - edges[2]["listed"]),
    }


def fault_costs(events: list[dict], edges: list[dict], who: Sample, lost: str) -> dict:
    """(d) the fault window: the requests of the fencers and of the other tasks (the followers; the
    lost task's own, none once its node is gone, left out), a task each, by verb."""
    window = sim_audit.within(events, edges[3]["t"], edges[4]["t"])
    fencers = set(who.fencers)
    followers = {p["metadata"]["name"] for p in who.pods} - fencers - {lost}  # each, whether it asked or not
    by_fencers = [e for e in window if sim_audit.task_of(e) in fencers]
    by_followers = [e for e in window if sim_audit.task_of(e) in followers]
    return {
        "seconds": round(edges[4]["t"] - edges[3]["t"], 1),
        "requests": len(window),
        "fencer_requests_per_task": round(len(by_fencers) / max(1, len(fencers)), 2),
        "fencers_by_verb": sim_audit.by_verb(by_fencers),
        "follower_requests_per_task": round(len(by_followers) / max(1, len(followers)), 2),
        "followers_by_verb": sim_audit.by_verb(by_followers),
        "lost_task_requests": sum(1 for e in window if sim_audit.task_of(e) == lost),
        "list_bytes": int(edges[4]["listed"] - edges[3]["listed"]),
    }


# ------------------------------------------------------------------ one node lost


def node_to_lose(pods: list[dict], fencers: list[str]) -> tuple[str, str]:
    """A node that holds a sampled task's pod and no fencer's (its loss is for the fencers to see, not
    to suffer), and that task: the last such task sampled."""
    fencer_nodes = {p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] in fencers}
    for pod in reversed(pods):
        if pod["metadata"]["name"] not in fencers and pod["spec"]["nodeName"] not in fencer_nodes:
            return pod["spec"]["nodeName"], pod["metadata"]["name"]
    raise RuntimeError("every sampled task shares a node with a fencer: no node to lose")


def take_node(sim: SimCluster, node: str) -> None:
    """Make `node` lost as a dead kubelet is to the control plane: nothing renews its Lease, reports
    its status or confirms its pods' ends. Nothing but the node's KWOK_NODE label is written
    (hack/node/sim.py `lose_node`): kwok's watch of its nodes selects them by that label, so the node
    leaves it with a DELETED event and kwok forgets it (its Lease no longer renewed, its planned status
    heartbeat cancelled, its pods no longer played: an evicted one stays Terminating). The node
    lifecycle controller then finds the Lease's renewals stopped: NotReady after its grace (50 s), its
    pods not Ready, tainted unreachable, evicted after their tolerationSeconds; the fencers mark the
    lost task's pod Failed. Seen in a smoke run (64 tasks, MultiWorkerMirrored): kwok's last renewal
    5 s before the loss, the node NotReady (unreachable, tainted) 46 s after it, the pod evicted at
    77 s (DisruptionTarget, left Terminating), marked Failed by a fencer (reason NodeLost) and its
    replacement Running at 298 s; given back, kwok renewed the Lease, reported the node Ready and
    deleted the evicted pod within seconds. An earlier version gave the Lease another holder instead;
    the node lifecycle controller of 1.37 then never marked the node NotReady (its Lease cache "not
    as new as written version" every 5 s), and no fence was measured."""
    sim.lose_node(node)


def give_back_node(sim: SimCluster, node: str) -> None:
    """The node comes back (kwok plays it again: renews its Lease, reports it Ready, ends its evicted
    pods), for the next launchers."""
    sim.lose_node(node, lost=False)
    deadline = time.time() + 120
    while not node_ready(sim, node):
        if time.time() > deadline:
            raise RuntimeError(f"node {node} not Ready again 120 s after kwok got it back")
        time.sleep(2)


def node_ready(sim: SimCluster, node: str) -> bool:
    from kubernetes import client

    conditions = client.CoreV1Api(sim.api).read_node(node).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def follow_fault(sim: SimCluster, namespace: str, node: str, lost: str, t_lost: float, until: float) -> dict:
    """Seconds after the loss until the node was NotReady, its task's pod deleted (evicted), marked
    Failed (by whom: its reason) and its replacement Running, polled every 2 s until `until`."""
    from kubernetes import client

    core = client.CoreV1Api(sim.api)
    pod = core.read_namespaced_pod(lost, namespace)
    job = pod.metadata.labels["batch.kubernetes.io/job-name"]
    index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
    same_index = f"batch.kubernetes.io/job-name={job},batch.kubernetes.io/job-completion-index={index}"
    marks: dict = {}

    def mark(key: str, seen: bool) -> None:
        if seen and key not in marks:
            marks[key] = round(time.time() - t_lost, 1)

    while time.time() < until:
        sim.check_alive()
        mark("node_not_ready_s", not node_ready(sim, node))
        pods = core.list_namespaced_pod(namespace, label_selector=same_index).items
        mine = next((p for p in pods if p.metadata.name == lost), None)
        mark("evicted_s", mine is None or mine.metadata.deletion_timestamp is not None)
        if mine is not None and mine.status.phase == "Failed":
            mark("failed_s", True)
            marks.setdefault("failed_reason", mine.status.reason)
        mark("replaced_s", any(p.metadata.name != lost and p.status.phase == "Running" for p in pods))
        time.sleep(2)
    return marks


def lose_a_node(
    sim: SimCluster, namespace: str, pods: list[dict], fencers: list[str], tasks: Launchers, seconds: float
) -> dict:
    """(d) one node lost for `seconds` (FAULT_S) from now: a sampled task's, not a fencer's; that task's
    launcher and agent die with it. What the fence did, and when; then the node comes back."""
    t_fault = time.time()
    node, lost = node_to_lose(pods, fencers)
    take_node(sim, node)
    t_lost = time.time()
    tasks.kill(lost)
    say(f"  node {node} lost (task {lost}) for {seconds:.0f}s")
    marks = follow_fault(sim, namespace, node, lost, t_lost, t_fault + seconds)
    give_back_node(sim, node)
    say(f"    {marks}")
    return {"node": node, "task": lost, "lost_at_s": round(t_lost - t_fault, 1), **marks}


# ------------------------------------------------------------------ the floor: bare pods


class TokenBucket:
    """client-go's rate limiter (flowcontrol's token bucket): `qps` a second, `burst` at once."""

    def __init__(self, qps: float, burst: int):
        self.qps, self.burst, self.tokens, self.at = qps, burst, float(burst), time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> None:
        with self.lock:  # a reservation: the wait is taken outside the lock
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.qps) - 1
            self.at = now
            wait = -self.tokens / self.qps if self.tokens < 0 else 0.0
        time.sleep(wait)


def bare_pods(job: dict) -> list[dict]:
    """The pods an Indexed Job would create, as bare pods: its template, each index's name, hostname,
    index label and annotation."""
    out = []
    name, template = job["metadata"]["name"], job["spec"]["template"]
    for i in range(int(job["spec"]["completions"])):
        meta = json.loads(json.dumps(template["metadata"]))
        meta["name"] = f"{name}-{i}"
        meta.setdefault("labels", {})["batch.kubernetes.io/job-completion-index"] = str(i)
        meta.setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(i)
        spec = {**template["spec"], "hostname": f"{name}-{i}"}
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return out


def floor_start(sim: SimCluster, shape: str, n: int, gang: bool = False) -> dict:
    """The same release's pods without their Jobs, created at kube-controller-manager's client rate
    (FLOOR_QPS, FLOOR_BURST: its defaults, which the simulated cluster keeps), from 16 threads as its
    Job controller's concurrent creates: the time until all are created, bound and Running is the
    floor a start on this cluster cannot beat. The release's other objects (its ServiceAccount, the
    TF_CONFIG ConfigMap, the Services; with `gang` its PodGroup, which the bare pods name as the
    release's do: the scheduler binds none until all exist) are created first, as helm install does."""
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client, config

    ns = f"floor-{shape}-{n}{'-gang' if gang else ''}"
    client.CoreV1Api(sim.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    docs = helm.parse(helm.Helm("4", namespace=ns).template("t", values_for(shape, n, gang=gang)))
    jobs = [d for d in docs if d["kind"] == "Job"]
    rest = [d for d in docs if d["kind"] != "Job" and not d["metadata"].get("annotations", {}).get("helm.sh/hook")]
    cfg = client.Configuration()
    config.load_kube_config(str(sim.kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = 16
    core = client.CoreV1Api(client.ApiClient(cfg))
    bucket = TokenBucket(FLOOR_QPS, FLOOR_BURST)

    def create(pod: dict) -> None:
        bucket.take()
        core.create_namespaced_pod(ns, pod)

    t0 = time.time()
    kubectl = ROOT / ".tools" / "bin" / "kubectl"
    manifest = "\n---\n".join(json.dumps(d) for d in rest)
    argv = [str(kubectl), f"--kubeconfig={sim.kubeconfig}", "-n", ns, "create", "-f", "-"]
    subprocess.run(argv, input=manifest, check=True, capture_output=True, text=True)
    with ThreadPoolExecutor(16) as pool:
        creating = [pool.submit(create, pod) for job in jobs for pod in bare_pods(job)]
        # a refused create raises here, at once
        curve, marks = follow_pods(
            sim, ns, n, t0, f"floor {shape} N={n}", lambda: [f.result() for f in creating if f.done()]
        )
    return {
        **dict(shape=shape, tasks=n, gang=gang, qps=FLOOR_QPS, burst=FLOOR_BURST),
        **dict(marks=marks, curve=curve),
    }


def prepare(prefix: str) -> Path:
    """Before a benchmark's first simulated cluster: SIGTERM ends the run cleanly (the clusters are taken
    down), the cluster's parts are all here (else exit naming what is missing); a new work folder."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped (SIGTERM)"))
    why = missing()
    if why:
        sys.exit(f"the simulated cluster cannot start: {why}")
    return Path(tempfile.mkdtemp(prefix=prefix))


def sizes(text: str) -> list[int]:
    """--sizes' value: task counts, comma-separated (argparse names the flag and the value if not)."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give task counts, comma-separated, e.g. 64,512,4096") from None
    if any(c < 1 for c in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: a release has at least 1 task")
    return counts


def slots(text: str) -> int:
    """--beside's value: how many launchers' parts at once (argparse names the flag if not)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of parts, e.g. 3") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1 part at a time (1 measures them one after another)")
    return n


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64,512,4096", type=sizes, help="task counts, comma-separated")
    ap.add_argument("--before", default="254fea0", help="the launcher to compare with (a git revision)")
    ap.add_argument("--sample", type=int, default=32, help="launcher processes per release")
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--skip-launchers", action="store_true")
    ap.add_argument(
        "--beside",
        type=slots,
        default=3,
        help="launchers' parts measured at once, each in a cluster of its own (a 4096-task one holds 2); "
        "the floors and starts run alone first",
    )
    ap.add_argument(
        "--out",
        default="sim",
        help="build/bench/OUT.json; the parts of any OUT but sim go to build/bench/OUT-parts/, not the committed ones",
    )
    ap.add_argument("--launchers", default="before,after", help="whose launchers: before, after")
    ap.add_argument(
        "--shapes", default="mwms,mwms-gang,ps,ps-gang", help="which releases: mwms, mwms-gang, ps, ps-gang"
    )
    ap.add_argument("--again", action="store_true", help="measure the parts asked for even if saved with today's code")
    ap.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="measure only the parts that fit in this many minutes (each as long as it took when last measured, "
        "else its limits); the rest wait for a later run",
    )
    ap.add_argument(
        "--plan", action="store_true", help="say what is measured already and what is left; measure nothing"
    )
    ap.add_argument(
        "--chart-before",
        default="a791f8d",
        help="the chart to compare starts with (a git revision; default: the last one whose pods carried TF_CONFIG)",
    )
    ap.add_argument(
        "--chart-before-sizes",
        default="4096",
        type=sizes,
        help="sizes whose starts are measured with it too ('' none)",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help=f"a check of this script: the steady window {SMOKE_STEADY_S} s, not {STEADY_S}; needs an --out "
        "other than sim (report.py refuses to publish its figures)",
    )
    args = ap.parse_args()
    if args.smoke and args.out == "sim":
        ap.error("--smoke writes figures no table may show: give it its own --out (e.g. sim-smoke)")
    return args


def measure_floor(args: argparse.Namespace, work: Path, shape: str, n: int, gang: bool) -> dict:
    what = "in one gang " if gang else ""
    say(f"{shape}, {n} tasks as bare pods {what}(the floor): a new simulated cluster of {args.nodes} nodes")
    with live_cluster(work / "cluster", args.nodes) as sim:
        floor = floor_start(sim, shape, n, gang)
    m = floor["marks"]
    say(f"  floor: all {n} created {m.get('created')}s, bound {m.get('bound')}s, Running {m.get('running')}s")
    return floor


def measure_launcher(
    args: argparse.Namespace, sim: SimCluster, start: dict, label: str, launcher: Path, work: Path, windows: Windows
) -> dict:
    """One launcher's four windows in the release `start` started (gang off)."""
    shape, n = start["shape"], start["tasks"]
    # the earlier launcher fenced from every task, LISTing all the release's pods every
    # 10 s: ~500 MB each at 4096 tasks, more than this machine's API server can hold
    # for 32 tasks; there it runs without the fence (the table says so)
    fence = not (label == "before" and n > 1024)
    env = {} if fence else {"TF_CLUSTER_FENCE_SECONDS": "0"}
    if label == "before":
        # it predates the tf-cluster-agent sidecar: it ran in the training container, with the
        # token (given the agent's folder, sim.py would run it as an agent it cannot be, and
        # take its token away: it then asked nothing at all)
        env["TF_CLUSTER_AGENT_DIR"] = ""
    say(f"  launchers ({label}, {shape}, {n} tasks{'' if fence else ', fence off'})")
    res = run_launchers(sim, start["namespace"], launcher, min(args.sample, n), work, windows, env)
    res.update(shape=shape, size=n, launcher=label if fence else label + " (fence off)")
    steady, fault = res["steady"], res["fault"]
    say(
        f"    per task: start {res['api_start_per_task']} API request(s), {res['dns_start_per_task']} DNS "
        f"queries; first LIST {res['list']['requests']} request(s), {res['list']['bytes'] / 1e6:.1f} MB; "
        f"steady {steady['per_task_min']} API request(s)/min ({steady['renewals']} watch renewals), "
        f"{steady['dns_per_task_min']} DNS queries/min; fault: fencers {fault['fencer_requests_per_task']}, "
        f"followers {fault['follower_requests_per_task']} request(s) each, pod Failed at {fault.get('failed_s')} s; "
        f"CPU idle {res['cpu_idle_pct']} %"
    )
    return res


def measure_heads(args: argparse.Namespace, store: sim_parts.Store, parts: list, work: Path, charts: dict) -> None:
    """A release's floor and starts, one after the other, each on a new cluster of its own and alone on
    the machine (their figures are seconds); each saved as soon as it is measured."""
    for part in parts:
        t0 = time.time()
        if part.kind == "floor":
            store.save(part, measure_floor(args, work, part.shape, part.tasks, part.gang), time.time() - t0)
            continue
        shape, n, gang = part.shape, part.tasks, part.gang
        chart = "" if part.chart == "this" else f", chart {part.chart}"
        say(f"{shape}, {n} tasks, gang {'on' if gang else 'off'}{chart}: a new simulated cluster of {args.nodes} nodes")
        with live_cluster(work / "cluster", args.nodes) as sim:
            start = start_release(sim, shape, n, gang, chart=charts[part.chart], chart_label=part.chart)
            m = start["marks"]
            etcd = "unread" if start["etcd_db_bytes"] is None else f"{start['etcd_db_bytes'] / 1e6:.0f} MB"
            say(
                f"  all {n} created {m.get('created')}s, bound {m.get('bound')}s, Running {m.get('running')}s; "
                f"{start['requests_total']} API requests; etcd {etcd}"
            )
            store.save(part, start, time.time() - t0)


def let_the_next_start() -> None:
    """A launchers' part is past its busy minutes (START_GATE): the next part may start its cluster."""
    if getattr(_measuring, "gated", False):
        _measuring.gated = False
        START_GATE.release()


def measure_launchers_part(
    args: argparse.Namespace, part: sim_parts.Part, work: Path, launcher: Path, windows: Windows
) -> dict:
    """A launchers' part: a new cluster of its own, its release (this chart, gang off) started there,
    then the launcher's four windows. Run in a thread of its own, beside other parts, holding START_GATE
    (measure_beside takes it) until its window (b) has ended."""
    try:
        say(f"a new simulated cluster of {args.nodes} nodes, its release started first")
        with live_cluster(work / f"cluster-{part.name}", args.nodes) as sim:
            start = start_release(sim, part.shape, part.tasks, gang=False)
            if "stopped" in start["marks"]:
                raise RuntimeError(f"its release did not start: {start['marks']['stopped']}")
            res = measure_launcher(args, sim, start, part.launcher, launcher, work / part.name, windows)
    finally:
        let_the_next_start()  # a part that failed before its window (b) ended
    m = start["marks"]
    res["release_start"] = {"running_s": m.get("running"), "requests_total": start["requests_total"]}
    return res


def measure_beside(
    args: argparse.Namespace, store: sim_parts.Store, runs: list, work: Path, launchers: dict, windows, done
) -> list[str]:
    """The launchers' parts in order, each in a thread of its own as soon as --beside has its slots
    free (Part.slots), its cluster started once no other part is starting (START_GATE); each saved as
    it ends, with the parts measured beside it (any time of its run) under "beside"; `done()` after
    each. The names of the parts that failed."""
    spans: dict[str, list] = {}  # a part's name: [when it began, when it ended (None: running)]
    failed: list[str] = []
    lock = threading.Lock()

    def one(part: sim_parts.Part) -> None:
        _measuring.part = part.name
        START_GATE.acquire()  # its cluster's and release's starts, windows (a) and (b): one part at a time
        _measuring.gated = True
        t0 = time.time()
        spans[part.name] = [t0, None]  # beside others from its cluster's start, not while it waited
        try:
            res = measure_launchers_part(args, part, work, launchers[part.launcher], windows)
        except Exception as e:  # noqa: BLE001 - one part's failure is said and the others go on
            say(f"FAILED: {type(e).__name__}: {e}")
            failed.append(part.name)
            return
        finally:
            spans[part.name][1] = time.time()
        now = time.time()
        spanned = list(spans.items())  # other threads add theirs meanwhile
        res["beside"] = sorted(n for n, (b, e) in spanned if n != part.name and b < now and (e is None or e > t0))
        with lock:
            store.save(part, res, now - t0)
            done()

    threads: list[tuple[sim_parts.Part, threading.Thread]] = []
    pending = list(runs)
    while pending or any(t.is_alive() for _, t in threads):
        used = sum(p.slots for p, t in threads if t.is_alive())
        if pending and used + min(pending[0].slots, args.beside) <= args.beside:
            part = pending.pop(0)
            thread = threading.Thread(target=one, args=(part,), name=part.name, daemon=True)
            thread.start()
            threads.append((part, thread))
            alive = [p.name for p, t in threads if t.is_alive()]
            say_plain(f"{part.name}: its turn ({len(alive)} at once, one starting at a time: {', '.join(alive)})")
            continue
        time.sleep(2)
    return failed


def main() -> None:
    args = parse_args()
    windows = Windows(steady=SMOKE_STEADY_S, smoke=True) if args.smoke else Windows()
    setup = {
        "nodes": args.nodes,
        "node_pods": 32,
        "sample": args.sample,
        "before": args.before,
        "chart_before": args.chart_before,
        "windows": windows.saved(),
        **({"smoke": True} if args.smoke else {}),
    }
    folder = sim_parts.MEASURED if args.out == "sim" else OUT / f"{args.out}-parts"
    store = sim_parts.Store(folder, setup)
    groups = sim_parts.plan(
        args.sizes,
        set(args.shapes.split(",")),
        [] if args.skip_launchers else [x for x in ("before", "after") if x in args.launchers.split(",")],
        args.chart_before,
        args.chart_before_sizes,
    )
    todo = [parts for parts in (store.to_measure(g, args.again) for g in groups) if parts]
    done = sum(len(g) for g in groups) - sum(len(parts) for parts in todo)
    stale = [p.name for parts in todo for p in parts if store.stale(p)]

    def estimate(part: sim_parts.Part) -> float:
        return store.estimate(part, setup["windows"])

    def plan_minutes(heads: list[list[sim_parts.Part]], runs: list[sim_parts.Part]) -> float:
        beside = sim_parts.schedule(runs, estimate, args.beside)
        return sum(estimate(p) for h in heads for p in h) + max((end for *_, end in beside), default=0.0)

    heads, runs = sim_parts.fitting(todo, estimate, float("inf"), args.beside)
    say(
        f"{done} part(s) measured already with today's code ({store.print}), {sum(len(p) for p in todo)} to "
        f"measure (~{plan_minutes(heads, runs) / 60:.1f} h with {args.beside} launchers' part(s) at once: "
        "what each took when last measured, or its limits)"
        + (f"; saved with other code: {', '.join(stale)}" if stale else "")
    )
    if args.plan:
        for head in heads:
            say(f"  alone: {', '.join(p.name for p in head)}: ~{sum(estimate(p) for p in head):.0f} min")
        for part, begin, _ in sim_parts.schedule(runs, estimate, args.beside):
            say(f"  beside others: {part.name}: ~{estimate(part):.0f} min, from ~{begin:.0f} min after the starts")
        return
    work = prepare("tf-cluster-sim-")
    failed: list[str] = []
    try:
        # this checkout's, as it was when the run began
        launchers = {
            "before": launcher_at(args.before, work),
            "after": Path(shutil.copytree(LAUNCHER.parent, work / "launcher-this")) / "launcher.py",
        }
        charts = {"this": CHART, args.chart_before: chart_at(args.chart_before, work)}
        deadline = None if args.minutes is None else time.time() + args.minutes * 60

        def left() -> float:
            return float("inf") if deadline is None else (deadline - time.time()) / 60

        # the floors and starts first, alone on the machine, each group's all or none
        for head in heads:
            fit, _ = sim_parts.fitting([head], estimate, left())
            if not fit:
                say(f"left for a later run: {', '.join(p.name for p in head)} ({max(0.0, left()):.0f} min left)")
                continue
            measure_heads(args, store, head, work, charts)
            save(args.out, store.assembled(groups))
        # then the launchers' parts, --beside of them at once, as many as end in the time left
        _, fit = sim_parts.fitting([[p] for p in runs], estimate, left(), args.beside)
        if len(fit) < len(runs):
            rest = [p.name for p in runs if p not in fit]
            say(f"left for a later run: {', '.join(rest)} ({max(0.0, left()):.0f} min left)")
        failed = measure_beside(
            args, store, fit, work, launchers, windows, lambda: save(args.out, store.assembled(groups))
        )
    finally:
        stop_active()  # a SIGTERM or a crash here: no part's cluster or launcher outlives the run
        shutil.rmtree(work, ignore_errors=True)  # the clusters' folders (GBs of etcd at 4096 tasks)
    result = store.assembled(groups)
    save(args.out, result)
    print_starts(result)
    if result["missing"]:
        say(f"not measured yet ({len(result['missing'])}): {', '.join(result['missing'])}; run it again to go on")
    if failed:
        sys.exit(f"{len(failed)} launchers' part(s) failed (above): {', '.join(failed)}")


def print_starts(result: dict) -> None:
    floors = {(f["shape"], f["tasks"], f.get("gang", False)): f["marks"].get("running") for f in result["floors"]}
    rows = [
        [
            s["shape"],
            s["tasks"],
            "on" if s["gang"] else "off",
            s["helm_install_s"],
            s["marks"].get("created"),
            s["marks"].get("bound"),
            s["marks"].get("running", "stopped"),
            floors.get((s["shape"], s["tasks"], s["gang"]), "-"),
            s["requests_total"],
            round(s["etcd_db_bytes"] / 1e6) if s["etcd_db_bytes"] is not None else "-",
        ]
        for s in result["starts"]
    ]
    print(table(["shape", "tasks", "gang", "helm", "created", "bound", "Running", "floor", "API req", "etcd MB"], rows))


if __name__ == "__main__":
    main()
