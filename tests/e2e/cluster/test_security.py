"""Isolation on the real node, checked by pods themselves.

TensorFlow's gRPC port is unauthenticated, so the chart's NetworkPolicy admits it only from pods
of the release, and TensorBoard only from what `networkPolicy.tensorboardFrom` allows. The node
`make e2e` brings up enforces NetworkPolicies (Cilium, chained after the bridge: node/policy.py);
on any other cluster these checks hold only if its network plugin enforces them, and a failure
says so. Probes are pods: one outside the release in the release's namespace, one in another
namespace, one allowed to see TensorBoard, and a task of the release itself. From inside a
running task: its user, its read-only root, and what its service-account token may do.

All probes run against one ParameterServer release kept running (a long run, removed at the
end): every other scenario of this suite shows runs completing under the same enforcement.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import yaml
from test_cluster import EX, KUBECONFIG, epochs, install, say, tf_cluster_of, wait_for_log
from test_faults import node_config, node_proc, on_the_harness_node

from tf_cluster import kube

ON_THE_HARNESS_NODE = on_the_harness_node()
KUBECTL = node_config.ROOT / ".tools" / "bin" / "kubectl"
RELEASE = "sec"
VIEWER = {"tensorboard-viewer": "yes"}  # the label networkPolicy.tensorboardFrom admits below

# Resolve a name, then open a TCP connection: "open", "timeout" (dropped: what a NetworkPolicy
# engine does), "refused" (nothing listens), or the error.
PROBE = r"""
import json, socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    addr = socket.gethostbyname(host)
except OSError as e:
    print(json.dumps({"dns": False, "tcp": None})); raise SystemExit
try:
    socket.create_connection((addr, port), timeout=5).close(); tcp = "open"
except socket.timeout:
    tcp = "timeout"
except ConnectionRefusedError:
    tcp = "refused"
except OSError as e:
    tcp = type(e).__name__
