"""On the real node: seconds from `helm install` to the first training step, broken down, for
MultiWorkerMirrored and ParameterServer, beside the floor (the same program in one bare pod, and in
as many bare pods as the release has, none of them a cluster); then steps/s under a CPU limit of 1
and 2 with the chart's thread settings and with TensorFlow's defaults (`threads.fromCpuLimit:
false`), and the same under run-local inside a cgroup CPU quota.

Needs a cluster whose nodes have the trainer image: the e2e node (`make e2e-up`). `make bench`
brings it up. The clock of this machine is the node's, so the program's wall-clock marks, the pod
log timestamps and this script's times compare directly.

.venv/bin/python tests/bench/bench_node.py [--kubeconfig FILE] [--runs N] [--only first-step|threads|dns]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import PROGRAM, launcher_at, marks, median, save, say, table
from kubernetes import client

from tf_cluster import CHART, ROOT, helm, kube, manifests
from tf_cluster.values import script_values

NS = "tf-cluster-bench"
CHART_UNDER_TEST = CHART  # --launcher-from REV: a copy whose files/launcher.py is that revision's
RELEASE = "bench"
PEERS = "peer(s) resolve after"
STAGES = ("install returned", "scheduled", "container running", "peers resolved", "program started", "TF imported",
          "strategy built", "first step")  # fmt: skip
POD = {  # the chart's pod for a task here: small requests (one 2-core node), a 1-CPU limit
    "resources.requests.cpu": "100m",
    "resources.requests.memory": "256Mi",
    "resources.limits.cpu": "1",
    "resources.limits.memory": "2Gi",
}
SHAPES = {
    # strategy: (values, program args, pods)
    "multiWorkerMirrored": (
        {"strategy": "multiWorkerMirrored", "roles.worker.replicas": "2"}, ["--strategy", "mwms"], 2,
    ),
    "parameterServer": (
        {"strategy": "parameterServer", "roles.chief.replicas": "1", "roles.worker.replicas": "1",
         "roles.ps.replicas": "1"},
        ["--strategy", "ps"], 3,
    ),
}  # fmt: skip


class PodTimes:
    """When each pod of the namespace was first seen bound to the node and with its container
    running: a poller (5 per second) beside the install, as the kubelet reports it to the API."""

    def __init__(self, core, ns: str):
        self.core, self.ns = core, ns
        self.scheduled: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            for p in self.core.list_namespaced_pod(self.ns).items:
                name = p.metadata.name
                if p.spec.node_name and name not in self.scheduled:
                    self.scheduled[name] = now
                states = [s.state for s in p.status.container_statuses or []]
                if states and any(s.running or s.terminated for s in states) and name not in self.running:
                    self.running[name] = now
            time.sleep(0.2)

    def done(self) -> None:
        self.stop.set()
        self.thread.join()


def pod_marks(core, ns: str, pod) -> dict[str, float]:
    """A pod's stage times: the program's BENCH marks and the launcher's `peers resolve` line."""
    text = core.read_namespaced_pod_log(pod.metadata.name, ns, timestamps=True)
    program = marks(text)
    found = {name: m["t"] for name, m in program.items()}
    if "done" in program:
        found["steps_per_s"] = program["done"]["steps_per_s"]
    for line in text.splitlines():
        if PEERS in line:
            found["peers"] = kube.kubelet_time(line.split(" ", 1)[0])
            found["peer_wait"] = float(line.split(PEERS)[1].split()[0].rstrip("s"))
    return found


