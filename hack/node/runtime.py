"""The container runtime: containerd + runc, the CNI bridge, and images imported from podman."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from .config import (
    BIN,
    BRIDGE,
    CILIUM_DIR,
    CLUSTER_POD_CIDR,
    CNI_BIN,
    CNI_BIN_DIR,
    HOST_NODE,
    PAUSE_IMAGE,
    POLICY_ENGINE,
    STATE,
    TRAINER_REPO,
    Node,
    tf_version,
)
from .proc import NodeError, ctr, say, sh, template


def containerd_config(node: Node = HOST_NODE) -> Path:
    path = node.state / "containerd.toml"
    path.write_text(
        template(
            "containerd.toml",
            STATE=node.state,
            RUN=node.run,
            SOCK=node.sock,
            PAUSE_IMAGE=PAUSE_IMAGE,
            RESTRICT_OOM=str(restrict_oom()).lower(),
            CNI_BIN=CNI_BIN_DIR,
        )
    )
    return path


def restrict_oom() -> bool:
    """Can this host lower a process's oom_score_adj? (runc sets -998 on every pod sandbox.)"""
    p = subprocess.run(["sh", "-c", "echo -998 > /proc/self/oom_score_adj"], capture_output=True)
    return p.returncode != 0


def ensure_network(node: Node = HOST_NODE) -> None:
    ip = ["ip"] if node.host else ["ip", "-n", node.netns]
    in_ns = [] if node.host else ["ip", "netns", "exec", node.netns]
    for key in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
        p = sh(*in_ns, "sysctl", "-qw", f"{key.replace('/', '.')}=1", check=False)
        if p.returncode != 0:
            say(f"warning: cannot set {key} on {node.name}: {p.stderr.strip()}")
    if sh(*ip, "link", "show", BRIDGE, check=False).returncode != 0:
        sh(*ip, "link", "add", BRIDGE, "type", "bridge")
    if node.gateway not in sh(*ip, "-4", "addr", "show", BRIDGE).stdout:
        sh(*ip, "addr", "add", f"{node.gateway}/24", "dev", BRIDGE)
    # A fixed MAC: a bridge without one takes the lowest MAC of its ports, so a pod's veth coming
    # or going could change the gateway's MAC under the other pods, whose ARP entries then name
    # the old one: their frames to the gateway (DNS, the API server) were flooded to the other
    # pods and lost until the entries went stale (API reads timing out for up to ~2 min after a
    # pod was replaced; Cilium counted the flooded copies as "Policy denied" at the other pods).
    sh(*ip, "link", "set", BRIDGE, "address", node.bridge_mac)
    sh(*ip, "link", "set", BRIDGE, "up")
    # Pod to pod across nodes keeps the pods' addresses (the bridge masquerades whatever leaves its
    # subnet; a policy on the far node must see the source pod, not a node). kube-proxy's own
    # masquerade mark (hairpin, outside clients of a Service) still applies.
    keep = [
        "-s",
        CLUSTER_POD_CIDR,
        "-d",
        CLUSTER_POD_CIDR,
        "-m",
        "mark",
        "!",
        "--mark",
        "0x4000/0x4000",
        "-j",
        "RETURN",
    ]
    if sh(*in_ns, "iptables", "-t", "nat", "-C", "POSTROUTING", *keep, check=False).returncode != 0:
        sh(*in_ns, "iptables", "-t", "nat", "-I", "POSTROUTING", "1", *keep)
    # one plugin directory for containerd: Debian's plugins and, with the policy engine, Cilium's
    CNI_BIN_DIR.mkdir(parents=True, exist_ok=True)
    plugins = {p.name: p for p in Path(CNI_BIN).iterdir()}
    if POLICY_ENGINE == "cilium":
        plugins["cilium-cni"] = CILIUM_DIR / "cilium-cni"
    for name, target in plugins.items():
        link = CNI_BIN_DIR / name
        if not link.is_symlink() or link.readlink() != target:
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    # Cilium after the bridge (generic-veth chaining): the bridge wires the pod, Cilium's agent
    # attaches its policy programs to the pod's veth
    chained = [{"type": "cilium-cni", "chaining-mode": "generic-veth"}] if POLICY_ENGINE == "cilium" else []
    netd = node.state / "cni" / "net.d"
    netd.mkdir(parents=True, exist_ok=True)
    (netd / "10-tf-cluster.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "tf-cluster",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        "isGateway": True,
                        "ipMasq": True,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": node.pod_cidr, "gateway": node.gateway}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(node.state / "cni" / "ipam"),
                        },
                    },
                    *chained,
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ],
            },
            indent=1,
        )
    )


