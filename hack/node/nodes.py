"""The other nodes: each a network namespace on this host with its own containerd, kubelet,
kube-proxy and Cilium agent (config.Node), joined to the control plane on the first node.

What makes them separate nodes and not only separate processes: their own network stack
(a veth on the host bridge NODE_BRIDGE, 10.245.0.<n>; their own pod bridge and pod CIDR
10.244.<n-1>.0/24; their own iptables, so their own kube-proxy rules and Cilium datapath),
their own container runtime and image store, their own kubelet root, pod logs and cgroup
root (/tfc-n<n>). Pods reach pods on other nodes by plain routes (as flannel's host-gw or
Cilium's native routing do), unmasqueraded, so NetworkPolicies see the real source pod.
They share this host's kernel, CPUs and filesystem; a mount namespace of each node's own
(config.Node.mntns), where its containerd and kubelet run, holds its own mount of the shared
storage: a GlusterFS volume its client reaches over the node's link (node/storage.py), where the
`local-path` provisioner's shared mode makes ReadWriteMany claims.

The faults a test injects (node/cli.py `node kill|partition|heal|start`):
  kill       its link goes down and every process of the node (kubelet, containerd, kube-proxy,
             the agent, every container) is SIGKILLed at once: a machine that lost power
             (nothing answers, not even a TCP reset).
  partition  its link to the others and the control plane goes down; everything on it keeps
             running (a network partition: its pods live on, unseen).
  heal       the link comes back.
  start      the node's processes start again (a rebooted machine: its containers are gone).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from . import storage
from .config import API_PORT, EXTRA_NODES, HOST_NODE, MOUNT_NS, NODE_BRIDGE, NODE_NET_GW, POLICY_ENGINE, Node, logs, run
from .kubelet import load_images, start_containerd, up_node
from .proc import NodeError, ctr, mount_table, pid_of, say, sh, stop
from .runtime import Archives

COMPONENTS = ("containerd", "kubelet", "kube-proxy", "cilium-agent", "glusterfs")


def by_name(name: str) -> Node:
    for node in EXTRA_NODES:
        if name in (node.name, str(node.index)):
            return node
    raise NodeError(f"no node {name!r}: the other nodes are {', '.join(n.name for n in EXTRA_NODES) or 'none'}")


def host_link(node: Node) -> str:
    return f"tfcn{node.index}h"


def ensure_links() -> None:
    """The nodes' network: the host bridge, each node's namespace and veth, the routes between pod CIDRs."""
    if not EXTRA_NODES:
        return
    if sh("ip", "link", "show", NODE_BRIDGE, check=False).returncode != 0:
        sh("ip", "link", "add", NODE_BRIDGE, "type", "bridge")
    if NODE_NET_GW not in sh("ip", "-4", "addr", "show", NODE_BRIDGE).stdout:
        sh("ip", "addr", "add", f"{NODE_NET_GW}/24", "dev", NODE_BRIDGE)
    sh("ip", "link", "set", NODE_BRIDGE, "up")
    for node in EXTRA_NODES:
        if node.netns not in sh("ip", "netns", "list").stdout.split():
            sh("ip", "netns", "add", node.netns)
        paired = sh("ip", "-n", node.netns, "link", "show", "eth0", check=False).returncode == 0
        if not paired and sh("ip", "link", "show", host_link(node), check=False).returncode == 0:
            # a veth left from the node's last namespace, which the kernel tears down after `down`
            # (seen under load: the new namespace had no eth0): delete it, make a new pair
            sh("ip", "link", "delete", host_link(node), check=False)
        if sh("ip", "link", "show", host_link(node), check=False).returncode != 0:
            sh("ip", "link", "add", host_link(node), "type", "veth", "peer", "name", f"tfcn{node.index}p")
            sh("ip", "link", "set", f"tfcn{node.index}p", "netns", node.netns)
            sh("ip", "-n", node.netns, "link", "set", f"tfcn{node.index}p", "name", "eth0")
        sh("ip", "link", "set", host_link(node), "master", NODE_BRIDGE, "up")
        ip = ["ip", "-n", node.netns]
        sh(*ip, "link", "set", "lo", "up")
        if node.ip not in sh(*ip, "-4", "addr", "show", "eth0").stdout:
            sh(*ip, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        sh(*ip, "link", "set", "eth0", "up")
        sh(*ip, "route", "replace", "default", "via", NODE_NET_GW)
        sh("ip", "route", "replace", node.pod_cidr, "via", node.ip)  # the host to this node's pods
        for other in EXTRA_NODES:  # this node to the other extra nodes' pods (the host's: the default route)
            if other != node:
                sh(*ip, "route", "replace", other.pod_cidr, "via", other.ip)


def ensure_cgroups(node: Node) -> None:
    """The node's cgroup root in every hierarchy (the kubelet refuses a cgroupRoot that is missing)."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        if not (hierarchy / "cgroup.procs").exists():
            continue
        d = hierarchy / node.netns
        d.mkdir(exist_ok=True)
        for f in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset starts empty
            if (d / f).exists() and not (d / f).read_text().strip():
                (d / f).write_text((hierarchy / f).read_text())