def breakdown(t0: float, t_installed: float, times: PodTimes, per_pod: dict[str, dict], leader: str) -> dict:
    """Seconds from t0 to each stage: the last pod to reach it (the cluster is only as ready as its
    last task), the strategy and first step as the leader (the chief, else worker 0) saw them."""

    def last(values) -> float:
        seen = [v for v in values if v]
        return max(seen) - t0 if seen else float("nan")

    def last_mark(key: str) -> float:
        return last(m.get(key) for m in per_pod.values())

    lead = per_pod[leader]
    return {
        "install returned": t_installed - t0,
        "scheduled": last(times.scheduled.get(p) for p in per_pod),
        "container running": last(times.running.get(p) for p in per_pod),
        "peers resolved": last_mark("peers"),
        "program started": last_mark("start"),
        "TF imported": last_mark("imported"),
        "strategy built": lead.get("strategy", float("nan")) - t0,
        "first step": lead.get("first_step", float("nan")) - t0,
    }


def wait_empty(core, ns: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(ns).items:
        if time.monotonic() > deadline:
            sys.exit(f"pods of {ns} still there after {timeout}s; see kubectl -n {ns} get pods")
        time.sleep(1)


def chart_values(
    shape: str, program_args: list[str], extra: dict[str, str] | None = None, env: list[dict] | None = None
) -> helm.Values:
    sets, _, _ = SHAPES[shape]
    roles = ["worker"] + (["chief", "ps"] if shape == "parameterServer" else [])
    pod = [f"roles.{r}.{k}={v}" for r in roles for k, v in POD.items()]
    plain = [f"{k}={v}" for k, v in {**sets, **(extra or {})}.items()]
    values = helm.Values.of([], set=plain + pod + ["tests.enabled=false"], set_json=[f"env={json.dumps(env or [])}"])
    return values.plus(script_values(PROGRAM, program_args))


def run_release(api, h: helm.Helm, values: helm.Values, leader_prefix: str) -> dict:
    core = client.CoreV1Api(api)
    times = PodTimes(core, NS)
    t0 = time.time()
    # a new run's names (run.suffix), as a real new run has: the same names again within CoreDNS'
    # negative TTL would find the previous run's teardown lookups (its tasks asking for peers
    # already gone) still cached as NXDOMAIN, a wait no launcher of the new run can prevent
    values = values.plus(helm.Values.of(set=[f"run.suffix=r{secrets.token_hex(3)}"]))
    r = h.install(RELEASE, values, chart=CHART_UNDER_TEST)
    t_installed = time.time()
    if r.returncode != 0:
        times.done()
        sys.exit(f"helm install failed:\n{r.stderr}")
    snap = kube.wait_for_jobs(api, NS, RELEASE, timeout=600, say=lambda m: None)
    times.done()
    states = snap.states()
    if set(states.values()) != {"Complete"}:
        sys.exit(f"the release did not complete: {states}\n{kube.diagnostics(api, NS, RELEASE)}")
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(NS).items}
    per_pod = {name: pod_marks(core, NS, p) for name, p in pods.items()}
    leader = next(n for n in sorted(per_pod) if leader_prefix in n)
    result = breakdown(t0, t_installed, times, per_pod, leader)
    result["steps/s"] = per_pod[leader].get("steps_per_s", float("nan"))
    result["longest peer wait"] = max((m.get("peer_wait", 0.0) for m in per_pod.values()), default=0.0)
    h.uninstall(RELEASE, wait=True, timeout="3m")
    wait_empty(core, NS)
    return result


