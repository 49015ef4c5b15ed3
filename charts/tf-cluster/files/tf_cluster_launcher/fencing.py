"""Fencing pods stranded on a lost node: marked Failed once past their deletion deadline, so their
Job replaces them."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, Callable

from .common import ConfigError, env, log, now_rfc3339
from .events import EVENTS
from .informer import Informer
from .kubeapi import api
from .leader import parse_time
from .peerpods import host_key, pod_host, slim_pod
from .tfconfig import cluster_of, host_of, leading_role, peer_hosts

if TYPE_CHECKING:
    import threading


def stranded(pod: dict[str, Any], now: float, after: float, self_fence: float = 0) -> bool:
    """Is `pod` deleted but unfinished `after` seconds past its deletion deadline (no kubelet ended
    it)? With `self_fence` (selffence.py), also only once it has been not Ready (its node NotReady)
    for `self_fence` + `after` seconds: by then its task, if it lives on cut off, has stopped."""
    deadline = parse_time(pod.get("metadata", {}).get("deletionTimestamp") or "")
    phase = pod.get("status", {}).get("phase")
    if deadline is None or phase in ("Succeeded", "Failed") or now - deadline < after:
        return False
    if self_fence > 0:
        since = not_ready_since(pod)
        return since is not None and now - since >= self_fence + after
    return True


def is_ready(pod: dict[str, Any] | None) -> bool:
    """Is the pod's Ready condition True (its kubelet reports it, its node is Ready)?"""
    conditions = (pod or {}).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def not_ready_since(pod: dict[str, Any]) -> float | None:
    """When the pod's Ready condition turned False (the node lifecycle controller does so for
    every pod of a node it finds NotReady), or None while it is True (or unknown)."""
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") != "True":
            return parse_time(c.get("lastTransitionTime") or "")
    return None


def fence_stranded(
    namespace: str, pods: list[dict[str, Any]], after: float, now: float | None = None, self_fence: float = 0
) -> list[str]:
    """Mark Failed those of `pods` stranded on a lost node; returns their names."""
    now = time.time() if now is None else now
    fenced: list[str] = []
    for pod in pods:
        if not stranded(pod, now, after, self_fence):
            continue
        name, node = pod["metadata"]["name"], pod.get("spec", {}).get("nodeName", "?")
        # stranded(pod) parsed its deadline: parse_time's None (unparsable) cannot reach the subtraction
        log(
            "fencing %s: deleted but still %s %ds past its deadline, so node %s is not answering; "
            "marking it Failed so its Job replaces it"
            % (name, pod.get("status", {}).get("phase"), now - parse_time(pod["metadata"]["deletionTimestamp"]), node)  # type: ignore[operator]
        )
        message = (
            "tf-cluster launcher: node %s stopped answering; the pod was deleted and never "
            "confirmed by its kubelet (fenced)" % node
        )
        api(
            "/api/v1/namespaces/%s/pods/%s/status" % (namespace, name),
            method="PATCH",
            body={"status": {"phase": "Failed", "reason": "NodeLost", "message": message}},
        )
        EVENTS.record(
            "FencedPeer",
            "marked pod %s Failed (NodeLost): node %s stopped answering and the "
            "pod's deletion was never confirmed; its Job replaces it" % (name, node),
            warning=True,
        )
        fenced.append(name)
    return fenced


def fences(tf_config: str, role: str, index: int) -> bool:
    """Is this task one of the release's fencers by rule? A few tasks watch the release's pods, not
    all (a watch of N pods by each of N tasks is N*N events): the first two of the leading role (the
    chief, else the workers) and the first of each other role in TF_CONFIG. The ParameterServer
    coordinator always fences (it restarts when a peer is lost). Where they all sit on one node,
    they ask a task on another node to fence too (deputy_wanted)."""
    return is_fencer(cluster_of(tf_config), role, index)


def is_fencer(cluster: dict[str, list[Any]], role: str, index: int) -> bool:
    """fences(), for a TF_CONFIG already parsed."""
    if role not in cluster:
        return False
    return index < (2 if role == leading_role(cluster) else 1)


# The pod condition (set with pods/status, the verb the fence uses) by which a fencer asks a task of
# the release to fence too; its message says why. A task's later pods inherit it (a new pod of a
# deputy whose program failed fences too), so the request outlives a restart of the deputy.
DEPUTY = "tf-cluster.io/Fencer"


def live(pod: dict[str, Any]) -> bool:
    """Running, not deleted, and Ready (its node answers the control plane)."""
    running = pod.get("status", {}).get("phase") == "Running"
    return running and not pod.get("metadata", {}).get("deletionTimestamp") and is_ready(pod)


def deputy_reason(pod: dict[str, Any]) -> str | None:
    """Why `pod` was asked to fence (its DEPUTY condition's message), or None."""
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == DEPUTY and c.get("status") == "True":
            return c.get("message") or "asked to fence"
    return None


def tasks_by_host(cluster: dict[str, list[Any]]) -> dict[str, tuple[int, bool]]:
    """<hostname>.<service> -> (its rank in TF_CONFIG's order, a fencer by rule?) for every task:
    computed once per fence loop, read on each check."""
    order = [(role, i, host) for role, hosts in cluster.items() for i, host in enumerate(hosts)]
    return {
        host_key(host_of(str(host))): (rank, is_fencer(cluster, role, i)) for rank, (role, i, host) in enumerate(order)
    }


