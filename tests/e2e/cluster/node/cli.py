"""The verbs: up, status, down, env."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import __doc__ as DOC
from .addons import up_addons
from .argocd import ARGOCD_DIR, REGISTRY_DIR, up_argocd
from .config import API_PORT, BIN, BUILD_SH, COMPONENTS, K8S_VERSION, KUBECONFIG, NODE, STATE, TRAINER_REPO, logs, run
from .control_plane import up_control_plane
from .kubelet import node_ready, up_node
from .pki import ensure_pki, kubeconfig
from .proc import NodeError, ctr, kubectl, node_ip, pid_of, say, sh, stop, wait_for
from .runtime import ctr_images, trainer_images


def up(args) -> int:
    t0 = time.monotonic()
    if os.geteuid() != 0:
        raise NodeError("the node needs root (kubelet, containerd, iptables): run as root")
    say(f"building/checking binaries in {BIN} (cached after the first time)")
    # build.sh writes where this package looks: the same directories, passed down
    paths = {"TF_CLUSTER_E2E_BIN": str(BIN), "ARGOCD_DIR": str(ARGOCD_DIR), "REGISTRY_DIR": str(REGISTRY_DIR)}
    paths["K8S_VERSION"] = K8S_VERSION
    b = subprocess.run(["bash", BUILD_SH], env={**os.environ, **paths})
    if b.returncode != 0:
        raise NodeError("building the node's binaries failed (see the lines above)")
    images = args.image or trainer_images()
    if not images:
        raise NodeError(f"no trainer image in podman's store ({TRAINER_REPO}): run `make image` first")
    for d in (STATE, run, logs):
        d.mkdir(parents=True, exist_ok=True)
    ip = node_ip()
    ensure_pki(ip)
    kubeconfig("admin", f"https://127.0.0.1:{API_PORT}").replace(KUBECONFIG)
    up_control_plane(ip)
    up_node(ip, images)
    up_addons()
    up_argocd()
    wait_for(
        "the default ServiceAccount",
        lambda: kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0,
        60,
    )
    say(f"up in {time.monotonic() - t0:.1f}s: export KUBECONFIG={KUBECONFIG}")
    return 0


def status(args) -> int:
    ok = True
    for name in COMPONENTS:
        pid = pid_of(name)
        ok &= bool(pid)
        print(f"  {name:26} {'running pid ' + str(pid) if pid else 'DOWN'}")
    if pid_of("kube-apiserver"):
        try:
            print(f"  node {NODE:21} {'Ready' if node_ready() else 'NotReady'}")
            ok &= node_ready()
        except Exception as e:  # noqa: BLE001
            print(f"  node {NODE:21} unknown ({e})")
            ok = False
    print(f"  kubeconfig                 {KUBECONFIG}")
    return 0 if ok else 1


def down(args) -> int:
    t0 = time.monotonic()
    for name in ("argocd-application-controller", "argocd-repo-server", "registry", "git_http", "redis"):
        stop(name)
    stop("local-path-provisioner")
    stop("coredns")
    stop("kube-proxy")
    stop("kubelet")
    if pid_of("containerd"):
        # every pod's containers and sandboxes: kill their tasks, then remove them
        for cid in ctr("containers", "list", "-q", check=False).stdout.split():
            ctr("tasks", "kill", "-s", "SIGKILL", cid, check=False)
        time.sleep(1)
        for cid in ctr("containers", "list", "-q", check=False).stdout.split():
            ctr("tasks", "delete", "-f", cid, check=False)
            ctr("containers", "delete", cid, check=False)
        if args.purge:
            for image in ctr_images():
                ctr("images", "rm", image, check=False)
    stop("containerd")
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        stop(name)
    # mounts left by the kubelet and containerd, deepest first
    mounts = [
        line.split()[1]
        for line in Path("/proc/mounts").read_text().splitlines()
        if line.split()[1].startswith(str(STATE))
    ]
    for m in sorted(mounts, key=len, reverse=True):
        sh("umount", "-l", m, check=False)
    for ns in sh("ip", "netns", "list", check=False).stdout.split("\n"):
        if ns.startswith("cni-"):
            sh("ip", "netns", "delete", ns.split()[0], check=False)
    sh("iptables-save", check=False)  # kube-proxy's chains are flushed by `kube-proxy --cleanup`
    if (BIN / "kube-proxy").exists():
        sh(BIN / "kube-proxy", "--cleanup", check=False)
    keep = {"pki", "containerd"} if not args.purge else {"pki"}
    for child in STATE.iterdir() if STATE.exists() else []:
        if child.name not in keep:
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
    if args.purge:
        shutil.rmtree(STATE / "containerd", ignore_errors=True)
    say(
        f"down in {time.monotonic() - t0:.1f}s"
        + (" (images purged)" if args.purge else " (images kept in containerd for the next up)")
    )
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="node", description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    u = sub.add_parser("up")
    u.add_argument(
        "--image",
        action="append",
        help="trainer image(s) to import (default: every tf-cluster-trainer CPU tag in podman's store)",
    )
    u.set_defaults(func=up)
    sub.add_parser("status").set_defaults(func=status)
    d = sub.add_parser("down")
    d.add_argument("--purge", action="store_true", help="also remove the images imported into containerd")
    d.set_defaults(func=down)
    sub.add_parser("env").set_defaults(func=lambda a: print(f"export KUBECONFIG={KUBECONFIG}") or 0)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except NodeError as e:
        print(f"[node] error: {e}", file=sys.stderr)
        return 1
