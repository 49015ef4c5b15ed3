"""The kubelet and kube-proxy."""

from __future__ import annotations

import json

from .config import API_PORT, BASE_IMAGE, BIN, GATEWAY, NODE, POD_CIDR, SOCK, STATE, pki
from .pki import kubeconfig
from .proc import api_get, ctr, say, start, wait_for
from .runtime import containerd_config, ensure_network, ensure_pause_image, import_images


def up_node(ip: str, images: list[str]) -> None:
    ensure_network()
    start("containerd", ["containerd", "--config", containerd_config()])
    wait_for("containerd", lambda: SOCK.exists() and ctr("version").returncode == 0, 60, "containerd")
    ensure_pause_image()
    import_images([BASE_IMAGE] + images)
    for image in images:  # the chart's default repository is `tf-cluster-trainer` (docker.io/library on kind)
        short = "docker.io/library/" + image.split("/")[-1]
        ctr("images", "rm", short, check=False)
        ctr("images", "tag", image, short)
    kcfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{SOCK}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "clusterDomain": "cluster.local",
        "clusterDNS": [GATEWAY],
        "resolvConf": "/etc/resolv.conf",
        "hairpinMode": "hairpin-veth",
        "serializeImagePulls": False,
        "maxPods": 110,
        # a CI disk may be nearly full: evict only when it truly is
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "staticPodPath": str(STATE / "manifests"),
        "volumePluginDir": str(STATE / "kubelet-plugins"),
        "shutdownGracePeriod": "0s",
    }
    (STATE / "manifests").mkdir(exist_ok=True)
    (STATE / "kubelet.yaml").write_text(json.dumps(kcfg, indent=1))
    start(
        "kubelet",
        [
            BIN / "kubelet",
            f"--config={STATE / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig('kubelet', f'https://127.0.0.1:{API_PORT}')}",
            f"--hostname-override={NODE}",
            f"--node-ip={ip}",
            f"--root-dir={STATE / 'kubelet'}",
            f"--cert-dir={STATE / 'kubelet-pki'}",
            "--v=1",
        ],
    )
    wait_for(f"node {NODE} Ready", lambda: node_ready(), 180, "kubelet", every=1)
    say(f"node {NODE} Ready")
    start(
        "kube-proxy",
        [
            BIN / "kube-proxy",
            f"--kubeconfig={kubeconfig('kube-proxy', f'https://127.0.0.1:{API_PORT}')}",
            f"--hostname-override={NODE}",
            f"--cluster-cidr={POD_CIDR}",
            "--proxy-mode=iptables",
            "--conntrack-max-per-core=0",
            "--bind-address=127.0.0.1",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ],
    )


def node_ready() -> bool:
    node = api_get(f"/api/v1/nodes/{NODE}")
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