def podman(*args, check=True):
    flags = (
        []
        if Path("/sys/fs/cgroup/cgroup.controllers").exists()
        else ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    )
    return sh("podman", *flags, *args, check=check)


def ctr_images(node: Node = HOST_NODE) -> set[str]:
    return set(ctr("images", "list", "-q", sock=node.sock).stdout.split())


def ensure_pause_image(node: Node = HOST_NODE) -> None:
    if PAUSE_IMAGE in ctr_images(node):
        return
    say("building the pause image (a static Go binary, no base) with buildah")
    tar = STATE / "pause.tar"
    if not node.host:  # built once, for the first node: copied from its containerd
        tar = node.state / "pause.tar"
        ctr("images", "export", tar, PAUSE_IMAGE)
        ctr("images", "import", tar, sock=node.sock)
        tar.unlink()
        return
    c = sh("buildah", "from", "scratch").stdout.strip()
    try:
        sh("buildah", "copy", c, BIN / "pause", "/pause")
        sh("buildah", "config", "--entrypoint", '["/pause"]', "--user", "65535:65535", c)
        sh("buildah", "commit", "-q", c, PAUSE_IMAGE)
    finally:
        sh("buildah", "rm", c, check=False)
    tar.unlink(missing_ok=True)
    podman("save", "--format", "docker-archive", "-o", tar, PAUSE_IMAGE)
    ctr("images", "import", "--no-unpack", tar, sock=node.sock)
    tar.unlink()


class Archives:
    """Each image saved from podman's store once per `up`, for every node's containerd to import:
    a `podman save` of the trainer image is ~2 GB written, and three nodes used to make one each."""

    def __init__(self) -> None:
        self.dir = STATE / "import"
        self._lock = threading.Lock()
        self._saved: dict[str, Path] = {}

    def of(self, image: str, iid: str) -> Path:
        with self._lock:  # one save per image: a node that asks while it is saved waits for it
            if iid not in self._saved:
                self.dir.mkdir(parents=True, exist_ok=True)
                tar = self.dir / f"{iid[:20]}.tar"
                tar.unlink(missing_ok=True)
                t = time.monotonic()
                podman("save", "--format", "docker-archive", "-o", tar, image)
                say(f"saved {image} from podman's store in {time.monotonic() - t:.0f}s")
                self._saved[iid] = tar
            return self._saved[iid]

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def import_images(images: list[str], node: Node = HOST_NODE, archives: Archives | None = None) -> None:
    """Copy images from podman's store into containerd's (what `kind load` does for kind).
    Tags of one image are imported once and tagged in containerd. A tag whose podman image
    changed since it was imported (a rebuild) is imported again."""
    record = node.state / "containerd" / "imported.json"
    imported = json.loads(record.read_text()) if record.exists() else {}
    have = ctr_images(node)
    by_id: dict[str, list[str]] = {}
    for image in images:
        p = podman("image", "inspect", "--format", "{{.Id}}", image, check=False)
        if p.returncode != 0:
            raise NodeError(f"image {image} is not in podman's store: build it first (make image)")
        by_id.setdefault(p.stdout.strip(), []).append(image)
    own = archives is None
    archives = archives or Archives()
    try:
        for iid, tags in by_id.items():
            current = [t for t in tags if t in have and imported.get(t) == iid]
            missing = [t for t in tags if t not in current]
            if not missing:
                continue
            if not current:
                tar = archives.of(missing[0], iid)
                say(f"importing {missing[0]} into {node.name}'s containerd (what `kind load` does) ...")
                t = time.monotonic()
                ctr("images", "import", tar, sock=node.sock)
                say(f"imported {missing[0]} into {node.name} in {time.monotonic() - t:.0f}s")
                current, missing = [missing[0]], missing[1:]
            for tag in missing:
                ctr("images", "rm", tag, check=False, sock=node.sock)
                ctr("images", "tag", current[0], tag, sock=node.sock)
            imported.update({t: iid for t in tags})
    finally:
        if own:
            archives.remove()
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(imported, indent=1, sort_keys=True))


def trainer_images() -> list[str]:
    """The trainer image the chart uses by default (`tf-cluster-trainer:<tf>-cpu`, as `make image` tags it)
    and, when built, its notebook image (`<tf>-cpu-notebook`, `make notebook-image`), each with every
    other tag podman has for that same image (the content-pinned one)."""
    default = podman("images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}", TRAINER_REPO, check=False).stdout
    rows = [line.split() for line in default.splitlines() if line.strip()]
    tf = os.environ.get("TF_VERSION") or tf_version()
    wanted = {iid for ref, iid in rows if ref.endswith((f":{tf}-cpu", f":{tf}-cpu-notebook"))}
    return [ref for ref, iid in rows if iid in wanted]
