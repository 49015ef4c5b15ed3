"""Self-fencing: a task that cannot confirm it is still wanted stops its own program within a bound,
and the fence (fencing.py) acts only once that bound has passed, so that one task never runs in
two incarnations at once.

The fence marks Failed a pod whose node stopped answering, so that its Job starts a replacement
elsewhere. A node cut off from the control plane alone (a broken link to the API server, a
flapping kubelet) may still reach its peers and its storage: its task would train on beside its
replacement. So the agent watches its own pod, and when the API server has not answered for
TF_CLUSTER_SELF_FENCE seconds (nodeLoss.selfFenceSeconds), or the pod was deleted and has been not
Ready for that bound less the stop's time (the node is NotReady to the control plane while this
agent still hears it: a kubelet that stopped reporting, a one-way cut), or the pod was marked
Failed while it runs, it tells the training container to stop the program (which then exits 6:
its Job starts it again without counting). Its watch ends every quarter of the bound and is
opened again: a round trip each time, since only an answer to a request proves the server heard
this node (events on a stream opened before a cut can keep flowing one way).

The fence, in turn, marks a pod Failed only once its Ready condition has been False for that
bound plus TF_CLUSTER_FENCE_AFTER, on the API server's clock. The node lifecycle controller sets
it False a node-monitor grace (50 s) after the kubelet's last status, which came no earlier than
~10 s before the cut; the agent heard its last answer no later than the cut. So the program has
been stopping for at least grace + fenceAfter - 10 s (50 s with the defaults) when the fence
acts, and is stopped once the launcher's stop grace has passed.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from .common import env, log
from .fencing import not_ready_since
from .informer import Informer
from .kubeapi import silent_for
from .peerpods import index_selector, slim_pod
from .tfconfig import cluster_of


def stop_reason(
    pod: dict[str, Any] | None, silence: float, bound: float, server_now: float | None = None, margin: float = 0
) -> str | None:
    """Why this task must stop its program now, or None: its pod was marked Failed while it runs
    (the fence, or anyone: its Job starts a replacement); it was deleted and has been not Ready
    for the bound less `margin` (the stop's own time) on the API server's clock (`server_now`),
    so its node is NotReady to the control plane while this agent still hears it (a kubelet that
    stopped reporting, a one-way cut) and the fence acts at the bound; or the API server has not
    answered for `bound` seconds (this node may be cut off, and the fence may act then)."""
    status = (pod or {}).get("status", {})
    if status.get("phase") == "Failed":
        return "this pod was marked Failed (%s) while its task runs: its Job starts a replacement" % (
            status.get("reason") or "no reason given"
        )
    since = not_ready_since(pod) if pod and pod.get("metadata", {}).get("deletionTimestamp") else None
    if since is not None and server_now is not None and server_now - since >= bound - margin:
        return (
            "this pod was deleted and has been not Ready for %ds (its node is NotReady to the control plane, "
            "nodeLoss.selfFenceSeconds: %ds): the fence may start this task's replacement elsewhere"
            % (server_now - since, bound)
        )
    if silence >= bound:
        return (
            "no answer from the API server for %ds (nodeLoss.selfFenceSeconds: %ds): this node may be cut "
            "off from the control plane, and the fence may start this task's replacement elsewhere" % (silence, bound)
        )
    return None


def task_pods(bound: float) -> Informer | None:
    """This task's pods (this one and its earlier ones: its Job index's), watched by its agent: the
    self-fence reads its own, the deputy's request (fencing.DEPUTY) may be on any. With a self-fence
    `bound`, renewed every quarter of it (the API server's answers); None outside a release's pod."""
    name, namespace = env("TF_CLUSTER_POD_NAME"), env("TF_CLUSTER_NAMESPACE")
    role, index = env("TF_CLUSTER_ROLE"), int(env("TF_TASK_INDEX", "0") or 0)
    hosts = cluster_of(env("TF_CONFIG")).get(role) or []
    selector = index_selector(str(hosts[index])) if name and namespace and index < len(hosts) else None
    if not selector:
        return None
    return Informer(
        "/api/v1/namespaces/%s/pods" % namespace,
        label_selector=selector,
        name="this task's pods",
        keep=slim_pod,
        answer_within=bound / 4 if bound > 0 else None,  # a round trip this often
    ).start()


def self_fence_loop(
    stop: threading.Event, bound: float, on_stop: Callable[[str], None], pods: Informer, every: float = 5.0
) -> None:
    """Read this pod from `pods` (task_pods(bound)) and call `on_stop(why)` once when the program
    must stop; return then, or when `stop` is set."""
    started = time.monotonic()
    margin = float(env("TF_CLUSTER_STOP_GRACE", "30") or 30) + every  # stopped before the fence's bound
    name = env("TF_CLUSTER_POD_NAME")
    while not stop.wait(every):
        if pods.forbidden:
            log("cannot watch this pod to self-fence (%s): the Role must allow watch on pods" % pods.forbidden)
            return
        silence = silent_for()
        current = [p for p in pods.snapshot() if p["metadata"]["name"] == name]
        why = stop_reason(
            current[0] if current else None,
            time.monotonic() - started if silence is None else silence,
            bound,
            None if pods.clock_offset is None else time.time() + pods.clock_offset,
            margin,
        )
        if why:
            log("self-fence: " + why)
            on_stop(why)
            return
