"""Where the node lives and what it is made of: paths, addresses, images, components."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent  # tests/e2e/cluster/node
ROOT = HERE.parents[3]
BUILD_SH = HERE.parent / "build.sh"
# The node runs the newest Kubernetes the chart supports (its gang API: scheduling.k8s.io/v1beta1);
# the kube-apiserver suite (tests/e2e/test_apiserver.py) the oldest (Makefile K8S_API_VERSION).
K8S_VERSION = os.environ.get("NODE_K8S_VERSION", "1.37.2")
MINOR = tuple(int(x) for x in K8S_VERSION.split(".")[:2])
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tf-cluster"  # built binaries
BIN = Path(os.environ.get("TF_CLUSTER_E2E_BIN") or CACHE / f"k8s-{K8S_VERSION}")
STATE = Path(os.environ.get("TF_CLUSTER_NODE_DIR", "/var/lib/tf-cluster-node"))
NODE = "tf-cluster-node"
BRIDGE, POD_CIDR, GATEWAY = "tfc0", "10.244.0.0/24", "10.244.0.1"
BRIDGE_MAC = "02:42:0a:f4:00:01"  # locally administered, from the gateway address; see runtime.ensure_network
SVC_CIDR, API_SVC_IP = "10.96.0.0/16", "10.96.0.1"
ETCD_PORT, ETCD_PEER, API_PORT = 32379, 32380, 6443
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
    "local-path-provisioner",
    "redis",
    "git_http",
    "registry",
    "argocd-repo-server",
    "argocd-application-controller",
]

pki, run, logs = STATE / "pki", STATE / "run", STATE / "logs"
KUBECONFIG = STATE / "kubeconfig"
SOCK = run / "containerd.sock"
CNI_BIN_DIR = STATE / "cni" / "bin"  # Debian's plugins (linked) and cilium-cni


def is_this_node(kubeconfig: str) -> bool:
    """Does `kubeconfig` name the node this harness brings up (not some other cluster)?"""
    return bool(kubeconfig) and Path(kubeconfig).resolve() == KUBECONFIG.resolve()
