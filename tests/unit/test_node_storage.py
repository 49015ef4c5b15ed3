"""The harness's shared storage (hack/node/storage.py): glusterd's configuration and how a node's
mount of the volume is read from a mount table. The volume itself, mounted on three nodes, is
tests/e2e/cluster/test_nodes.py's (test_each_node_reaches_the_shared_volume_through_its_own_client)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
from node import config, ports, storage  # noqa: E402

# /proc/<pid>/mountinfo lines: the host's directory, then a dead client's mount, then a live one
ROOT_LINE = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw"


def line(n: int, point: Path, fstype: str) -> str:
    return f"{n} 27 0:{n} / {point} rw,relatime - {fstype} 10.245.0.1:tf-cluster-shared rw"


def test_glusterd_listens_on_the_nodes_network_below_the_ephemeral_range():
    vol = storage.glusterd_vol("10.245.0.1")
    assert "option transport.socket.bind-address 10.245.0.1" in vol
    assert f"option transport.socket.listen-port {config.STORAGE_PORT}" in vol
    brick = config.STORAGE_BRICK_PORT
    assert f"option base-port {brick}" in vol and f"option max-port {brick}" in vol  # the only one it may use
    # GlusterFS's default brick ports (49152 up) sit inside Linux's default ephemeral range
    assert not ports.exposed({config.STORAGE_PORT, brick}, (32768, 60999), set())
    assert config.FIXED_PORTS[config.STORAGE_PORT] == "glusterd" and config.FIXED_PORTS[brick] == "glusterfsd"


def test_the_server_is_reached_on_the_nodes_network_or_with_one_node_on_the_pod_bridge(monkeypatch):
    assert storage.server_address() == (config.NODE_NET_GW if config.EXTRA_NODES else config.GATEWAY)
    monkeypatch.setattr(storage, "EXTRA_NODES", [])
    assert storage.server_address() == config.GATEWAY  # never loopback: GlusterFS refuses it for a brick


def test_a_mount_table_says_what_is_mounted_at_the_shared_path_lowest_first():
    table = "\n".join([ROOT_LINE, line(40, config.SHARED, "fuse.glusterfs"), line(41, config.SHARED, "fuse.glusterfs")])
    assert storage.mounts_at_shared(table) == ["fuse.glusterfs", "fuse.glusterfs"]
    assert storage.mounts_at_shared(ROOT_LINE) == []
    other = line(42, config.SHARED / "pvc-1", "fuse.glusterfs")  # a path below it is not it
    assert storage.mounts_at_shared("\n".join([ROOT_LINE, other])) == []


def test_a_node_has_the_volume_when_the_top_mount_at_the_shared_path_is_a_client():
    assert storage.client_on_top("\n".join([ROOT_LINE, line(40, config.SHARED, "fuse.glusterfs")]))
    assert not storage.client_on_top("\n".join([ROOT_LINE, line(40, config.SHARED, "tmpfs")]))
    over = [ROOT_LINE, line(40, config.SHARED, "fuse.glusterfs"), line(41, config.SHARED, "tmpfs")]
    assert not storage.client_on_top("\n".join(over))  # something mounted over the volume hides it
    assert not storage.client_on_top(ROOT_LINE)


def test_each_other_node_has_a_mount_namespace_file_under_the_harness_run_directory():
    for node in config.EXTRA_NODES:
        assert node.mntns.parent == config.MOUNT_NS and node.mntns.name == node.name


def test_the_bricks_port_counts_as_taken_while_any_socket_holds_it_as_glusterd_tests_it():
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # a port of the kernel's choice, held on one address only
        port = held.getsockname()[1]
        held.listen()
        assert not storage.port_free_for_a_brick(port)  # glusterd binds on any address: taken
    assert storage.port_free_for_a_brick(port)
