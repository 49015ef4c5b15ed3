"""Thousands of tasks on a simulated cluster (hack/node/sim.py: the real control plane 1.37, kwok's fake
nodes, the real CoreDNS with the addon's Corefile). Two benchmarks, figures into build/bench/sim.json
(report.py: docs/benchmarks.md and its PNG):

1. **Starts.** A MultiWorkerMirrored release of N workers and a ParameterServer release of N tasks
   (N = 64, 512, 4096), gang on and off, each
   on a new cluster of 256 nodes (32 pods each): time from `helm install` to every pod created,
   bound and Running; the Job's and PodGroup's status; EndpointSlices; the API requests the start
   caused (the API server's apiserver_request_total, less nodes and leases: kwok's heartbeats);
   etcd's size.
2. **What the launchers ask.** In the same clusters (gang off), the real launcher for a sample of
   the release's tasks (up to 32 processes: the leading task and others, each with its pod's own
   environment and service account token, `-- sleep` as its program, resolving through CoreDNS):
   API requests (the API server's audit log of the tasks' service account) and DNS queries
   (CoreDNS' coredns_dns_requests_total) per task at start and per minute afterwards; the same for
   a ParameterServer release (chief, 2 ps, N-3 workers), whose servers follow the leading Job.
   Each with this checkout's launcher and with an older one (--before REV, default 254fea0: the
   launcher before peers were watched and the leader followed by a watch).

    .venv/bin/python tests/bench/bench_sim.py [--sizes 64,512,4096] [--before REV] [--steady 120]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import OUT, chart_at, launcher_at, save, say, table

from tf_cluster import CHART, ROOT, helm

sys.path.insert(0, str(ROOT / "hack"))  # the node harness: its simulated cluster
from node.sim import SimCluster, missing  # noqa: E402

LAUNCHER = CHART / "files" / "launcher.py"
BACKGROUND = {"nodes", "nodes/status", "leases"}  # kwok's heartbeats for its 256 nodes, not the release


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
            **dict(requests_total=None, endpointslices=None, pod_bytes=None, etcd_db_bytes=None),
        }
    curve, marks = [], {}
    last_say = 0.0
    while True:
        sim.check_alive()
        rows = sim.pod_table(ns)
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
            say(f"  {shape} N={n} gang={gang}: {now:.0f}s: {created} created, {bound} bound, {running} Running")
            last_say = now
        stalled = sim.stalled()
        if stalled or now > 1800:
            # Kubernetes could not go on (etcd full): what was reached is the figure, and why it stopped
            marks["stopped"] = stalled or f"{n - running} of {n} pods not Running after 1800 s"
            say(f"  stopped at {now:.0f}s: {marks['stopped']} ({created} created, {bound} bound, {running} Running)")
            break
        time.sleep(0.5 if n <= 1024 else 2.0)  # a table of 4096 pods a poll costs the API server too
    after = sim.apiserver_requests()
    caused = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    caused = {f"{v} {r}": int(c) for (v, r), c in caused.items() if c > 0 and r not in BACKGROUND}
    batch = client.BatchV1Api(sim.api)
    jobs = {
        j.metadata.name: {
            "completions": j.spec.completions,
            "parallelism": j.spec.parallelism,
            "active": j.status.active,
            "ready": j.status.ready,
        }
        for j in batch.list_namespaced_job(ns).items
    }
    groups = []
    if gang:
        sched = client.CustomObjectsApi(sim.api)
        for g in sched.list_namespaced_custom_object("scheduling.k8s.io", "v1beta1", ns, "podgroups")["items"]:
            groups.append(
                {
                    "name": g["metadata"]["name"],
                    "status": g.get("status", {}),
                    "minCount": g["spec"].get("schedulingPolicy", {}).get("gang", {}).get("minCount"),
                }
            )
    slices = client.DiscoveryV1Api(sim.api).list_namespaced_endpoint_slice(ns).items
    pod_bytes = len(json.dumps(core.list_namespaced_pod(ns, limit=1, _preload_content=False).json()["items"][0]))
    return {
        "shape": shape,
        "tasks": n,
        "gang": gang,
        "chart": chart_label,
        "namespace": ns,
        "release": release,
        "helm_install_s": round(installed, 2),
        "marks": marks,
        "curve": curve[:: max(1, len(curve) // 400)],
        "requests": dict(sorted(caused.items(), key=lambda kv: -kv[1])),
        "requests_total": sum(caused.values()),
        "jobs": jobs,
        "podgroups": groups,
        "endpointslices": len(slices),
        "endpoints": sum(len(s.endpoints or []) for s in slices),
        "pod_bytes": pod_bytes,
        "etcd_db_bytes": sim.etcd_db_bytes(),
        "nodes_not_ready": sim.nodes_not_ready(),
    }


# ------------------------------------------------------------------ the launchers' own load


def sample_pods(sim: SimCluster, namespace: str, k: int) -> list[dict]:
    """Up to k of the release's pods: every task of the leading role's index 0, each ps, then workers."""
    from kubernetes import client

    core = client.CoreV1Api(sim.api)
    picked: list[dict] = []
    for role, count in (("chief", 1), ("ps", 2), ("worker", k)):
        sel = f"app.kubernetes.io/component={role}"
        resp = core.list_namespaced_pod(namespace, label_selector=sel, limit=count, _preload_content=False)
        items = json.loads(resp.data)["items"]
        items.sort(
            key=lambda p: int(p["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index", 0))
        )
        picked += items[: max(0, k - len(picked))]
    return picked[:k]


def by_verb(events: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        key = f"{e['verb']} {e['objectRef'].get('resource', '')}"
        out[key] = out.get(key, 0) + 1
    return out


def run_launchers(
    sim: SimCluster,
    namespace: str,
    launcher: Path,
    k: int,
    steady: float,
    workdir: Path,
    env: dict | None = None,
    settle: float = 0.0,
) -> dict:
    """k real launcher processes for the release's tasks, `-- sleep` as their program, each in a
    mount namespace whose /etc/resolv.conf points at the simulated cluster's CoreDNS."""
    pods = sample_pods(sim, namespace, k)
    sa = pods[0]["spec"]["serviceAccountName"]
    user = f"system:serviceaccount:{namespace}:{sa}"
    dns0 = sim.dns_requests()
    lists0 = sim.list_bytes()
    t0 = time.time()
    procs, started, logs = [], {}, {}
    for pod in pods:
        # the program sleeps until well after the steady window: all are stopped together
        program = ["sh", "-c", f"sleep $(( {int(t0 + 600)} - $(date +%s) ))"]
        name = pod["metadata"]["name"]
        p = sim.task(pod, launcher, program, workdir, env)
        procs.append((name, p))
        logs[name] = []

        def read(name=name, p=p):
            for line in p.stdout:
                logs[name].append(line.rstrip())
                if "starting:" in line and name not in started:
                    started[name] = time.time()

        threading.Thread(target=read, daemon=True).start()
    while len(started) < len(procs):
        time.sleep(0.2)
        if any(p.poll() is not None for _, p in procs):
            bad = next(n for n, p in procs if p.poll() is not None)
            raise RuntimeError(f"launcher of {bad} exited early:\n" + "\n".join(logs[bad][-20:]))
        if time.time() - t0 > 600:
            raise RuntimeError(f"{len(procs) - len(started)} launcher(s) not started after 600 s")
    t_started = time.time()
    dns_started, lists_started = sim.dns_requests(), sim.list_bytes()
    say(f"  {len(procs)} launchers started in {t_started - t0:.1f}s; steady window {steady:.0f}s after {settle:.0f}s")
    time.sleep(settle)  # the fencers' first LIST of the release's pods goes on after their program started
    t_start = time.time()
    dns_start, lists_start = sim.dns_requests(), sim.list_bytes()
    time.sleep(steady)
    t_end = time.time()
    sim.check_alive()
    dns_end = sim.dns_requests()
    if dns_end is None or dns_start is None:
        raise RuntimeError(f"CoreDNS' metrics did not answer (logs in {sim.work})")
    peak_mb = []  # each launcher's peak resident memory (the pid is the launcher: unshare and sh exec it)
    for _, p in procs:
        try:
            text = Path(f"/proc/{p.pid}/status").read_text()
            peak_mb.append(round(int(re.search(r"VmHWM:\s+(\d+)", text).group(1)) / 1024, 1))
        except (OSError, AttributeError):
            pass
    for _, p in procs:
        p.terminate()
    for _, p in procs:
        p.wait(30)
    # from t0, not before: the batch measured before this one (the same service account) sends its
    # last requests as it is stopped, a moment before t0 (a server reads the leading Job on SIGTERM)
    at_start = sim.audit(user, t0, t_started)
    settling = sim.audit(user, t_started, t_start)
    steady_events = sim.audit(user, t_start, t_end)
    waits = [
        float(m.group(1))
        for lines in logs.values()
        for line in lines
        for m in [re.search(r"resolve after ([\d.]+)s", line)]
        if m
    ]
    # how many peers each task waited for (its log: "all N peer(s) resolve"; none logged: 0)
    peers = [
        next((int(m.group(1)) for line in lines for m in [re.search(r"all (\d+) peer\(s\) resolve", line)] if m), 0)
        for lines in logs.values()
    ]
    k = len(procs)
    return {
        "tasks": k,
        "start_s": round(t_started - t0, 2),
        "steady_s": round(t_end - t_start, 1),
        "api_start": len(at_start),
        "api_start_per_task": round(len(at_start) / k, 2),
        "api_start_by_verb": by_verb(at_start),
        "api_steady": len(steady_events),
        "api_steady_per_task_min": round(len(steady_events) / k / ((t_end - t_start) / 60), 3),
        "api_steady_by_verb": by_verb(steady_events),
        "dns_start": int(dns_started - dns0),
        "dns_start_per_task": round((dns_started - dns0) / k, 1),
        "settle_s": settle,
        "api_settling_by_verb": by_verb(settling),
        "dns_steady_per_task_min": round((dns_end - dns_start) / k / ((t_end - t_start) / 60), 2),
        "list_bytes_start": int(lists_started - lists0),
        "list_bytes_steady": int(sim.list_bytes() - lists_start),
        "roles": sorted({n.split("-")[-3] for n, _ in procs}),
        "waits": waits,
        "peak_mb": peak_mb,
        "peers": peers,
        "log_sample": {n: lines[:6] for n, lines in list(logs.items())[:3]},
    }