def bare_pods(api, image: str, n: int, program_args: list[str], cpu_limit: str = "1") -> dict:
    """The floor: the program started directly in n bare pods (no Job, no launcher, no TF_CONFIG)."""
    core = client.CoreV1Api(api)
    cm = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="bench-program"), data={PROGRAM.name: PROGRAM.read_text()}
    )
    try:
        core.create_namespaced_config_map(NS, cm)
    except client.ApiException as e:
        if e.status != 409:
            raise
    times = PodTimes(core, NS)
    t0 = time.time()
    names = [f"floor-{i}" for i in range(n)]
    for name in names:
        core.create_namespaced_pod(NS, bare_pod(name, image, program_args, cpu_limit))
    t_created = time.time()
    deadline = time.monotonic() + 600
    while True:
        phases = [core.read_namespaced_pod(name, NS).status.phase for name in names]
        if all(p in ("Succeeded", "Failed") for p in phases):
            break
        if time.monotonic() > deadline:
            sys.exit(f"bare pods did not finish in 600s: {phases}")
        time.sleep(0.5)
    times.done()
    if set(phases) != {"Succeeded"}:
        logs = "\n".join(core.read_namespaced_pod_log(n, NS, tail_lines=20) for n in names)
        sys.exit(f"bare pods failed: {phases}\n{logs}")
    per_pod = {name: pod_marks(core, NS, core.read_namespaced_pod(name, NS)) for name in names}
    # the floor's "strategy" and "first step" are the last pod's: n independent programs
    last = max(names, key=lambda n: per_pod[n].get("first_step", 0))
    result = breakdown(t0, t_created, times, per_pod, last)
    result["steps/s"] = per_pod[last].get("steps_per_s", float("nan"))
    for name in names:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    wait_empty(core, NS)
    return result


def bare_pod(name: str, image: str, program_args: list[str], cpu_limit: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app.kubernetes.io/name": "tf-cluster-bench-floor"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            security_context=client.V1PodSecurityContext(run_as_user=1000, run_as_group=1000, run_as_non_root=True),
            containers=[
                client.V1Container(
                    name="tensorflow",
                    image=image,
                    image_pull_policy="IfNotPresent",
                    command=["python3", f"/opt/bench/{PROGRAM.name}", *program_args],
                    resources=client.V1ResourceRequirements(
                        requests={"cpu": POD["resources.requests.cpu"], "memory": POD["resources.requests.memory"]},
                        limits={"cpu": cpu_limit, "memory": POD["resources.limits.memory"]},
                    ),
                    volume_mounts=[
                        client.V1VolumeMount(name="program", mount_path="/opt/bench", read_only=True),
                        client.V1VolumeMount(name="tmp", mount_path="/tmp"),
                    ],
                )
            ],
            volumes=[
                client.V1Volume(name="program", config_map=client.V1ConfigMapVolumeSource(name="bench-program")),
                client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource()),
            ],
        ),
    )


def trainer_image(h: helm.Helm) -> str:
    docs = helm.parse(h.template(RELEASE, chart_values("multiWorkerMirrored", [])))
    job = next(d for d in docs if d["kind"] == "Job")
    return job["spec"]["template"]["spec"]["containers"][0]["image"]


def first_step(api, h: helm.Helm, runs: int, shapes: list[str] | None = None) -> dict:
    image = trainer_image(h)
    rows: dict[str, list[dict]] = {}
    chosen = {k: v for k, v in SHAPES.items() if not shapes or k in shapes}
    for i in range(runs):
        for shape, (_, program_args, _pods) in chosen.items():
            say(f"run {i + 1}/{runs}: {shape}, helm install to first step")
            rows.setdefault(shape, []).append(
                run_release(
                    api, h, chart_values(shape, program_args), "chief" if shape == "parameterServer" else "worker"
                )
            )
            say(f"  first step after {rows[shape][-1]['first step']:.1f}s")
        for n in sorted({1, *(n for _, _, n in chosen.values())} if not shapes else {n for _, _, n in chosen.values()}):
            key = f"floor: {n} bare pod(s)"
            say(f"run {i + 1}/{runs}: {key}")
            rows.setdefault(key, []).append(bare_pods(api, image, n, ["--strategy", "mwms"]))
            say(f"  first step after {rows[key][-1]['first step']:.1f}s")
    extra = ("steps/s", "longest peer wait")
    medians = {k: {s: median([r.get(s, 0.0) for r in runs_]) for s in (*STAGES, *extra)} for k, runs_ in rows.items()}
    print(f"\nhelm install (or pod create) to first step, seconds, median of {runs}")
    print(table(["run", *STAGES], [[k, *(m[s] for s in STAGES)] for k, m in medians.items()]))
    within = {}
    for shape, (_, _, n) in chosen.items():
        floors = [r["first step"] for r in rows[f"floor: {n} bare pod(s)"]]
        floor = median(floors)
        starts = [r["first step"] for r in rows[shape]]
        within[shape] = {"floor": floor, "starts": starts, "within 5 s": sum(t <= floor + 5 for t in starts)}
        print(
            f"{shape}: first step within 5 s of its {n}-pod floor ({floor:.1f}s) in "
            f"{within[shape]['within 5 s']} of {len(starts)} starts: " + ", ".join(f"{t:.1f}" for t in starts)
        )
    return {"runs": runs, "stages": list(STAGES), "median": medians, "all": rows, "within 5 s of floor": within}