print(json.dumps({"dns": True, "tcp": tcp}))
"""

INSIDE = r"""
import errno, json, os, socket, ssl, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read().strip() if os.path.exists(sa + "/token") else None
# without the account's files (the training container), the API server's own CA is not there either:
# what is asked is whether the API lets an anonymous caller in, not whose certificate it shows
ctx = ssl.create_default_context(cafile=sa + "/ca.crt") if token else ssl._create_unverified_context()
api = "https://%s:%s" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
ns, leader = os.environ["TF_CLUSTER_NAMESPACE"], os.environ["TF_CLUSTER_LEADER_JOB"]
def status(path, method="GET"):
    auth = {"Authorization": "Bearer " + token} if token else {}
    req = urllib.request.Request(api + path, method=method, headers=auth)
    try:
        return urllib.request.urlopen(req, context=ctx, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
jobs = "/apis/batch/v1/namespaces/%s/jobs" % ns
try:
    open("/probe", "w")
    rootfs = "writable"
except OSError as e:
    rootfs = errno.errorcode[e.errno]
cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "rootfs": rootfs, "token": token is not None,
    "get leader": status(jobs + "/" + leader),
    "watch leader": status(jobs + "?fieldSelector=metadata.name%3D" + leader + "&watch=1&timeoutSeconds=1"),
    "delete leader": status(jobs + "/" + leader, "DELETE"),
    "list jobs": status(jobs),
    "get own job": status(jobs + "/" + os.environ["HOSTNAME"].rsplit("-", 1)[0]),
    "list pods": status("/api/v1/namespaces/%s/pods" % ns),
    "get own pod": status("/api/v1/namespaces/%s/pods/%s" % (ns, os.environ["HOSTNAME"])),
    "delete own pod": status("/api/v1/namespaces/%s/pods/%s" % (ns, os.environ["HOSTNAME"]), "DELETE"),
    "list secrets": status("/api/v1/namespaces/%s/secrets" % ns),
    "patch another release's pod": status("/api/v1/namespaces/%s/pods/another-release-0/status" % ns, "PATCH"),
    "leader in default": status("/apis/batch/v1/namespaces/default/jobs/" + leader),
    "peers resolve": all(socket.gethostbyname(a.rsplit(":", 1)[0]) for t in cluster.values() for a in t),
}))
"""


@dataclass
class Run:
    ns: str
    other: str  # another namespace
    worker: str  # a running task of the release
    ps: str  # host:port of the ps task (TF_CONFIG)
    tensorboard: str  # host:port of the release's TensorBoard Service


def exec_in(ns: str, pod: str, script: str, *args: str, container: str | None = None) -> dict:
    argv = [KUBECTL, "--kubeconfig", KUBECONFIG, "exec", "-n", ns, pod]
    argv += ["-c", container] if container else []
    r = subprocess.run(
        [str(a) for a in [*argv, "--", "python3", "-c", script, *args]], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, f"kubectl exec {pod}: {r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def probe_pod(api, ns: str, name: str, image: str, labels: dict | None = None, node: str | None = None) -> None:
    """A pod outside the release that only sleeps (restricted Pod Security, like the chart's), on
    `node` if given (test_nodes.py: probes across nodes)."""
    from kubernetes import client

    spec = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"probe": name, **(labels or {})}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "terminationGracePeriodSeconds": 0,
            **({"nodeName": node} if node else {}),
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "infinity"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                }
            ],
        },
    }
    client.CoreV1Api(api).create_namespaced_pod(ns, spec)


def running(api, ns: str, name: str) -> bool:
    from kubernetes import client

    pod = client.CoreV1Api(api).read_namespaced_pod(name, ns)
    return pod.status.phase == "Running" and all(c.ready for c in pod.status.container_statuses or [])


def wait_until(check, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(1)


@pytest.fixture(scope="module")
def run(kube_cluster, tmp_path_factory):
    from kubernetes import client
    from pytest_helm_charts.k8s.namespace import ensure_namespace_exists

    api = kube.client_for(KUBECONFIG)
    core = client.CoreV1Api(api)
    digest = hashlib.sha256(str(time.time()).encode()).hexdigest()[:5]
    ns, other = f"e2e-security-{digest}", f"e2e-security-other-{digest}"
    for name in (ns, other):
        ensure_namespace_exists(kube_cluster.kube_client, name)
    values = tmp_path_factory.mktemp("security") / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "storage": {"logs": {"type": "pvc", "size": "1Gi"}},
                "tensorboard": {"enabled": True, "resources": {"requests": {"cpu": "10m", "memory": "128Mi"}}},
                "networkPolicy": {"tensorboardFrom": [{"podSelector": {"matchLabels": VIEWER}}]},
            }
        )
    )
    try:
        install(ns, RELEASE, EX / "parameter-server.yaml", values, sets=epochs(100000, 60))  # runs until removed
        worker = wait_for_log(api, ns, RELEASE, "-worker-", "0", r"serving worker:0")
        pod = core.read_namespaced_pod(worker, ns)
        (tf,) = [c for c in pod.spec.containers if c.name == "tensorflow"]
        image = tf.image
        ps_host, ps_port = tf_cluster_of(core, ns, tf)["ps"][0].rsplit(":", 1)
        for name, where, labels in (("outsider", ns, None), ("viewer", ns, VIEWER), ("stranger", other, VIEWER)):
            probe_pod(api, where, name, image, labels)
        wait_for_log(api, ns, RELEASE, "-ps-", "0", r"serving ps:0")
        for name, where in (("outsider", ns), ("viewer", ns), ("stranger", other)):
            wait_until(lambda where=where, name=name: running(api, where, name), f"probe pod {where}/{name} running")
        tb = f"{RELEASE}-tf-cluster-tensorboard"
        wait_until(
            lambda: any(
                running(api, ns, p.metadata.name)
                for p in core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=tensorboard").items
            ),
            "TensorBoard ready",
        )
        # full names: the other namespace's pods search their own namespace
        yield Run(ns, other, worker, f"{ps_host}.{ns}.svc.cluster.local:{ps_port}", f"{tb}.{ns}.svc.cluster.local:6006")
    finally:
        for name in (ns, other):
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
            core.delete_namespace(name)


@pytest.mark.needs(
    "the NetworkPolicy engine (Cilium's agent on the e2e node)",
    not (ON_THE_HARNESS_NODE and not node_proc.pid_of("cilium-agent")),
    "the node was brought up with TF_CLUSTER_NODE_POLICY=none, or its agent exited: nothing would enforce the policy",
)
def test_only_pods_of_the_release_reach_the_tf_port_and_tensorboard_admits_what_values_allow(run):
    """Every probe at once (a few seconds), while the ps, the workers and TensorBoard serve."""
    ps_host, ps_port = run.ps.rsplit(":", 1)
    tb_host, tb_port = run.tensorboard.rsplit(":", 1)
    probes = {
        "release task -> ps TF port": (run.ns, run.worker, "tensorflow", ps_host, ps_port),
        "outside pod, same namespace -> ps TF port": (run.ns, "outsider", None, ps_host, ps_port),
        "outside pod, other namespace -> ps TF port": (run.other, "stranger", None, ps_host, ps_port),
        "viewer-labelled pod -> TensorBoard": (run.ns, "viewer", None, tb_host, tb_port),
        "unlabelled pod -> TensorBoard": (run.ns, "outsider", None, tb_host, tb_port),
        "viewer-labelled pod, other namespace -> TensorBoard": (run.other, "stranger", None, tb_host, tb_port),
    }
    with ThreadPoolExecutor(len(probes)) as pool:
        futures = {k: pool.submit(exec_in, n, pod, PROBE, h, p, container=c) for k, (n, pod, c, h, p) in probes.items()}
        seen = {k: f.result() for k, f in futures.items()}
    for what, result in seen.items():
        say(f"{what}: {result}")
    assert all(r["dns"] for r in seen.values()), f"cluster DNS must answer every probe: {seen}"
    got = {k: r["tcp"] for k, r in seen.items()}
    expected = {
        "release task -> ps TF port": "open",
        "outside pod, same namespace -> ps TF port": "timeout",
        "outside pod, other namespace -> ps TF port": "timeout",
        "viewer-labelled pod -> TensorBoard": "open",  # an outside pod reaches what the policy admits
        "unlabelled pod -> TensorBoard": "timeout",
        "viewer-labelled pod, other namespace -> TensorBoard": "timeout",  # a podSelector peer is namespace-bound
    }
    assert got == expected, f"got {got}\nexpected {expected}\n" + (
        "" if ON_THE_HARNESS_NODE else "(does this cluster's network plugin enforce NetworkPolicies?)"
    )


def test_a_task_runs_as_non_root_on_a_read_only_root_without_a_token_its_agent_reads_only_the_leader(run):
    """Checked by a running ParameterServer worker itself. Its training container (the user's
    program): the uid/gid the values set, a read-only root filesystem, no service-account token, and
    the API refuses what it can send (anonymous), another release's pod included. Its tf-cluster-agent
    sidecar (which watches the chief's Job and the peers for it) holds the token, whose RBAC lets it
    get and watch that one Job and list pods (peers' pods, the lost-node fence), nothing else, here
    or in another namespace; cluster DNS answers in both."""
    seen = exec_in(run.ns, run.worker, INSIDE, container="tensorflow")
    say(f"inside {run.worker}'s training container: {seen}")
    assert (seen["uid"], seen["gid"], seen["rootfs"], seen["token"]) == (1000, 1000, "EROFS", False)
    asked = {k: v for k, v in seen.items() if k not in ("uid", "gid", "rootfs", "token", "peers resolve")}
    assert set(asked.values()) <= {401, 403}, asked  # anonymous: refused, whatever it asks
    assert seen["peers resolve"] is True

    agent = exec_in(run.ns, run.worker, INSIDE, container="tf-cluster-agent")
    say(f"inside {run.worker}'s tf-cluster-agent: {agent}")
    assert (agent["uid"], agent["gid"], agent["rootfs"], agent["token"]) == (1000, 1000, "EROFS", True)
    assert agent["get leader"] == 200
    assert agent["watch leader"] == 200  # a watch naming it (fieldSelector metadata.name) is a request for it
    assert agent["list pods"] == 200  # peers' pods, and nodeLoss.fence: pods stranded on a lost node
    # with nodeLoss.fence the release's Role may patch pods/status (the fence marks a stranded pod
    # Failed): one account for all its pods, so every agent's token may, and no training container's
    allowed = ("uid", "gid", "rootfs", "token", "get leader", "watch leader", "list pods", "peers resolve")
    denied = {k: v for k, v in agent.items() if k not in allowed and k != "patch another release's pod"}
    assert set(denied.values()) == {403}, denied
    assert agent["peers resolve"] is True
