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
the sign, read with one DNS lookup every EVERY seconds and no API request.

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

import socket
import threading
from typing import Callable

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


def addresses(host: str) -> frozenset[str]:
    """The addresses `host` resolves to now; empty while it does not (the leader's pod is gone and
    its replacement not yet placed)."""
    try:
        return frozenset(str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP))
    except (socket.gaierror, UnicodeError, OSError):
        return frozenset()


def watch_incarnation(
    host: str,
    stop: threading.Event,
    on_replaced: Callable[[str, list[str], list[str]], None],
    every: float = EVERY,
    resolve: Callable[[str], frozenset[str]] | None = None,
) -> None:
    """Call `on_replaced(host, old, new)` once `host` resolves to none of the addresses it had when this
    task's program started (the first answer, if it did not resolve then); return when `stop` is
    set. A name that stops resolving changes nothing (the leader finished, or is being replaced):
    only a new address is a new incarnation."""
    resolve = resolve or addresses
    first = resolve(host)
    while not stop.wait(every):
        now = resolve(host)
        if not now:
            continue
        if not first:
            first = now
        elif now.isdisjoint(first):
            on_replaced(host, sorted(first), sorted(now))
            return
