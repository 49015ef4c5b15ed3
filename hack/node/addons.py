"""Cluster DNS (CoreDNS) and storage (local-path-provisioner)."""

from __future__ import annotations

import urllib.request

from .config import BASE_IMAGE, BIN, DNS_HEALTH, DNS_READY, GATEWAY, KUBECONFIG, NODE, SHARED, STATE
from .proc import kubectl, start, template, wait_for


def up_addons() -> None:
    corefile = STATE / "Corefile"
    corefile.write_text(
        template("Corefile", GATEWAY=GATEWAY, KUBECONFIG=KUBECONFIG, HEALTH=DNS_HEALTH, READY=DNS_READY)
    )
    start("coredns", [BIN / "coredns", "-conf", corefile])
    wait_for(
        "CoreDNS ready",
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{DNS_READY}/ready", timeout=2).status == 200,
        60,
        "coredns",
    )
    # Rancher's local-path-provisioner: kind's default storage, here in its shared mode on the
    # GlusterFS volume every node mounts at SHARED (node/storage.py). Its helper pods run the base image.
    kubectl("apply", "-f", "-", input=template("local-path.yaml", PATH=SHARED, HELPER=BASE_IMAGE, NODE=NODE))
    start(
        "local-path-provisioner",
        [
            BIN / "local-path-provisioner",
            "--debug",
            "start",
            "--kubeconfig",
            KUBECONFIG,
            "--namespace",
            "local-path-storage",
            "--service-account-name",
            "local-path-provisioner",
            "--provisioner-name",
            "rancher.io/local-path",
            "--helper-image",
            BASE_IMAGE,
        ],
    )