def prepare(prefix: str) -> Path:
    """Before a benchmark's first simulated cluster: SIGTERM ends the run cleanly (the clusters are taken
    down), the cluster's parts are all here (else exit naming what is missing); a new work folder."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped (SIGTERM)"))
    why = missing()
    if why:
        sys.exit(f"the simulated cluster cannot start: {why}")
    return Path(tempfile.mkdtemp(prefix=prefix))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64,512,4096")
    ap.add_argument("--before", default="254fea0", help="the launcher to compare with (a git revision)")
    ap.add_argument("--steady", type=float, default=120.0, help="seconds of the steady window")
    ap.add_argument("--sample", type=int, default=32, help="launcher processes per release")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after the start before the steady window")
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--skip-launchers", action="store_true")
    ap.add_argument("--out", default="sim")
    ap.add_argument("--launchers", default="before,after", help="whose launchers: before, after")
    ap.add_argument(
        "--shapes", default="mwms,mwms-gang,ps,ps-gang", help="which releases: mwms, mwms-gang, ps, ps-gang"
    )
    ap.add_argument("--append", action="store_true", help="keep the saved figures of the sizes not measured now")
    ap.add_argument(
        "--chart-before",
        default="a791f8d",
        help="the chart to compare starts with (a git revision; default: the last one whose pods carried TF_CONFIG)",
    )
    ap.add_argument(
        "--chart-before-sizes", default="4096", help="sizes whose starts are measured with it too ('' none)"
    )
    args = ap.parse_args()
    work = prepare("tf-cluster-sim-")
    before = launcher_at(args.before, work)
    # this checkout's, as it was when the run began
    after = Path(shutil.copytree(LAUNCHER.parent, work / "launcher-this")) / "launcher.py"
    sizes = [int(x) for x in args.sizes.split(",")]
    chart_before_sizes = [int(x) for x in args.chart_before_sizes.split(",") if x]
    chart_before = chart_at(args.chart_before, work)
    result: dict = {
        "nodes": args.nodes,
        "node_pods": 32,
        "before": args.before,
        "chart_before": args.chart_before,
        "starts": [],
        "launchers": [],
    }
    previous = OUT / f"{args.out}.json"
    if args.append and previous.is_file():  # keep the other sizes' figures; these sizes are measured again
        kept = json.loads(previous.read_text())
        again = set(args.shapes.split(","))

        def measured_again(shape: str, gang: bool, n: int) -> bool:
            return n in sizes and f"{shape}{'-gang' if gang else ''}" in again

        result["starts"] = [s for s in kept["starts"] if not measured_again(s["shape"], s["gang"], s["tasks"])]
        result["launchers"] = [
            r
            for r in kept["launchers"]
            if not (measured_again(r["shape"], False, r["size"]) and r["launcher"].split()[0] in args.launchers)
        ]
        if args.launchers != "before,after":  # the starts are kept: only launchers are measured again
            result["starts"] = kept["starts"]
    for n in sizes:
        # each release on a new cluster (one of 4096 tasks filled 1.8 GB of etcd's 2 GB quota while every
        # pod carried its TF_CONFIG; now the cluster is stored once per run)
        for shape, gang in (("mwms", False), ("mwms", True), ("ps", False), ("ps", True)):
            if f"{shape}{'-gang' if gang else ''}" not in args.shapes.split(","):
                continue
            starts_measured = not args.append or args.launchers == "before,after"  # else the saved starts stay
            if n in chart_before_sizes and starts_measured:
                say(f"{shape}, {n} tasks, gang {'on' if gang else 'off'}, chart {args.chart_before}: a new cluster")
                with SimCluster(work / "cluster", nodes=args.nodes) as sim:
                    start = start_release(sim, shape, n, gang, chart=chart_before, chart_label=args.chart_before)
                    result["starts"].append(start)
                    save(args.out, result)
            say(f"{shape}, {n} tasks, gang {'on' if gang else 'off'}: a new simulated cluster of {args.nodes} nodes")
            with SimCluster(work / "cluster", nodes=args.nodes) as sim:
                start = start_release(sim, shape, n, gang)
                if starts_measured:
                    result["starts"].append(start)
                m = start["marks"]
                say(
                    f"  all {n} created {m.get('created')}s, bound {m.get('bound')}s, Running {m.get('running')}s; "
                    f"{start['requests_total']} API requests; etcd {(start['etcd_db_bytes'] or 0) / 1e6:.0f} MB"
                )
                save(args.out, result)
                if gang or args.skip_launchers or "stopped" in start["marks"]:
                    continue
                for label, launcher in (("before", before), ("after", after)):
                    if label not in args.launchers.split(","):
                        continue
                    # the earlier launcher fenced from every task, LISTing all the release's pods every
                    # 10 s: ~500 MB each at 4096 tasks, more than this machine's API server can hold
                    # for 32 tasks; there it runs without the fence (the table says so)
                    fence = not (label == "before" and n > 1024)
                    say(f"  launchers ({label}, {shape}, {n} tasks{'' if fence else ', fence off'})")
                    res = run_launchers(
                        sim, start["namespace"], launcher, min(args.sample, n), args.steady,
                        work / f"l-{shape}-{label}", {} if fence else {"TF_CLUSTER_FENCE_SECONDS": "0"}, args.settle,
                    )  # fmt: skip
                    res.update(shape=shape, size=n, launcher=label if fence else label + " (fence off)")
                    result["launchers"].append(res)
                    save(args.out, result)
                    say(
                        f"    per task: start {res['api_start_per_task']} API request(s), "
                        f"{res['dns_start_per_task']} DNS "
                        f"queries; steady {res['api_steady_per_task_min']} API request(s)/min, "
                        f"{res['dns_steady_per_task_min']} DNS queries/min"
                    )
    save(args.out, result)
    rows = [
        [
            s["tasks"],
            "on" if s["gang"] else "off",
            s["helm_install_s"],
            s["marks"].get("created"),
            s["marks"].get("bound"),
            s["marks"].get("running", "stopped"),
            s["requests_total"],
            round(s["etcd_db_bytes"] / 1e6) if s["etcd_db_bytes"] is not None else "-",
        ]
        for s in result["starts"]
    ]
    print(table(["tasks", "gang", "helm", "created", "bound", "Running", "API req", "etcd MB"], rows))


if __name__ == "__main__":
    main()
