"""The Kubernetes Events the launchers record during a start of thousands of tasks, on the simulated
cluster (hack/node/sim.py: the real control plane 1.37, kwok's nodes, the real CoreDNS). Figures into
build/bench/sim-events.json (report.py: docs/benchmarks.md).

Every task of a release records its lifecycle moments as Events on its own pod (waiting for peers,
a fenced peer, stopped with its leader, a restarted coordinator): one Event object per reason, its
count and message updated in place at most once every 30 s (charts/tf-cluster/files/
tf_cluster_launcher/events.py). The moment every task meets is the start: it waits for its peers,
and at thousands of tasks that wait lasts as long as the control plane takes to create the last
pod. So the measurement is a start, gang off (with the gang, pods are bound all at once and the
waits are short):

- a release of N tasks on a new cluster of 256 kwok nodes: MultiWorkerMirrored (N workers, each
  waiting for the leader alone), ParameterServer (chief, 2 ps, N-3 workers: the chief waits for
  every task, the others for none) and `custom` (N workers, each waiting for every peer: the most
  Events a start can cause);
- the real launcher (its `tf-cluster-agent` beside it, as in the pod) for the first SAMPLE pods
  that turn Running, started as soon as each is Running, as the kubelet would start it; so each
  waits for the peers created after it;
- the window, fixed here before any run: from the first sampled launcher's start until every pod
  of the release is Running, every sampled launcher has started its program, and then TAIL
  seconds more;
- counted: the Event requests of the release's service account in that window (the API server's
  audit log: `create` and `patch` of events), the Event objects the launchers left (their count
  fields: how many moments each aggregates), and each sampled task's wait.

The bound it is checked against (the docs state it): per task and reason, one `create`, then at
most one `patch` per period P (the launcher's Events.period: 30 s, or N/10 s in a release of N >
300 tasks, so that all its tasks together update at most 10 Events a second), so a task that
waited W seconds for its peers sends at most 1 + W/P Event requests for that wait.

    .venv/bin/python tests/bench/bench_sim_events.py [--sizes 4096] [--shapes mwms,ps,custom] [--append]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import threading
import time
from pathlib import Path

from bench_sim import LAUNCHER, prepare, start_release
from benchlib import OUT, save, say, table
from sim_audit import by_verb

from tf_cluster import ROOT

sys.path.insert(0, str(ROOT / "hack"))  # the node harness: its simulated cluster
from node.sim import SimCluster  # noqa: E402

SAMPLE = 32  # launchers per release
TAIL = 60.0  # seconds of the window after the last pod is Running and every sampled program started
NODES = 256


def launcher_events():
    """The launcher's own Events class (its period for a release of N tasks is the bound's)."""
    sys.path.insert(0, str(LAUNCHER.parent))
    from tf_cluster_launcher.events import Events

    return Events()


class EarlyLaunchers:
    """The real launcher of the first `k` pods of a namespace to turn Running, each started as soon
    as its pod is Running (a thread polling the pods, as a kubelet starts a container)."""

    def __init__(self, sim: SimCluster, namespace: str, launcher: Path, k: int, workdir: Path, until: float):
        self.sim, self.namespace, self.launcher, self.k, self.workdir = sim, namespace, launcher, k, workdir
        self.until = until  # the programs sleep until then; stopped earlier by stop()
        self.procs: list[tuple[str, object]] = []
        self.launched: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.logs: dict[str, list[str]] = {}
        self.error: str | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.sim.api)
        try:
            while len(self.procs) < self.k and not self.done.is_set():
                try:
                    resp = core.list_namespaced_pod(
                        self.namespace,
                        field_selector="status.phase=Running",
                        limit=self.k * 2,
                        _preload_content=False,
                    )
                    pods = json.loads(resp.data)["items"]
                except client.ApiException as e:
                    if e.status != 404:  # the namespace not created yet
                        raise
                    pods = []
                for pod in pods:
                    name = pod["metadata"]["name"]
                    if name in self.launched or len(self.procs) >= self.k or not pod["status"].get("podIP"):
                        continue
                    self.start(pod)
                time.sleep(0.5)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.error = f"{type(e).__name__}: {e}"

    def start(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        # exec: the program is the one `sleep` (dash runs `sh -c "sleep ..."` as two processes, and a
        # launcher SIGKILLed would leave the `sleep` behind)
        program = ["sh", "-c", f"exec sleep $(( {int(self.until)} - $(date +%s) ))"]
        p = self.sim.task(pod, self.launcher, program, self.workdir)
        self.launched[name] = time.time()
        self.logs[name] = []
        self.procs.append((name, p))

        def read() -> None:
            for line in p.stdout:
                self.logs[name].append(line.rstrip())
                if "starting:" in line and name not in self.started:
                    self.started[name] = time.time()

        threading.Thread(target=read, daemon=True).start()

    def stop(self) -> None:
        self.done.set()
        for _, p in self.procs:
            p.terminate()
        for _, p in self.procs:
            p.wait(30)


def measure(sim: SimCluster, shape: str, n: int, workdir: Path) -> dict:
    from kubernetes import client

    ns = f"sim-{shape}-{n}-nogang"
    early = EarlyLaunchers(sim, ns, LAUNCHER, min(SAMPLE, n), workdir, until=time.time() + 3600)
    early.thread.start()
    start = start_release(sim, shape, n, gang=False)
    if "running" not in start["marks"]:
        early.stop()
        raise RuntimeError(f"the release did not start: {start['marks'].get('stopped')}")
    deadline = time.time() + 600
    while len(early.started) < len(early.procs) or len(early.procs) < early.k:
        if early.error:
            early.stop()
            raise RuntimeError(f"sampling the pods failed: {early.error}")
        bad = next((name for name, p in early.procs if p.poll() is not None), None)
        if bad:
            early.stop()
            raise RuntimeError(f"launcher of {bad} exited early:\n" + "\n".join(early.logs[bad][-20:]))
        if time.time() > deadline:
            early.stop()
            raise RuntimeError(f"{len(early.procs) - len(early.started)} launcher(s) not started after 600 s")
        time.sleep(0.5)
    say(f"  every pod Running and all {len(early.procs)} sampled programs started; {TAIL:.0f} s more")
    time.sleep(TAIL)
    t0, t_end = min(early.launched.values()), time.time()
    sim.check_alive()
    early.stop()
    pod0 = client.CoreV1Api(sim.api).read_namespaced_pod(early.procs[0][0], ns)
    user = f"system:serviceaccount:{ns}:{pod0.spec.service_account_name}"
    requests = sim.audit(user, t0, t_end)
    verbs = by_verb(requests)
    writes = verbs.get("create events", 0) + verbs.get("patch events", 0)
    resp = client.CoreV1Api(sim.api).list_namespaced_event(ns, _preload_content=False)
    events = [
        e for e in json.loads(resp.data)["items"] if e.get("source", {}).get("component") == "tf-cluster-launcher"
    ]
    by_reason: dict[str, dict] = {}
    for e in events:
        r = by_reason.setdefault(e["reason"], {"objects": 0, "moments": 0})
        r["objects"] += 1
        r["moments"] += e.get("count") or 1
    waits = {  # each sampled task's peer wait, from its log ("all N peer(s) resolve after X s")
        name: float(m.group(1))
        for name, lines in early.logs.items()
        for line in lines
        for m in [re.search(r"resolve after ([\d.]+)s", line)]
        if m
    }
    k = len(early.procs)
    every = launcher_events().period(n)
    bound = sum(1 + math.floor(w / every) for w in waits.values())
    return {
        "shape": shape,
        "tasks": n,
        "sampled": k,
        "window_s": round(t_end - t0, 1),
        "tail_s": TAIL,
        "period_s": every,
        "all_running_s": start["marks"]["running"],
        "release_requests_total": start["requests_total"],
        "waits": sorted(round(w, 1) for w in waits.values()),
        "waits_logged": len(waits),
        "event_requests": writes,
        "event_requests_per_task": round(writes / k, 2),
        "event_requests_bound": bound,
        "event_requests_bound_per_task": round(bound / k, 2),
        "requests_by_verb": verbs,
        "event_objects": len(events),
        "event_objects_per_task": round(len(events) / k, 2),
        "events_by_reason": by_reason,
        "event_bytes_per_task": round(sum(len(json.dumps(e)) for e in events) / k),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4096")
    ap.add_argument("--shapes", default="mwms,ps,custom", help="which releases: mwms, ps, custom")
    ap.add_argument("--out", default="sim-events")
    ap.add_argument(
        "--append", action="store_true", help="keep the saved runs of the sizes and shapes not measured now"
    )
    args = ap.parse_args()
    work = prepare("tf-cluster-sim-events-")
    events = launcher_events()
    result: dict = {
        **dict(nodes=NODES, sample=SAMPLE, tail_s=TAIL),
        **dict(every_s=events.EVERY, release_rate=events.RELEASE_RATE, runs=[]),
    }
    sizes, shapes = [int(x) for x in args.sizes.split(",")], args.shapes.split(",")
    previous = OUT / f"{args.out}.json"
    if args.append and previous.is_file():
        kept = json.loads(previous.read_text())["runs"]
        result["runs"] = [r for r in kept if not (r["tasks"] in sizes and r["shape"] in shapes)]
    for n in sizes:
        for shape in shapes:
            say(f"{shape}, {n} tasks, gang off, {SAMPLE} launchers from their pod's start: a new simulated cluster")
            with SimCluster(work / "cluster", nodes=NODES) as sim:
                run = measure(sim, shape, n, work / f"l-{shape}-{n}")
            result["runs"].append(run)
            save(args.out, result)
            say(
                f"  per task: {run['event_requests_per_task']} Event request(s) (bound "
                f"{run['event_requests_bound_per_task']}), {run['event_objects_per_task']} Event object(s); "
                f"waits {run['waits'][0] if run['waits'] else '-'}-{run['waits'][-1] if run['waits'] else '-'} s"
            )
            shutil.rmtree(work / f"l-{shape}-{n}", ignore_errors=True)
    rows = [
        [
            r["shape"],
            r["tasks"],
            r["sampled"],
            max(r["waits"] or [0]),
            r["event_requests_per_task"],
            r["event_requests_bound_per_task"],
            r["event_objects_per_task"],
        ]
        for r in result["runs"]
    ]
    print(table(["release", "tasks", "sampled", "longest wait s", "Event req/task", "bound", "objects/task"], rows))


if __name__ == "__main__":
    main()