THREAD_ARGS = ["--strategy", "mwms", "--width", "1024", "--batch", "256", "--steps", "100"]
SIXTEEN = [{"name": n, "value": "16"} for n in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")]
THREADINGS = {  # name: (threads.fromCpuLimit, env) — the third is what TF's defaults are on a 16-core node
    "chart threads": (True, []),
    "TF defaults": (False, []),
    "TF sized for 16 cores": (False, SIXTEEN),
}


def threads(api, h: helm.Helm, runs: int) -> dict:
    """One task (no TF_CONFIG: MWMS alone) under a CPU limit of 1 and 2: threads from the limit, TF's
    defaults (this node's 2 cores), and the pools TF would make on a 16-core node."""
    results: dict[str, list[float]] = {}
    for where in ("node", "run-local"):
        for i in range(runs):
            for limit in ("1", "2"):
                for name, (from_limit, env) in THREADINGS.items():
                    key = f"{where}, {'limit' if where == 'node' else 'quota'} {limit}, {name}"
                    say(f"run {i + 1}/{runs}: {key}")
                    if where == "node":
                        extra = {"roles.worker.replicas": "1", "roles.worker.resources.limits.cpu": limit,
                                 "threads.fromCpuLimit": str(from_limit).lower()}  # fmt: skip
                        values = chart_values("multiWorkerMirrored", THREAD_ARGS, extra, env)
                        steps = run_release(api, h, values, "worker")["steps/s"]
                    else:
                        steps = local_steps(limit, from_limit, env)
                    results.setdefault(key, []).append(steps)
                    say(f"  {steps:.2f} steps/s")
    medians = {k: median(v) for k, v in results.items()}
    print(f"\nsteps/s of one task (Dense 1024x1024, batch 256), median of {runs}")
    print(table(["where, CPU, threads", "steps/s"], [[k, v] for k, v in medians.items()]))
    return {"runs": runs, "threadings": list(THREADINGS), "median": medians, "all": results}


CGROUP = Path("/sys/fs/cgroup/cpu")


def local_steps(limit: str, chart_threads: bool, env: list[dict]) -> float:
    """run-local of the same one-task release inside a cgroup (v1 `cpu` or v2) with a CPU quota of `limit`."""
    quota = int(limit) * 100000
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    group = Path("/sys/fs/cgroup/tf-cluster-bench") if v2 else CGROUP / "tf-cluster-bench"
    group.mkdir(exist_ok=True)
    if v2:
        (group / "cpu.max").write_text(f"{quota} 100000")
    else:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(quota))
    with tempfile.TemporaryDirectory() as workdir:
        argv = [str(ROOT / ".venv" / "bin" / "tf-cluster"), "run-local", "--quiet", "--workdir", workdir]
        argv += ["--script", str(PROGRAM), "--set", "roles.worker.replicas=1"]
        argv += ["--set", f"roles.worker.resources.limits.cpu={limit}"]
        argv += ["--set", f"threads.fromCpuLimit={str(chart_threads).lower()}", "--set-json", f"env={json.dumps(env)}"]
        argv += ["--", *THREAD_ARGS]
        enter = f'echo $$ > {group / "cgroup.procs"} && exec "$@"'
        r = subprocess.run(["sh", "-c", enter, "sh", *argv], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"run-local failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        text = "".join(p.read_text() for p in (Path(workdir) / "logs").glob("*.log"))
    return marks(text)["done"]["steps_per_s"]


NODE_DIR = Path(os.environ.get("TF_CLUSTER_NODE_DIR", "/var/lib/tf-cluster-node"))
COREFILE, COREDNS_LOG = NODE_DIR / "Corefile", NODE_DIR / "logs" / "coredns.log"
ADDON_DEFAULT = "cache 30"  # the Corefile of Kubernetes' CoreDNS addon (kubeadm): kubernetes ttl 30, cache 30
DNS = {
    "this node (kubernetes ttl 5, cache 5)": lambda text: text,
    "addon default (ttl 30, cache 30)": lambda text: text.replace("ttl 5", "ttl 30").replace("cache 5", ADDON_DEFAULT),
    "addon default + disable denial cluster.local": lambda text: text.replace("ttl 5", "ttl 30").replace(
        "cache 5", ADDON_DEFAULT + " {\n        disable denial cluster.local\n    }"
    ),
}


def use_corefile(text: str) -> None:
    """Write the e2e node's Corefile and wait for CoreDNS' reload plugin to run it."""
    before = COREDNS_LOG.read_text().count("Reloading complete")
    if COREFILE.read_text() == text:
        return
    COREFILE.write_text(text)
    deadline = time.monotonic() + 60
    while COREDNS_LOG.read_text().count("Reloading complete") == before:
        if time.monotonic() > deadline:
            sys.exit(f"CoreDNS did not reload {COREFILE} within 60s; see {COREDNS_LOG}")
        time.sleep(0.5)


def ask(server: str, name: str, qtype: int) -> int:
    """One DNS query (RFC 1035, over UDP) to `server`; returns the response code (3 = NXDOMAIN)."""
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split("."))
    packet = struct.pack(">HHHHHH", 0x7F11, 0x0100, 1, 0, 0, 0) + question + b"\0" + struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(packet, (server, 53))
        return sock.recv(4096)[3] & 0xF