def mount_points() -> dict[str, str]:
    """This host's mount points and the filesystem type on top at each."""
    return dict(mount_table())


def ensure_mount_ns(node: Node) -> None:
    """The node's mount namespace, bound to node.mntns so that it outlives its processes (a killed
    node's is found again by `start`). Made with propagation unchanged: this host's private mounts
    are copies there (its mount of the shared storage is the node's own), and its shared ones
    (/run/netns, where containerd binds its pods' network namespaces) stay shared both ways."""
    points = mount_points()
    if str(MOUNT_NS) not in points:  # a namespace's file is bound under a private mount only
        MOUNT_NS.mkdir(parents=True, exist_ok=True)
        sh("mount", "--bind", MOUNT_NS, MOUNT_NS)
        sh("mount", "--make-private", MOUNT_NS)
    if points.get(str(node.mntns)) == "nsfs":
        return
    node.mntns.touch()
    sh("unshare", f"--mount={node.mntns}", "--propagation", "unchanged", "true")


def release_mount_ns(node: Node) -> None:
    """At `down`, once the node's processes are gone: its namespace (and every mount in it) goes."""
    if mount_points().get(str(node.mntns)) == "nsfs":
        sh("umount", node.mntns, check=False)
    node.mntns.unlink(missing_ok=True)


def prepare(node: Node) -> None:
    """What a node's containerd needs first: its directories, its cgroup root, its mount namespace."""
    for d in (node.state, node.run):
        d.mkdir(parents=True, exist_ok=True)
    ensure_cgroups(node)
    ensure_mount_ns(node)


def up_runtimes(images: list[str], extra_images: list[str]) -> None:
    """Every node's containerd with its images, the nodes side by side: each image is saved from
    podman's store once and imported into the three stores at once (one after another, these
    imports took 178 s of a cold `up`'s 198 s)."""
    from concurrent.futures import ThreadPoolExecutor

    t = time.monotonic()
    start_containerd(HOST_NODE)  # first: the other nodes copy its pause image
    ensure_links()
    for node in EXTRA_NODES:  # one after another: their iptables rules and the CNI plugin links
        prepare(node)
        start_containerd(node)
    # (the first node's notebook image first: the other nodes' trainer image is saved while it
    # imports, and the trainer's import there then finds most of its layers; measured, from empty
    # stores, 113 s, and 134 s with the trainer image first)
    images = sorted(images, key=lambda i: "notebook" not in i)
    archives = Archives()
    try:
        with ThreadPoolExecutor(max_workers=1 + len(EXTRA_NODES)) as pool:
            jobs = [pool.submit(load_images, images, HOST_NODE, archives)]
            jobs += [pool.submit(load_images, extra_images, node, archives) for node in EXTRA_NODES]
            for job in jobs:
                job.result()
    finally:
        archives.remove()
    say(f"images in every node's containerd after {time.monotonic() - t:.1f}s")


def up_extra_nodes(images: list[str], only: Node | None = None) -> None:
    from .policy import up_policy_engine

    ensure_links()
    for node in [only] if only else EXTRA_NODES:
        t = time.monotonic()
        prepare(node)
        storage.mount(node)
        up_node(node.ip, images, node)
        if POLICY_ENGINE == "cilium":
            up_policy_engine(node)
        say(f"node {node.name} up in {time.monotonic() - t:.1f}s")


