"""Print the time from `helm install` to every task Running on a free node, with Kubernetes' gang
(scheduling.gang=true: a PodGroup, the pods join it) and without (false), interleaved runs.
Needs a cluster serving scheduling.k8s.io/v1beta1 PodGroup whose nodes have the trainer image:
the e2e node (`make e2e-up`, then KUBECONFIG=/var/lib/tf-cluster-node/kubeconfig).

.venv/bin/python tests/bench/bench_gang.py [RUNS] [WORKERS]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from kubernetes import client, config

from tf_cluster import ROOT, helm, kube

NS = "bench-gang"


def once(api, h: helm.Helm, gang: bool, workers: int) -> float:
    values = helm.Values.of(
        [ROOT / "values-examples" / "mwms-cpu.yaml"],
        set=[
            f"scheduling.gang={str(gang).lower()}",
            f"roles.worker.replicas={workers}",
            "roles.worker.resources.requests.cpu=100m",
            "roles.worker.resources.requests.memory=256Mi",
            "storage.checkpoints.type=emptyDir",
        ],
    )
    core = client.CoreV1Api(api)
    t0 = time.perf_counter()
    r = h.install("b", values)
    if r.returncode != 0:
        sys.exit(r.stderr)
    while True:
        pods = [p for p in core.list_namespaced_pod(NS, label_selector="app.kubernetes.io/instance=b").items]
        if len(pods) == workers and all(p.status.phase == "Running" for p in pods):
            seconds = time.perf_counter() - t0
            break
        if time.perf_counter() - t0 > 300:
            sys.exit("tasks not Running after 300 s:\n" + kube.diagnostics(api, NS, "b"))
        time.sleep(0.1)
    assert {bool(p.spec.scheduling_group) for p in pods} == {gang}
    h.uninstall("b", wait=True, timeout="3m")
    return seconds


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    api = config.new_client_from_config(os.environ.get("KUBECONFIG", "/var/lib/tf-cluster-node/kubeconfig"))
    if not kube.serves_gang_api(api):
        sys.exit("this cluster does not serve scheduling.k8s.io/v1beta1 PodGroup")
    core = client.CoreV1Api(api)
    if NS not in {n.metadata.name for n in core.list_namespace().items}:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    h = helm.Helm("4", kubeconfig=os.environ.get("KUBECONFIG", "/var/lib/tf-cluster-node/kubeconfig"), namespace=NS)
    times: dict[str, list[float]] = {"gang": [], "no gang": []}
    for i in range(runs):
        for mode in times:
            times[mode].append(once(api, h, mode == "gang", workers))
            print(f"run {i + 1}/{runs} {mode:>8}: {times[mode][-1]:.2f}s", flush=True)
    print(f"\nhelm install -> {workers} tasks Running, {runs} run(s) each, seconds")
    print(f"{'mode':>8} {'median':>7} {'min':>6} {'max':>6}")
    for mode, ts in times.items():
        print(f"{mode:>8} {statistics.median(ts):7.2f} {min(ts):6.2f} {max(ts):6.2f}")
    print(f"gang adds {statistics.median(times['gang']) - statistics.median(times['no gang']):+.2f}s (median)")


if __name__ == "__main__":
    main()
