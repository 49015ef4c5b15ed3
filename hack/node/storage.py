"""The shared storage: a GlusterFS volume served from this host and mounted, through FUSE, on every
node over that node's own network, at the one path where the local-path provisioner's shared mode
makes its ReadWriteMany claims (SHARED).

Each node is a network namespace on this host (node/nodes.py) sharing its filesystem, so a claim
that were a host directory would be one disk seen through one kernel: it could not fail the way
network storage does. Here each node reaches the volume through its own client, over its own link:
the other nodes' clients run in their network namespace and mount the volume in a mount namespace
of the node's own (config.Node.mntns), where that node's containerd and kubelet run, so a pod on
node 2 reads and writes through node 2's client. A node cut off (`node partition`) loses its
storage with its network; a killed node's client dies with it; a node cut off from the control
plane only (`node isolate`) keeps it, as a broken control-plane link would.

    glusterd     the management daemon (STORAGE_PORT), its state in WORK
    glusterfsd   the volume's one brick (STORAGE_BRICK_PORT), started by glusterd, its pid
                 recorded in run/ as the harness's own processes' are
    glusterfs    one FUSE client per node (`glusterfs` and `glusterfs@<node>` in run/)

Debian's glusterfs-server and glusterfs-client (the node's build installs them: build.sh debs).
"""

from __future__ import annotations

import socket
from pathlib import Path

from .config import (
    EXTRA_NODES,
    GATEWAY,
    HOST_NODE,
    NODE_NET_GW,
    SHARED,
    STATE,
    STORAGE_BRICK_PORT,
    STORAGE_PORT,
    Node,
    logs,
    run,
)
from .ports import holder
from .proc import NodeError, mount_table, pid_of, say, sh, start, stop, wait_for

VOLUME = "tf-cluster-shared"
WORK = STATE / "gluster"  # glusterd's working directory and the brick (`down` removes it, as the node's state)
CLI_SOCKET = Path("/run/glusterd.socket")  # glusterd's default; its CLI finds it there
BRICK_PIDS = Path("/run/gluster/vols", VOLUME)  # where glusterd records its bricks' pids


def server_address() -> str:
    """Where the nodes reach the server: the host's address on the nodes' network, or, with one
    node, the pod bridge's gateway (GlusterFS refuses a loopback address for a brick)."""
    return NODE_NET_GW if EXTRA_NODES else GATEWAY


def brick(address: str) -> str:
    """The volume's one brick, a directory under WORK, one per server address: a brick is bound to
    the address it was made with (an `up` with more or fewer nodes than the last makes it again)."""
    return f"{address}:{WORK / ('brick-' + address)}"


def glusterd_vol(address: str) -> str:
    """glusterd's configuration: its port and its brick's (the only one glusterd may give it)
    below Linux's ephemeral range (node/ports.py), listening on the nodes' network only."""
    low = high = STORAGE_BRICK_PORT
    return f"""volume management
    type mgmt/glusterd
    option working-directory {WORK / "state"}
    option transport-type socket
    option transport.socket.listen-port {STORAGE_PORT}
    option transport.socket.bind-address {address}
    option ping-timeout 0
    option event-threads 1
    option base-port {low}
    option max-port {high}
end-volume
"""


def gluster(*args, check: bool = True):
    return sh("gluster", "--mode=script", f"--glusterd-sock={CLI_SOCKET}", *args, check=check)


def brick_online() -> bool:
    out = gluster("volume", "status", VOLUME, "detail", check=False).stdout
    return any(line.split(":", 1)[-1].strip() == "Y" for line in out.splitlines() if line.startswith("Online"))


def port_free_for_a_brick(port: int) -> bool:
    """glusterd's own test before it starts a brick on `port` (pmap_port_isfree): a bind on any
    address without SO_REUSEADDR, which a socket of the last brick still closing (FIN-WAIT,
    TIME-WAIT: up to ~60 s after a `down`) fails; glusterd then says only "All the ports in the
    range are exhausted" and the volume does not start."""
    with socket.socket() as s:
        try:
            s.bind(("", port))
            return True
        except OSError:
            return False