def prime_negative_cache(h: helm.Helm, values: helm.Values) -> int:
    """Ask the node's CoreDNS for every task's name (A and AAAA, the first name a pod's resolver
    tries) before the release exists: what a task does when it looks a peer up before the peer's
    pod has an address. Returns how many answers were NXDOMAIN."""
    server = next(line.split()[1] for line in COREFILE.read_text().splitlines() if line.strip().startswith("bind"))
    names = [f"{host}.{NS}.svc.cluster.local" for host in task_hosts(helm.parse(h.template(RELEASE, values)))]
    return sum(ask(server, name, qtype) == 3 for name in names for qtype in (1, 28))


def task_hosts(docs: list[dict]) -> list[str]:
    """Every host named in the rendered pods' TF_CONFIG clusters, sorted."""
    clusters = [pod.tf_config["cluster"] for pod in manifests.pods(docs, namespace=NS) if pod.tf_config]
    return sorted({a.rsplit(":", 1)[0] for cluster in clusters for addrs in cluster.values() for a in addrs})


def dns(api, h: helm.Helm, runs: int) -> dict:
    """ParameterServer install to first step under three cluster DNS settings: a task that asks for a
    peer before the peer's pod has an address gets NXDOMAIN, and CoreDNS serves that answer from its
    cache until it expires, however soon the address appears. Whether a task asks that early is a race
    (seen in some runs, not others); each run here makes it certain by asking first."""
    original = COREFILE.read_text()
    rows: dict[str, list[dict]] = {}
    _, program_args, _ = SHAPES["parameterServer"]
    try:
        for i in range(runs):
            for name, variant in DNS.items():
                use_corefile(variant(original))
                values = chart_values("parameterServer", program_args)
                primed = prime_negative_cache(h, values)
                say(f"run {i + 1}/{runs}: parameterServer, cluster DNS {name} ({primed} NXDOMAIN answers asked first)")
                rows.setdefault(name, []).append(run_release(api, h, values, "chief"))
                r = rows[name][-1]
                say(f"  first step after {r['first step']:.1f}s (longest peer wait {r['longest peer wait']:.1f}s)")
    finally:
        use_corefile(original)
    keys = ("peers resolved", "first step", "longest peer wait")
    medians = {k: {s: median([r[s] for r in v]) for s in keys} for k, v in rows.items()}
    print(f"\nParameterServer install to first step by cluster DNS setting, seconds, median of {runs}")
    print(table(["cluster DNS", *keys], [[k, *(m[s] for s in keys)] for k, m in medians.items()]))
    return {"runs": runs, "median": medians, "all": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", "/var/lib/tf-cluster-node/kubeconfig"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--only", choices=("first-step", "threads", "dns"))
    p.add_argument("--shape", action="append", choices=sorted(SHAPES), help="first-step: only these (and their floor)")
    p.add_argument(
        "--corefile",
        choices=("node", "addon"),
        default="node",
        help="first-step under this node's Corefile (ttl 5) or the CoreDNS addon's default (ttl 30, cache 30)",
    )
    p.add_argument(
        "--launcher-from",
        metavar="REV",
        help="first-step with the chart's launcher as of this git revision (a before/after comparison)",
    )
    args = p.parse_args()
    if args.launcher_from:
        global CHART_UNDER_TEST
        CHART_UNDER_TEST = Path(tempfile.mkdtemp()) / "tf-cluster"
        shutil.copytree(CHART, CHART_UNDER_TEST)
        old = launcher_at(args.launcher_from, CHART_UNDER_TEST.parent)
        shutil.rmtree(CHART_UNDER_TEST / "files")
        old.parent.replace(CHART_UNDER_TEST / "files")
        say(f"the chart with the launcher of {args.launcher_from}: {CHART_UNDER_TEST}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still restores CoreDNS, uninstalls
    if not Path(args.kubeconfig).is_file():
        sys.exit(f"no kubeconfig at {args.kubeconfig}: bring the e2e node up (make e2e-up) or pass --kubeconfig")
    api = kube.client_for(args.kubeconfig)
    core = client.CoreV1Api(api)
    if NS in [n.metadata.name for n in core.list_namespace().items]:
        kube.delete_namespace(api, NS)
        while NS in [n.metadata.name for n in core.list_namespace().items]:
            time.sleep(1)
    kube.ensure_namespace(api, NS)
    h = helm.Helm("4", kubeconfig=args.kubeconfig, namespace=NS)
    try:
        if args.only in (None, "first-step"):
            original = COREFILE.read_text() if COREFILE.is_file() else ""
            try:
                if args.corefile == "addon":
                    use_corefile(DNS["addon default (ttl 30, cache 30)"](original))
                result = first_step(api, h, args.runs, args.shape)
            finally:
                if args.corefile == "addon":
                    use_corefile(original)
            suffix = f"-launcher-{args.launcher_from}" if args.launcher_from else ""
            if args.corefile == "node" and not suffix:
                save("first-step", result)
            else:  # report.py's optional section reads these
                save(("first-step" if args.corefile == "node" else "first-step-addon-dns") + suffix, result)
        if args.only in (None, "threads"):
            save("threads", threads(api, h, args.runs))
        if args.only in (None, "dns"):
            if "reload" in (COREFILE.read_text() if COREFILE.is_file() else ""):
                save("dns", dns(api, h, args.runs))
            else:
                say(f"cluster DNS settings not measured: they need the e2e node's CoreDNS ({COREFILE}, with reload)")
    finally:
        h.uninstall(RELEASE)
        kube.delete_namespace(api, NS)


if __name__ == "__main__":
    main()
