"""Where the node lives and what it is made of: paths, addresses, images, components."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent  # hack/node
ROOT = HERE.parents[1]
BUILD_SH = HERE / "build.sh"
# The node runs the newest Kubernetes the chart supports (its gang API: scheduling.k8s.io/v1beta1);
# the kube-apiserver suite (tests/e2e/test_apiserver.py) the oldest (Makefile K8S_API_VERSION).
# Its version is in one file, hack/node/k8s-version, which the Makefile and the build scripts read too.
K8S_VERSION = os.environ.get("NODE_K8S_VERSION") or (HERE / "k8s-version").read_text().strip()
MINOR = tuple(int(x) for x in K8S_VERSION.split(".")[:2])
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tf-cluster"  # built binaries
BIN = Path(os.environ.get("TF_CLUSTER_E2E_BIN") or CACHE / f"k8s-{K8S_VERSION}")
STATE = Path(os.environ.get("TF_CLUSTER_NODE_DIR", "/var/lib/tf-cluster-node"))
NODE = "tf-cluster-node"
BRIDGE, POD_CIDR, GATEWAY = "tfc0", "10.244.0.0/24", "10.244.0.1"
BRIDGE_MAC = "02:42:0a:f4:00:01"  # locally administered, from the gateway address; see runtime.ensure_network
SVC_CIDR, API_SVC_IP = "10.96.0.0/16", "10.96.0.1"
# Every port the harness listens on at a fixed number, by the process that listens (node/ports.py
# checks them at `up`). All below Linux's ephemeral range (32768-60999 by default), from which any
# outgoing connection takes its source port: a fixed listener inside it fails at random
# ("bind: address already in use" on 35000, seen twice in a row). On a machine whose range is
# wider, `up` reserves the ones inside it (net.ipv4.ip_local_reserved_ports) and `down` gives them back.
ETCD_PORT, ETCD_PEER, API_PORT = 12379, 12380, 6443
REDIS_PORT, REPO_PORT, GIT_PORT = 16379, 18081, 19080  # Argo CD's (node/argocd.py)
REPO_METRICS, CONTROLLER_METRICS = 18084, 18082  # also their readiness checks
REGISTRY_PORT = 15000
PACKAGES_PORT = 18090  # the pods' package index (node/standin.py), on the pod bridge's gateway
DNS_HEALTH, DNS_READY = 18080, 18181  # CoreDNS's health and ready plugins (files/Corefile)
STORAGE_PORT = 24007  # glusterd (node/storage.py): GlusterFS's own port
STORAGE_BRICK_PORT = 24008  # its one brick's (glusterfsd), not GlusterFS's 49152+ (inside the range)
FIXED_PORTS = {
    ETCD_PORT: "etcd",
    ETCD_PEER: "etcd",
    API_PORT: "kube-apiserver",
    10248: "kubelet",  # healthz
    10250: "kubelet",
    10249: "kube-proxy",  # metrics (node/kubelet.py)
    10256: "kube-proxy",  # healthz
    10257: "kube-controller-manager",
    10259: "kube-scheduler",
    53: "coredns",  # on the pod bridge's gateway (files/Corefile)
    DNS_HEALTH: "coredns",
    DNS_READY: "coredns",
    9962: "cilium-agent",  # its Prometheus metrics (node/policy.py METRICS_PORT)
    9879: "cilium-agent",  # its agent health endpoint (Cilium's default)
    9890: "cilium-agent",  # gops (Cilium's default)
    4240: "cilium-agent",  # node-to-node health (Cilium's default)
    REDIS_PORT: "redis",
    GIT_PORT: "git_http",
    REGISTRY_PORT: "registry",
    PACKAGES_PORT: "package-index",
    REPO_PORT: "argocd-repo-server",
    REPO_METRICS: "argocd-repo-server",
    CONTROLLER_METRICS: "argocd-application-controller",
    STORAGE_PORT: "glusterd",
    STORAGE_BRICK_PORT: "glusterfsd",  # started by glusterd; node/storage.py records its pid in run/
}
CNI_BIN = next(
    (d for d in ("/usr/lib/cni", "/usr/libexec/cni", "/opt/cni/bin") if Path(d, "bridge").exists()), "/usr/lib/cni"
)
# The NetworkPolicy engine (node/policy.py): Cilium, chained after the bridge; "none" leaves
# policies unenforced (the bridge plugin alone), as a plain kind or minikube cluster does.
POLICY_ENGINE = os.environ.get("TF_CLUSTER_NODE_POLICY", "cilium")
CILIUM_VERSION = os.environ.get("CILIUM_VERSION", "1.20.2")
CILIUM_DIR = Path(os.environ.get("CILIUM_DIR") or CACHE / f"cilium-{CILIUM_VERSION}")
PAUSE_IMAGE = "localhost/tf-cluster/pause:1"
BASE_IMAGE = os.environ.get("TF_CLUSTER_BASE_IMAGE", "localhost/tf-cluster-base:bookworm")
TRAINER_REPO = "localhost/tf-cluster-trainer"
# The chart's default image, TensorFlow's official one, as the harness builds it (node/standin.py).
STANDIN_REPO = "docker.io/tensorflow/tensorflow"
COMPONENTS = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "kube-proxy",
    "cilium-agent",
    "coredns",
    "glusterd",
    "glusterfsd",
    "glusterfs",
    "local-path-provisioner",
    "redis",
    "git_http",
    "registry",
    "package-index",
    "argocd-repo-server",
    "argocd-application-controller",
]

pki, run, logs = STATE / "pki", STATE / "run", STATE / "logs"
# Where the local-path provisioner makes its ReadWriteMany claims, on every node: the GlusterFS
# volume each node mounts there through its own client (node/storage.py)
SHARED = STATE / "local-path"
MOUNT_NS = run / "mntns"  # the other nodes' mount namespaces, each bound to a file here
KUBECONFIG = STATE / "kubeconfig"
SOCK = run / "containerd.sock"
CNI_BIN_DIR = STATE / "cni" / "bin"  # Debian's plugins (linked) and cilium-cni

# Several nodes (node/nodes.py). The first is this host: control plane and a node, as above. Each
# other one is a network namespace with its own containerd, kubelet, kube-proxy and Cilium agent,
# on a host bridge (NODE_BRIDGE, NODE_NET); pods reach pods on other nodes by routes, unmasqueraded.
NODE_COUNT = int(os.environ.get("TF_CLUSTER_NODES", "3"))
CLUSTER_POD_CIDR = "10.244.0.0/16"  # every node's POD_CIDR is a /24 of it
NODE_BRIDGE, NODE_NET_GW = "tfcn0", "10.245.0.1"  # the host's address on the nodes' network
# The other nodes carry this NoSchedule taint: the single-node scenarios stay on the first node,
# the multi-node ones (test_nodes.py) tolerate it.
EXTRA_NODE_TAINT = "tf-cluster.dev/extra-node"


@dataclass(frozen=True)
class Node:
    """Node `index` (1 = this host)."""

    index: int

    @property
    def host(self) -> bool:
        return self.index == 1

    @property
    def name(self) -> str:
        return NODE if self.host else f"{NODE}-{self.index}"

    @property
    def netns(self) -> str:
        return f"tfc-n{self.index}"

    @property
    def ip(self) -> str:
        """Its address on the nodes' network (the host's own is proc.node_ip())."""
        return f"10.245.0.{self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index - 1}.0/24"

    @property
    def gateway(self) -> str:
        return f"10.244.{self.index - 1}.1"

    @property
    def bridge_mac(self) -> str:
        return f"02:42:0a:f4:{self.index - 1:02x}:01"

    @property
    def state(self) -> Path:
        return STATE if self.host else STATE / "nodes" / self.name

    @property
    def run(self) -> Path:
        return self.state / "run"

    @property
    def sock(self) -> Path:
        return self.run / "containerd.sock"

    @property
    def api(self) -> str:
        """The API server as this node's processes reach it."""
        return f"https://127.0.0.1:{API_PORT}" if self.host else f"https://{NODE_NET_GW}:{API_PORT}"

    @property
    def mntns(self) -> Path:
        """The file its mount namespace is bound to (another node's: node/nodes.py ensure_mount_ns)."""
        return MOUNT_NS / self.name

    def proc(self, component: str) -> str:
        """The name of this node's `component` process (pid file, log)."""
        return component if self.host else f"{component}@{self.name}"


HOST_NODE = Node(1)
EXTRA_NODES = [Node(i) for i in range(2, NODE_COUNT + 1)]


def is_this_node(kubeconfig: str) -> bool:
    """Does `kubeconfig` name the node this harness brings up (not some other cluster)?"""
    return bool(kubeconfig) and Path(kubeconfig).resolve() == KUBECONFIG.resolve()


def tf_version() -> str:
    """The TensorFlow version of the default trainer image: the chart's appVersion, its one source."""
    chart = (ROOT / "charts" / "tf-cluster" / "Chart.yaml").read_text()
    m = re.search(r'^appVersion:\s*"?([^"\s]+)"?\s*$', chart, re.M)
    if not m:
        raise RuntimeError("charts/tf-cluster/Chart.yaml has no appVersion")
    return m.group(1)
