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


def sysctl(name: str, netns: str | None) -> str:
    """A net.ipv4 sysctl as `netns` has it (each network namespace has its own port range)."""
    argv = ["cat", f"/proc/sys/net/ipv4/{name}"]
    argv = ["ip", "netns", "exec", netns, *argv] if netns else argv
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def test_no_listener_of_the_harness_sits_in_the_ephemeral_range_unreserved():
    pids = harness_pids()
    assert pids, f"no pid files in {node_config.run}: is the node up?"
    seen, exposed, unlisted = [], [], []  # (node, component, protocol, address, port)
    for node in [node_config.HOST_NODE, *node_config.EXTRA_NODES]:
        where = None if node.host else node.netns
        low, high = map(int, sysctl("ip_local_port_range", where).split())
        reserved = ports.parse_ports(sysctl("ip_local_reserved_ports", where))
        for proto, address, port, owners in listeners(where):
            for component in sorted({c for c in (component_of(p, pids) for p in owners) if c}):
                row = (node.name, component, proto, address, port)
                seen.append(row)
                base = component.split("@")[0]  # kubelet@tf-cluster-node-2: a kubelet
                if low <= port <= high and port not in reserved and base not in KERNEL_CHOSEN:
                    exposed.append(row)
                if port < low and node_config.FIXED_PORTS.get(port) != base:  # never a kernel's pick
                    unlisted.append(row)
    table = "\n".join(f"  {n:22} {c:34} {p} {a}:{port}" for n, c, p, a, port in sorted(seen))
    assert not exposed, f"listeners inside the ephemeral range, unreserved:\n{exposed}\nevery listener:\n{table}"
    assert not unlisted, f"fixed ports missing from config.FIXED_PORTS:\n{unlisted}\nevery listener:\n{table}"
    # the table is what runs: each port is listened on by the component it names, on this host
    on_host = {(s[1], s[4]) for s in seen if s[0] == node_config.HOST_NODE.name}
    missing = {port: c for port, c in node_config.FIXED_PORTS.items() if (c, port) not in on_host}
    assert not missing, f"config.FIXED_PORTS names ports nothing of the harness listens on: {missing}\n{table}"
    for node in node_config.EXTRA_NODES:  # their namespaces were read
        assert any(s[0] == node.name for s in seen), f"nothing of {node.name} listens?\n{table}"
