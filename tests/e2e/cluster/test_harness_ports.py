"""The running node's listeners against Linux's ephemeral range (issue 41): every socket a process of
the harness listens on, on this host and in each other node's network namespace, is outside
net.ipv4.ip_local_port_range, reserved in net.ipv4.ip_local_reserved_ports, or a port the kernel
chose itself (a listener at port 0). A fixed listener inside the range fails at random: any outgoing
connection may hold that number as its source port (`bind: address already in use` on 35000).
hack/node/config.FIXED_PORTS is the table of fixed ones; tests/unit/test_node_ports.py checks it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_cluster import KUBECONFIG

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))
from node import config as node_config  # noqa: E402
from node import ports  # noqa: E402

pytestmark = pytest.mark.needs(
    "the harness's node",
    node_config.is_this_node(KUBECONFIG),
    "its processes are read on the node `make e2e` brings up",
)

# Processes whose listeners inside the range are ports the kernel picked free (bind to port 0), by
# their component's name, with where that is configured.
KERNEL_CHOSEN = {
    "containerd": 'the CRI plugin\'s streaming server: stream_server_port "0" by default in containerd 1.6',
}


def harness_pids() -> dict[int, str]:
    """pid -> component, from the harness's pid files (`kubelet@tf-cluster-node-2` for another node's)."""
    out = {}
    for f in node_config.run.glob("*.pid"):
        try:
            out[int(f.read_text())] = f.stem
        except ValueError:
            continue
    return out


def component_of(pid: int, pids: dict[int, str]) -> str | None:
    """The harness component `pid` is, or descends from (a child it started), else None."""
    while pid > 1:
        if pid in pids:
            return pids[pid]
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's pid, after the command's name
    return None


def listeners(netns: str | None) -> list[tuple[str, str, int, list[int]]]:
    """(protocol, local address, port, pids) of every listening TCP socket and bound UDP socket."""
    argv = ["ss", "-Hltunp"]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        local = fields[4]
        address, _, port = local.rpartition(":")
        found.append((fields[0], address, int(port), [int(p) for p in re.findall(r"pid=(\d+)", line)]))
    return found


def test_no_listener_of_the_harness_sits_in_the_ephemeral_range_unreserved():
    pids = harness_pids()
    assert pids, f"no pid files in {node_config.run}: is the node up?"
    (low, high), reserved = ports.ephemeral_range(), ports.reserved()
    seen = []  # (where, component, protocol, address, port)
    for node in [node_config.HOST_NODE, *node_config.EXTRA_NODES]:
        where = None if node.host else node.netns
        for proto, address, port, owners in listeners(where):
            for component in sorted({c for c in (component_of(p, pids) for p in owners) if c}):
                seen.append((node.name, component, proto, address, port))
    table = "\n".join(f"  {n:22} {c:34} {p} {a}:{port}" for n, c, p, a, port in sorted(seen))
    exposed = [
        s for s in seen if low <= s[4] <= high and s[4] not in reserved and s[1].split("@")[0] not in KERNEL_CHOSEN
    ]
    assert not exposed, (
        f"listeners inside {low}-{high}, unreserved:\n{exposed}\nevery listener of the harness:\n{table}"
    )
    # the table of fixed ports is what runs: each is listened on, by the component it names, on this host
    on_host = {(s[1], s[4]) for s in seen if s[0] == node_config.HOST_NODE.name}
    missing = {port: c for port, c in node_config.FIXED_PORTS.items() if (c, port) not in on_host}
    assert not missing, f"config.FIXED_PORTS names ports nothing of the harness listens on: {missing}\n{table}"
    # and every other node's processes were seen too (their namespaces were read)
    for node in node_config.EXTRA_NODES:
        assert any(s[0] == node.name for s in seen), f"nothing of {node.name} listens?\n{table}"