def pids(node: Node) -> list[int]:
    """Every process of the node: its components and every container process under its cgroup root."""
    found = {pid for c in COMPONENTS if (pid := pid_of(node.proc(c)))}
    for hierarchy in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/unified")):
        root = hierarchy / node.netns
        if root.is_dir():
            for procs in root.rglob("cgroup.procs"):
                found.update(int(x) for x in procs.read_text().split())
    # the containers' shims (containerd's children, outside the pods' cgroups)
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmd and str(node.sock).encode() in cmd:
                found.add(int(proc.name))
    return sorted(found)


def kill(node: Node) -> int:
    """Cut the node's link and SIGKILL every process of it (a machine losing power). Returns how many."""
    if sh("ip", "link", "show", host_link(node), check=False).returncode == 0:  # none: a half-made node
        partition(node, cut=True)
    victims = pids(node)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for c in COMPONENTS:
        (run / f"{node.proc(c)}.pid").unlink(missing_ok=True)
    say(f"node {node.name} killed ({len(victims)} processes)")
    return len(victims)


def partition(node: Node, cut: bool) -> None:
    """Cut the node off from every other node and the control plane (or join it back)."""
    sh("ip", "link", "set", host_link(node), "down" if cut else "up")
    say(f"node {node.name} {'cut off' if cut else 'joined back'}")


def isolate(node: Node, cut: bool) -> None:
    """Cut the node off from the control plane only (or join it back): its kubelet, its agents and
    its pods' launchers no longer reach the API server, while its pods still reach their peers on
    the other nodes and the shared storage (a broken control-plane link, a flapping kubelet)."""
    for source in (node.ip, node.pod_cidr):  # its kubelet and agents; its pods (masqueraded or not)
        # both ways: what they send the API server, and what it sends them (watch events, replies)
        for rule in (
            ["INPUT", "-s", source, "-p", "tcp", "--dport", str(API_PORT)],
            ["OUTPUT", "-d", source, "-p", "tcp", "--sport", str(API_PORT)],
        ):
            rule += ["-j", "DROP", "-m", "comment", "--comment", f"tf-cluster-node isolate {node.name}"]
            while sh("iptables", "-C", *rule, check=False).returncode == 0:  # heal: every copy
                sh("iptables", "-D", *rule)
            if cut:
                sh("iptables", "-I", *rule)
    what = "cut off from the control plane (its peers and storage still reachable)" if cut else "reaches the API again"
    say(f"node {node.name} {what}")


def down_extra_nodes(purge: bool) -> None:  # noqa: C901
    from .policy import bpf_root

    for node in EXTRA_NODES:
        for c in ("cilium-agent", "kube-proxy", "kubelet"):
            stop(node.proc(c))
        if pid_of(node.proc("containerd")):
            for cid in ctr("containers", "list", "-q", check=False, sock=node.sock).stdout.split():
                ctr("tasks", "kill", "-s", "SIGKILL", cid, check=False, sock=node.sock)
            time.sleep(1)
            for cid in ctr("containers", "list", "-q", check=False, sock=node.sock).stdout.split():
                ctr("tasks", "delete", "-f", cid, check=False, sock=node.sock)
                ctr("containers", "delete", cid, check=False, sock=node.sock)
        kill(node)  # whatever is left (a killed node's containers, its storage client)
        stop(node.proc("containerd"))
        release_mount_ns(node)
        if node.state.exists() and POLICY_ENGINE == "cilium":
            sh("umount", "-l", bpf_root(node), check=False)
        mounts = [point for point, _ in mount_table() if point.startswith(str(node.state))]
        for m in sorted(mounts, key=len, reverse=True):
            sh("umount", "-l", m, check=False)
        # the veth first: a namespace is torn down by the kernel later, and with it, its end of the
        # pair; deleting one end deletes both now, so the next `up` never finds half a pair
        sh("ip", "link", "delete", host_link(node), check=False)
        sh("ip", "netns", "delete", node.netns, check=False)  # its iptables and routes go with it
        sh("ip", "route", "delete", node.pod_cidr, check=False)
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            root = hierarchy / node.netns
            if root.is_dir():  # leaves first (only a cgroup without children or tasks can be removed)
                for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [root]:
                    try:
                        d.rmdir()
                    except OSError:
                        pass
        keep = {"containerd"} if not purge else set()
        for child in node.state.iterdir() if node.state.exists() else []:
            if child.name not in keep:
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
        for log in logs.glob(f"*@{node.name}.log"):
            log.unlink()
    if EXTRA_NODES:
        sh("ip", "link", "delete", NODE_BRIDGE, check=False)