def up_server() -> None:
    """glusterd and the volume (made by this `up`, or found running from an earlier one)."""
    if not Path("/usr/sbin/glusterd").exists():
        raise NodeError("glusterd is missing: `bash hack/node/build.sh debs` installs glusterfs-server")
    if not pid_of("glusterfsd"):  # no brick of ours runs: its port must be free, as glusterd tests it
        try:
            wait_for(
                f"port {STORAGE_BRICK_PORT} free for the brick (the last brick's connections close within ~60 s)",
                lambda: port_free_for_a_brick(STORAGE_BRICK_PORT),
                120,
            )
        except NodeError as e:
            raise NodeError(f"{e}: it is held by {holder(STORAGE_BRICK_PORT)}; stop that and run `up` again") from e
    address = server_address()
    (WORK / "state").mkdir(parents=True, exist_ok=True)
    vol = WORK / "glusterd.vol"
    vol.write_text(glusterd_vol(address))
    start("glusterd", ["glusterd", "-N", "-f", vol, "-l", logs / "glusterd.log", "--log-level", "WARNING"])
    wait_for("glusterd answering", lambda: gluster("volume", "list", check=False).returncode == 0, 60, "glusterd")
    exists = VOLUME in gluster("volume", "list").stdout.split()
    if exists and f"Brick1: {brick(address)}" not in gluster("volume", "info", VOLUME).stdout:
        # made when the nodes were fewer or more (another address): made again, on a brick of this one
        gluster("volume", "stop", VOLUME, "force", check=False)
        gluster("volume", "delete", VOLUME)
        exists = False
    if not exists:
        Path(brick(address).split(":", 1)[1]).mkdir(parents=True, exist_ok=True)
        # force: the brick is a directory of the root filesystem, which GlusterFS otherwise refuses
        gluster("volume", "create", VOLUME, brick(address), "force")
        gluster("volume", "set", VOLUME, "network.ping-timeout", "10")  # a lost client's locks: 10 s, not 42
        gluster("volume", "start", VOLUME)
        say(f"GlusterFS volume {VOLUME} created (brick {brick(address)})")
    wait_for(f"the brick of {VOLUME} online", brick_online, 60, "glusterd")
    newest = max(BRICK_PIDS.glob("*.pid"), key=lambda f: f.stat().st_mtime)  # glusterd's record of it
    (run / "glusterfsd.pid").write_text(newest.read_text().strip())


def client_on_top(mountinfo: str) -> bool:
    """Is the volume (a GlusterFS client) what a mount table shows at SHARED, on top of the rest?"""
    return mounts_at_shared(mountinfo)[-1:] == ["fuse.glusterfs"]


def mounted(pid: int) -> bool:
    """Is the volume mounted at SHARED in the mount namespace of process `pid` (its client)?"""
    return client_on_top(Path(f"/proc/{pid}/mountinfo").read_text())


def mounts_at_shared(mountinfo: str | None = None) -> list[str]:
    """The filesystem types mounted at SHARED in a /proc/<pid>/mountinfo (this process's when None),
    lowest first."""
    return [fstype for point, fstype in mount_table(mountinfo) if point == str(SHARED)]


def mount(node: Node = HOST_NODE) -> None:
    """The node's client, mounting the volume at SHARED: on this host in its own namespaces, on
    another node in its network namespace and its mount namespace (where its kubelet and
    containerd run). A mount left by a client that died (a killed node) is removed first."""
    name = node.proc("glusterfs")
    if pid_of(name):
        return
    in_ns = [] if node.host else ["nsenter", f"--mount={node.mntns}", "--"]
    # first: a dead client's mount answers every stat with ENOTCONN, mkdir included
    for _ in mounts_at_shared(sh(*in_ns, "cat", "/proc/self/mountinfo").stdout):
        sh(*in_ns, "umount", "-l", SHARED, check=False)
    SHARED.mkdir(parents=True, exist_ok=True)
    start(
        name,
        [
            "glusterfs",
            "-N",  # in the foreground: its pid is the one in run/
            f"--volfile-server={server_address()}",
            f"--volfile-id={VOLUME}",
            f"--log-file={logs / (name + '-client.log')}",
            "--log-level=WARNING",
            SHARED,
        ],
        netns=None if node.host else node.netns,
        mntns=None if node.host else node.mntns,
    )
    wait_for(f"{VOLUME} mounted on {node.name}", lambda: mounted(pid_of(name) or 0), 60, name)


def down() -> None:
    """This host's client and its mount, then glusterd and the brick it started (the volume's
    directory goes with the node's state: cli.py `down`)."""
    stop("glusterfs")
    for _ in mounts_at_shared():
        sh("umount", "-l", SHARED, check=False)
    stop("glusterd")
    stop("glusterfsd")  # the brick: glusterd leaves it running
    for pidfile in BRICK_PIDS.glob("*.pid"):
        pidfile.unlink(missing_ok=True)
