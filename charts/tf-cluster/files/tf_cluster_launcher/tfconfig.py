"""TF_CONFIG read: its hosts, the peers a task waits for (by strategy and role), and the wait on
DNS alone (run-local, or no API to read)."""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Callable

from .common import ConfigError, log


def peer_hosts(tf_config: str) -> list[str]:
    """Every host named in TF_CONFIG's cluster, roles in name order, tasks in index order, without
    duplicates."""
    cluster = cluster_of(tf_config)
    hosts: list[str] = []
    for role in sorted(cluster):
        for address in cluster[role]:
            host = host_of(address)
            if host not in hosts:
                hosts.append(host)
    return hosts


def resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
        return True
    except (socket.gaierror, UnicodeError):
        return False


def cluster_of(tf_config: str) -> dict[str, list[Any]]:  # addresses as TF_CONFIG's JSON has them
    """TF_CONFIG's cluster as {role: [address, ...]} (a dict of index -> address kept in index order)."""
    try:
        cluster = json.loads(tf_config).get("cluster", {}) if tf_config else {}
    except ValueError as e:
        raise ConfigError("TF_CONFIG is not valid JSON: %s" % e) from None
    out: dict[str, list[Any]] = {}
    for role, tasks in cluster.items():
        if isinstance(tasks, dict):
            tasks = [tasks[k] for k in sorted(tasks, key=lambda k: int(k) if str(k).isdigit() else k)]
        out[role] = list(tasks)
    return out


def describe(tf_config: str) -> str:
    """One line for the task's log: its own task and the cluster's size by role (the whole TF_CONFIG
    at 4096 tasks is ~130 KB; `tf-cluster render --tf-config` prints every pod's)."""
    parsed = json.loads(tf_config)
    task = parsed.get("task") if isinstance(parsed, dict) else None
    task = task if isinstance(task, dict) else {}
    sizes = ", ".join("%s %d" % (role, len(tasks)) for role, tasks in sorted(cluster_of(tf_config).items()))
    return "TF_CONFIG: task %s:%s of a cluster of %s (%d bytes)" % (
        task.get("type", "?"),
        task.get("index", "?"),
        sizes or "no task",
        len(tf_config),
    )


def leading_role(cluster: dict[str, list[Any]]) -> str:
    """The role whose first task leads (TensorFlow's coordination leader under MultiWorkerMirrored,
    and the fences' leading role): the chief, else the workers."""
    return "chief" if cluster.get("chief") else "worker"


def host_of(address: str) -> str:
    return address.rsplit(":", 1)[0]


def peers_needed(tf_config: str, strategy: str, role: str) -> list[str]:
    """The hosts of TF_CONFIG this task's TensorFlow contacts as it starts: the ones to wait for.

    MultiWorkerMirrored: every task first connects to the coordination service on the leader
    (the chief, else worker 0), whose start-up barrier holds them until all have connected; only
    then do workers reach each other (collective group and device resolution, the all-reduce), so
    a non-leader waits for the leader alone and the leader (a client of its own service) for
    itself. ParameterServer: the coordinator (the chief) connects to every worker and ps; workers
    and ps servers contact nobody until the coordinator sends them work, so they start at once.
    A custom strategy: every host (nothing is known of its program)."""
    cluster = cluster_of(tf_config)
    if strategy == "multiWorkerMirrored":
        leader = (cluster.get(leading_role(cluster)) or [None])[0]
        return [host_of(leader)] if leader and role in cluster else []
    if strategy == "parameterServer":
        return peer_hosts(tf_config) if role == "chief" else []
    return peer_hosts(tf_config)


def wait_for_peers(
    hosts: list[str], timeout: float, interval: float = 5.0, give_up: Callable[[], bool] | None = None
) -> list[str]:
    """Wait on DNS alone (outside Kubernetes, or when the API cannot be read): return [] when
    all resolve, else the hosts still missing at the timeout (or when `give_up()` says the wait is
    pointless: the leading Job already finished)."""
    start = time.monotonic()
    last_log = start
    missing = list(hosts)
    while True:
        missing = [h for h in missing if not resolves(h)]
        if not missing:
            log("all %d peer(s) resolve after %.1fs" % (len(hosts), time.monotonic() - start))
            return []
        now = time.monotonic()
        if now - start >= timeout:
            return missing
        if now - last_log >= interval:
            if give_up is not None and give_up():
                return missing
            log(
                "waiting for %d/%d peer(s) to resolve (%ds/%ds): %s"
                % (
                    len(missing),
                    len(hosts),
                    now - start,
                    timeout,
                    ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""),
                )
            )
            last_log = now
        time.sleep(min(1.0, max(0.05, timeout / 50.0)))
