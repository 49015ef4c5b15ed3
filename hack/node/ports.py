"""The harness's fixed ports against the machine's: Linux's ephemeral range, its reserved ports, and
who holds a port the harness is about to listen on.

Any outgoing connection takes its source port from net.ipv4.ip_local_port_range: a listener at a
fixed number inside it fails at random when a connection happens to hold that number. The fixed
ports (config.FIXED_PORTS) sit below the default range; `up` reserves any of them that a wider
range would hand out (net.ipv4.ip_local_reserved_ports, recorded so `down` gives back exactly what
it added) and, for a component not yet running, fails naming the process that holds its port.
Everything else the harness listens on is a port the kernel picks (port 0: containerd's streaming
server) or a Unix socket; tests/e2e/cluster/test_harness_ports.py checks both against a running node.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from .config import FIXED_PORTS, STATE
from .proc import NodeError, pid_of, say, sh

SYSCTL = Path("/proc/sys/net/ipv4")
RECORD = STATE / "reserved-ports"  # the reservations `up` added, removed again by `down`


def ephemeral_range() -> tuple[int, int]:
    low, high = (SYSCTL / "ip_local_port_range").read_text().split()
    return int(low), int(high)


def parse_ports(text: str) -> set[int]:
    """'8080,9000-9002' -> {8080, 9000, 9001, 9002} (the sysctl's list syntax)."""
    ports: set[int] = set()
    for part in filter(None, (p.strip() for p in text.strip().split(","))):
        low, _, high = part.partition("-")
        ports.update(range(int(low), int(high or low) + 1))
    return ports


def format_ports(ports: set[int]) -> str:
    return ",".join(str(p) for p in sorted(ports))


def reserved() -> set[int]:
    return parse_ports((SYSCTL / "ip_local_reserved_ports").read_text())


def exposed(ports, port_range: tuple[int, int], reserved_ports: set[int]) -> list[int]:
    """The ports an outgoing connection may take as its source: in the range and not reserved."""
    low, high = port_range
    return sorted(p for p in ports if low <= p <= high and p not in reserved_ports)


def holder(port: int) -> str:
    """Who listens on or connects from `port` (ss's line, a process's first), for an error message."""
    lines = [
        ln
        for args in ("-Htlnp", "-Htanp")
        for ln in sh("ss", args, f"( sport = :{port} )", check=False).stdout.splitlines()
    ]
    lines.sort(key=lambda ln: "users:" not in ln)  # a line naming the process first
    return re.sub(r"\s+", " ", lines[0]) if lines else "unknown (ss shows none now)"


def free(port: int) -> bool:
    """Can a loopback listener take `port`? (A listener on any address, or a connection from
    127.0.0.1, holds it; something on another specific address alone does not show here.)"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's and Redis's listeners do
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def guard() -> None:
    """Before `up` starts anything: reserve the fixed ports a wide ephemeral range would hand out,
    then fail, naming the holder, if a component that is not running yet would find its port taken."""
    added = exposed(FIXED_PORTS, ephemeral_range(), reserved())
    if added:
        have = reserved()
        (SYSCTL / "ip_local_reserved_ports").write_text(format_ports(have | set(added)))
        previous = parse_ports(RECORD.read_text()) if RECORD.exists() else set()
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        RECORD.write_text(format_ports(previous | set(added)))
        say(f"reserved ports {format_ports(set(added))} (inside this machine's ephemeral range {ephemeral_range()})")
    taken = [(p, c) for p, c in sorted(FIXED_PORTS.items()) if not pid_of(c) and not free(p)]
    if taken:
        raise NodeError(
            "ports the node listens on are taken: "
            + "; ".join(f"{port} ({component}) held by {holder(port)}" for port, component in taken)
            + ". Stop what holds them (or `hack/node down` an earlier node) and run `up` again."
        )


def release() -> None:
    """At `down`: remove the reservations `up` added (others' stay)."""
    if not RECORD.exists():
        return
    ours = parse_ports(RECORD.read_text())
    (SYSCTL / "ip_local_reserved_ports").write_text(format_ports(reserved() - ours))
    RECORD.unlink()
    say(f"released reserved ports {format_ports(ours)}")
