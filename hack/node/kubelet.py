"""The kubelet and kube-proxy."""

from __future__ import annotations

import json

from . import ledger
from .config import (
    BASE_IMAGE,
    BIN,
    CLUSTER_POD_CIDR,
    EXTRA_NODE_TAINT,
    GATEWAY,
    HOST_NODE,
    POLICY_ENGINE,
    TRAINER_REPO,
    Node,
    pki,
)
from .pki import kubeconfig, node_certs
from .proc import api_get, ctr, say, start, wait_for
from .runtime import Archives, containerd_config, ensure_network, ensure_pause_image, import_images


def start_containerd(node: Node = HOST_NODE) -> None:
    """The node's network (its CNI bridge) and containerd, with the pause image."""
    ensure_network(node)
    env = {}
    if not node.host and POLICY_ENGINE == "cilium":  # cilium-cni talks to this node's agent
        env["CILIUM_SOCK"] = str(node.state / "cilium" / "cilium.sock")
    netns, mntns = (None, None) if node.host else (node.netns, node.mntns)
    # another node's containerd (its shims, runc) and kubelet in the node's mount namespace, where
    # its client mounts the shared storage (node/storage.py) and the kubelet mounts its pods' volumes
    start(
        node.proc("containerd"),
        ["containerd", "--config", containerd_config(node)],
        env=env,
        netns=netns,
        mntns=mntns,
    )
    wait_for(
        f"containerd of {node.name}",
        lambda: node.sock.exists() and ctr("version", sock=node.sock).returncode == 0,
        60,
        node.proc("containerd"),
    )
    ensure_pause_image(node)


def load_images(images: list[str], node: Node = HOST_NODE, archives: Archives | None = None) -> None:
    """The base image and `images` in the running containerd of `node` (saved from podman's store
    once per `up` when `archives` is shared between nodes), with the names the chart uses."""
    import_images([BASE_IMAGE] + images, node, archives)
    for image in images:  # `tf-cluster-trainer:<tag>` in values means docker.io/library's (as on kind)
        if not image.startswith(TRAINER_REPO):
            continue
        short = "docker.io/library/" + image.split("/")[-1]
        ctr("images", "rm", short, check=False, sock=node.sock)
        ctr("images", "tag", image, short, sock=node.sock)


def up_node(ip: str, images: list[str], node: Node = HOST_NODE) -> None:
    """containerd, the kubelet and kube-proxy of `node` (this host's, or another node's in its
    network namespace, node/nodes.py), at address `ip`. What `up_runtimes` did already is kept."""
    state, netns = node.state, None if node.host else node.netns
    start_containerd(node)
    load_images(images, node)
    client, serving = ("kubelet", "kubelet-serving") if node.host else node_certs(node)
    kcfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{node.sock}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / f"{serving}.crt"),
        "tlsPrivateKeyFile": str(pki / f"{serving}.key"),
        "clusterDomain": "cluster.local",
        "clusterDNS": [GATEWAY],
        "resolvConf": "/etc/resolv.conf",
        "hairpinMode": "hairpin-veth",
        "serializeImagePulls": False,
        "maxPods": 110,
        # A CI disk may be nearly full: evict only when it truly is. Absolute figures, not percents:
        # 1% of a 252 GB disk is 2.5 GB, which a CI machine's build caches can leave it under.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "256Mi",
            "imagefs.available": "256Mi",
            "nodefs.inodesFree": "1%",
        },
        # No image garbage collection (100 turns it off): nothing here can be pulled again (no
        # registry; `node up` imports the images), and the kubelet counts the whole disk, so a disk
        # filled by others made it remove the sandbox ("pause") image and the trainer images
        # mid-run (containerd 1.6 does not pin the sandbox image): every new pod then hung in
        # ContainerCreating ("failed to pull image localhost/tf-cluster/pause:1"). A cold CI run
        # failed that way.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "staticPodPath": str(state / "manifests"),
        "volumePluginDir": str(state / "kubelet-plugins"),
        "shutdownGracePeriod": "0s",
    }
    if not node.host:
        kcfg.update(
            # its pods' cgroups apart from this host's kubelet's (which would remove what it does not know)
            cgroupRoot=f"/{node.netns}",
            podLogsDir=str(state / "pod-logs"),
            registerWithTaints=[{"key": EXTRA_NODE_TAINT, "value": "true", "effect": "NoSchedule"}],
        )
    (state / "manifests").mkdir(parents=True, exist_ok=True)
    (state / "kubelet.yaml").write_text(json.dumps(kcfg, indent=1))
    ledger.mark_pods_start(node)  # its pods' CPU counter as this run found it (make check's table)
    start(
        node.proc("kubelet"),
        [
            BIN / "kubelet",
            f"--config={state / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig(client, node.api, state / 'kubelet.kubeconfig')}",
            f"--hostname-override={node.name}",
            f"--node-ip={ip}",
            f"--root-dir={state / 'kubelet'}",
            f"--cert-dir={state / 'kubelet-pki'}",
            "--v=1",
        ],
        netns=netns,
        mntns=None if node.host else node.mntns,
    )
    wait_for(f"node {node.name} Ready", lambda: node_ready(node.name), 180, node.proc("kubelet"), every=1)
    say(f"node {node.name} Ready")
    start(
        node.proc("kube-proxy"),
        [
            BIN / "kube-proxy",
            f"--kubeconfig={kubeconfig('kube-proxy', node.api, state / 'kube-proxy.kubeconfig')}",
            f"--hostname-override={node.name}",
            f"--cluster-cidr={CLUSTER_POD_CIDR}",
            "--proxy-mode=iptables",
            "--conntrack-max-per-core=0",
            "--bind-address=127.0.0.1",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ],
        netns=netns,
    )


def node_ready(name: str = HOST_NODE.name) -> bool:
    node = api_get(f"/api/v1/nodes/{name}")
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
