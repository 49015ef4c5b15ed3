"""Thousands of tasks, in small: a release of 512 tasks on a simulated cluster (hack/node/sim.py: the
node's own kube-apiserver, kube-controller-manager and kube-scheduler, 64 kwok nodes, the real
CoreDNS with the addon's Corefile), gang scheduled; then the ParameterServer chief's real launcher
waits for all 512 peers through the headless Service's EndpointSlices and resolves each through
CoreDNS once. `make bench-sim` measures 64, 512 and 4096 tasks (docs/benchmarks.md)."""

from __future__ import annotations

import sys
import time

import pytest
from needs import absent

from tf_cluster import CHART, ROOT, helm

sys.path.insert(0, str(ROOT / "hack"))
from node.sim import SimCluster, missing  # noqa: E402

TASKS = 512


@pytest.fixture
def sim(tmp_path):
    why = missing()
    if why:
        absent("the simulated cluster's binaries (the node's and kwok)", why)
    # a loopback address of its own for its CoreDNS: `make bench-sim` may hold another
    with SimCluster(tmp_path / "sim", nodes=64, node_pods=16) as s:  # its own CoreDNS address (free_dns_ip)
        yield s


def test_512_tasks_start_gang_scheduled_and_the_chief_finds_every_peer_from_the_endpointslices(sim, tmp_path):
    from kubernetes import client

    ns = "scale"
    client.CoreV1Api(sim.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    values = helm.Values.of(
        [ROOT / "values-examples" / "parameter-server.yaml"],
        set=[
            f"roles.worker.replicas={TASKS - 3}",
            "roles.ps.replicas=2",
            "scheduling.gang=true",
            "scheduling.singleNode=false",
            "storage.checkpoints.type=emptyDir",
            *(f"roles.{r}.resources.requests.cpu=100m" for r in ("chief", "worker", "ps")),
        ],
    )
    t0 = time.monotonic()
    helm.Helm("4", kubeconfig=sim.kubeconfig, namespace=ns).install("s", values, check=True)
    rows: list[dict] = []
    while time.monotonic() - t0 < 300:
        rows = sim.pod_table(ns)
        if len(rows) == TASKS and all(r["Status"] == "Running" for r in rows):
            break
        time.sleep(1)
    running = sum(r["Status"] == "Running" for r in rows)
    assert running == TASKS, f"{running} of {TASKS} pods Running after 300 s ({len(rows)} created)"
    started = time.monotonic() - t0
    print(f"{TASKS} tasks Running {started:.1f}s after helm install (gang)")
    (group,) = client.CustomObjectsApi(sim.api).list_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", ns, "podgroups"
    )["items"]
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == TASKS
    assert {c["type"]: c["status"] for c in group["status"]["conditions"]}.get("PodGroupInitiallyScheduled") == "True"
    assert sum(j.status.active or 0 for j in client.BatchV1Api(sim.api).list_namespaced_job(ns).items) == TASKS

    (chief,) = (
        client.CoreV1Api(sim.api)
        .list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=chief", _preload_content=False)
        .json()["items"]
    )
    user = f"system:serviceaccount:{ns}:{chief['spec']['serviceAccountName']}"
    dns_before, since = sim.dns_requests(), time.time()
    task = sim.task(chief, CHART / "files" / "launcher.py", [sys.executable, "-c", "print('trained')"], tmp_path)
    out, _ = task.communicate(timeout=120)
    dns = sim.dns_requests() - dns_before
    asked = sim.audit(user, since - 1)
    print(out)
    print(f"the chief: {dns:.0f} DNS queries, {len(asked)} API requests: " + ", ".join(
        sorted({f"{e['verb']} {e['objectRef'].get('resource')}" for e in asked})))  # fmt: skip
    assert task.returncode == 0, out
    assert f"all {TASKS} peer(s) resolve after" in out and "their endpoints watched first" in out, out
    assert "trained" in out
    # a probe (a private-use record type) and one lookup (A and AAAA) a peer, nothing looked up twice
    assert dns <= 3 * TASKS + 8, f"{dns:.0f} DNS queries for {TASKS} peers"
    # the EndpointSlices' LIST and WATCH; the fence's LIST (pages of 250) and WATCH of the release's
    # pods; the self-fence's LIST and WATCH of its own pod (renewed each minute: none in this run)
    verbs = sorted(e["verb"] for e in asked)
    assert verbs.count("watch") <= 3 and len(asked) <= 10, verbs
    assert {e["objectRef"].get("resource") for e in asked} <= {"endpointslices", "pods"}, asked
