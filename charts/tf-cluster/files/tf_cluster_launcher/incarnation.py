"""The MultiWorkerMirrored leader's incarnation, read from DNS: a task whose leader was replaced
restarts, since its collectives wait on the old incarnation, which no longer exists.

Under MultiWorkerMirrored every task registers with TensorFlow's coordination service on the
leader (the chief, else worker 0) and runs its all-reduces with it. When another task's node is
lost, the service on the leader notices the missing heartbeats and every survivor's TensorFlow
fails, and its Job restarts it. When the leader's own node is lost, nothing tells the survivors:
their collectives wait on a machine that vanished (no reset, no error), and the leader's
replacement waits for them to register with its new service: the run hangs (measured on the
harness's three nodes: 850 s without a step, issue 43). The leader's per-task name (headless
Service, publishNotReadyAddresses) then names the replacement's pod, at a new address: that is
the sign, read with one DNS lookup every EVERY seconds and no API request (one query: of the
family the first answer had, on a single-stack cluster).

Only a task whose program holds a connection to the old incarnation restarts (held_by_this_pod):
the vanished machine never closes it (measured, issue 43), while a task started as the old
leader ended (a preemption's exit 42, which restarts every task) may first read the old leader's
address, still published while its pod terminates, and never reach it. Restarting such a task
when the new leader shows restarted the new leader's first try with it (the lost peer fails its
coordination service: a third leader try where two were due, seen once in CI). Its own gRPC
channel resolves the name again and finds the new leader; the new address becomes its baseline.

Under ParameterServer a worker is a server whose graphs read and update the variables on every ps.
When a ps's node is lost and the ps replaced, the worker's channel to the old ps stays open on a
machine that vanished (measured: the worker's TCP connection to the killed ps's address still
ESTABLISHED minutes later, next to a new one to the replacement, and the restarted coordinator
without a step for 5+ minutes after it restored its checkpoint into the new ps). So a worker
watches every ps's name the same way and restarts when one names a new address: its server
starts again with fresh channels, and the coordinator's next closures reach it (a worker's
restart is what ParameterServer training is built to survive).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
from typing import Callable, Iterable

from .tfconfig import cluster_of, host_of, leading_role

EVERY = 10.0  # seconds between two lookups of the leader's name (CoreDNS answers from its cache)


def hosts_to_watch(tf_config: str, strategy: str, role: str, index: int) -> list[str]:
    """The hosts whose replacement restarts this task: under MultiWorkerMirrored, the coordination
    service's leader (the chief, else worker 0), for every chief and worker but the leader itself;
    under ParameterServer, every ps, for a worker. Empty for any other task (the evaluator, a ps,
    the coordinator, which restarts when the fence tells it of a lost peer), under another
    strategy or without a cluster."""
    cluster = cluster_of(tf_config)
    if role not in cluster:
        return []
    if strategy == "parameterServer":
        return [host_of(h) for h in cluster.get("ps") or []] if role == "worker" else []
    if strategy != "multiWorkerMirrored" or role not in ("chief", "worker"):
        return []
    leading = leading_role(cluster)
    if role == leading and index == 0:
        return []
    return [host_of(cluster[leading][0])]


def addresses(host: str, family: int = socket.AF_UNSPEC) -> frozenset[str]:
    """The addresses `host` resolves to now (of `family`: AF_UNSPEC asks for A and AAAA, AF_INET
    for A alone); empty while it does not (the leader's pod is gone and its replacement not yet
    placed)."""
    try:
        infos = socket.getaddrinfo(host, None, family, proto=socket.IPPROTO_TCP)
        return frozenset(str(info[4][0]) for info in infos)
    except (socket.gaierror, UnicodeError, OSError):
        return frozenset()


def one_family_resolver(look: Callable[[str, int], frozenset[str]] | None = None) -> Callable[[str], frozenset[str]]:
    """A resolver that asks for both families until its first answer, then for that answer's family
    alone when it held one (a single-stack cluster: one DNS query a look, not an A and an AAAA), and
    for both again after three empty answers in a row."""
    family, empty = [socket.AF_UNSPEC], [0]
    ask = look or addresses

    def resolve(host: str) -> frozenset[str]:
        found = ask(host, family[0])
        empty[0] = 0 if found else empty[0] + 1
        if empty[0] >= 3:  # its family may be gone (or the first answer lacked the other): ask for both
            family[0] = socket.AF_UNSPEC
        if found and family[0] == socket.AF_UNSPEC:
            versions = {ipaddress.ip_address(a.split("%")[0]).version for a in found}
            if versions == {4}:
                family[0] = socket.AF_INET
            elif versions == {6}:
                family[0] = socket.AF_INET6
        return found

    return resolve


ESTABLISHED = "01"  # the state column of /proc/net/tcp{,6} (include/net/tcp_states.h)
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _address(hex_address: str) -> str:
    """An address of /proc/net/tcp{,6}: 32-bit words in the kernel's (host) byte order; an
    IPv4-mapped IPv6 address read as the IPv4 one."""
    words = bytes.fromhex(hex_address)
    packed = b"".join(struct.pack("=I", int.from_bytes(words[i : i + 4], "big")) for i in range(0, len(words), 4))
    ip = ipaddress.ip_address(packed)
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def established_peers(tables: Iterable[str] = TCP_TABLES) -> frozenset[str] | None:
    """The remote addresses of this pod's ESTABLISHED TCP connections (the pod's network
    namespace: its program's and its launcher's); None if no table could be read."""
    peers: set[str] = set()
    read = False
    for table in tables:
        try:
            with open(table, encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        read = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == ESTABLISHED:
                peers.add(_address(fields[2].split(":")[0]))
    return frozenset(peers) if read else None


def held_by_this_pod(old: Iterable[str]) -> bool:
    """Does this pod hold an ESTABLISHED connection to one of the `old` addresses (its program
    joined that incarnation)? True when it cannot tell (no /proc/net/tcp): restart, as before."""
    now = established_peers()
    return now is None or not now.isdisjoint(old)


def watch_incarnation(
    host: str,
    stop: threading.Event,
    on_replaced: Callable[[str, list[str], list[str]], None],
    every: float = EVERY,
    resolve: Callable[[str], frozenset[str]] | None = None,
    attached: Callable[[Iterable[str]], bool] | None = None,
    on_moved: Callable[[str, list[str], list[str]], None] | None = None,
) -> None:
    """Call `on_replaced(host, old, new)` once `host` resolves to none of the addresses it had when this
    task's program started (the first answer, if it did not resolve then) while the program holds
    a connection to an old one (`attached`); return when `stop` is set. A name that stops
    resolving changes nothing (the leader finished, or is being replaced): only a new address is a
    new incarnation. A new address the program never reached the old one of (it started as the
    old one ended) is the new baseline: `on_moved(host, old, new)` says so, and the watch goes on."""
    resolve = resolve or one_family_resolver()
    attached = attached or held_by_this_pod
    first = resolve(host)
    while not stop.wait(every):
        now = resolve(host)
        if not now:
            continue
        if not first:
            first = now
        elif now.isdisjoint(first):
            if attached(first):
                on_replaced(host, sorted(first), sorted(now))
                return
            if on_moved is not None:
                on_moved(host, sorted(first), sorted(now))
            first = now