def deputy_wanted(pods: list[dict[str, Any]], tasks: dict[str, tuple[int, bool]]) -> tuple[dict[str, Any], str] | None:
    """The task's pod to ask to fence too and the fencers' node, or None: when every live fencer of
    the release (by rule, or asked before: any pod of its task carries DEPUTY) sits on one node,
    the first live task of TF_CONFIG (`tasks`: tasks_by_host) on another node. So the loss of any
    one node leaves a fencer whatever the placement (the chart spreads nothing by default), as
    long as the release runs on two nodes or more."""
    asked = {pod_host(p) for p in pods if deputy_reason(p)}
    running = sorted(
        (
            (tasks[key], p)
            for p in pods
            if (key := pod_host(p) or "") in tasks and live(p) and p["spec"].get("nodeName")
        ),
        key=lambda t: t[0],
    )
    nodes = {p["spec"]["nodeName"] for (_, by_rule), p in running if by_rule or pod_host(p) in asked}
    if len(nodes) != 1:
        return None  # spread already, or no live fencer seen (starting: nothing to judge yet)
    (node,) = nodes
    return next(((p, node) for _, p in running if p["spec"]["nodeName"] != node), None)


def patch_condition(namespace: str, pod: str, condition: dict[str, Any]) -> None:
    """Set one condition of `pod` (pods/status, the fence's verb), merged by its type: the
    kubelet's conditions and the other writers' stay."""
    api(
        "/api/v1/namespaces/%s/pods/%s/status" % (namespace, pod),
        method="PATCH",
        body={"status": {"conditions": [condition]}},
        content_type="application/strategic-merge-patch+json",
    )


def deputize(namespace: str, pod: dict[str, Any], node: str) -> None:
    """Ask `pod`'s task to fence too (its agent watches its task's pods: agent.py)."""
    name = pod["metadata"]["name"]
    why = "every fencer of the release runs on node %s: its loss would leave no task to fence its pods" % node
    log("asking %s (node %s) to fence too: %s" % (name, pod["spec"]["nodeName"], why))
    condition = {
        "type": DEPUTY,
        "status": "True",
        "reason": "FencersOnOneNode",
        "message": why,
        "lastTransitionTime": now_rfc3339(),
    }
    patch_condition(namespace, name, condition)
    EVENTS.record("AskedToFence", "asked %s to fence too: %s" % (name, why))


def lost_peers(pods: list[dict[str, Any]], fenced: set[str], hosts: list[str]) -> set[str]:
    """The names of `pods` lost with their node (fenced before, reason NodeLost, or just now: in
    `fenced`) that back one of `hosts`, the coordinator's TF_CONFIG: the evaluator, TensorBoard and
    the notebook are not its peers, and their loss is no reason to restart it."""
    keys = {host_key(h) for h in hosts}
    return {
        p["metadata"]["name"]
        for p in pods
        if (p.get("status", {}).get("reason") == "NodeLost" or p["metadata"]["name"] in fenced) and pod_host(p) in keys
    }


def fence_loop(stop_event: threading.Event, on_peer_lost: Callable[[list[str]], None] | None = None) -> None:
    """Fence stranded pods, checked every TF_CLUSTER_FENCE_SECONDS against the release's pods as a
    watch keeps them (no request per check). With `on_peer_lost` (the ParameterServer
    coordinator), call it once when a pod of the release is newly lost with its node:
    TensorFlow's coordinator waits on RPCs to a worker whose machine vanished (no reset, no error)
    until TCP gives up, ~15 minutes; restarting it reconnects it to the replacement. When every
    live fencer sits on one node, ask a task on another node to fence too (deputy_wanted)."""
    every = float(env("TF_CLUSTER_FENCE_SECONDS", "0"))
    after = float(env("TF_CLUSTER_FENCE_AFTER", "10"))
    self_fence = float(env("TF_CLUSTER_SELF_FENCE", "0") or 0)
    namespace, selector = env("TF_CLUSTER_NAMESPACE"), env("TF_CLUSTER_RELEASE_SELECTOR")
    pods = Informer(
        "/api/v1/namespaces/%s/pods" % namespace,
        label_selector=selector,
        name="the release's pods",
        keep=slim_pod,
        page=250,
    ).start()
    known: set[str] | None
    warned, known = False, None
    hosts = peer_hosts(env("TF_CONFIG")) if on_peer_lost is not None else []
    tasks = tasks_by_host(cluster_of(env("TF_CONFIG")))
    asked: set[str] = set()  # the deputies this fencer asked (once each)
    try:
        while not stop_event.wait(every):
            if pods.forbidden:
                log(
                    "cannot watch the release's pods to fence a lost node's (%s): the launcher's Role "
                    "must allow list and watch on pods" % pods.forbidden
                )
                return
            if not pods.synced.is_set():
                continue
            current = pods.snapshot()
            if pods.clock_offset is None:
                continue  # no answer from the API server yet to read its clock from
            try:
                # the deletion deadline is the API server's time: compared on its clock, not this node's
                fenced = fence_stranded(namespace, current, after, time.time() + pods.clock_offset, self_fence)
                wanted = None if fenced else deputy_wanted(current, tasks)
                if wanted is not None and wanted[0]["metadata"]["name"] not in asked:
                    deputize(namespace, *wanted)
                    asked.add(wanted[0]["metadata"]["name"])
                warned = False
            except (ConfigError, urllib.error.URLError, OSError, ValueError, KeyError) as e:
                if not warned:  # an API outage: said once, retried quietly
                    log("cannot fence pods stranded on lost nodes (will retry): %s" % e)
                    warned = True
                continue
            if on_peer_lost is not None:
                lost = lost_peers(current, set(fenced), hosts)
                if known is not None and lost - known:
                    pods.stop()  # before the restart: nothing more to fence from here
                    on_peer_lost(sorted(lost - known))
                    return
                known = lost
    finally:
        pods.stop()  # its watch closed now, not when it would end (minutes later)
