"""Self-fencing: a task that cannot confirm it is still wanted stops its own program within a bound,
and the fence (fencing.py) acts only once that bound has passed, so that one task never runs in
two incarnations at once.

The fence marks Failed a pod whose node stopped answering, so that its Job starts a replacement
elsewhere. A node cut off from the control plane alone (a broken link to the API server, a
flapping kubelet) may still reach its peers and its storage: its task would train on beside its
replacement. So the agent watches its own pod, and when the API server has not been heard for
TF_CLUSTER_SELF_FENCE seconds (nodeLoss.selfFenceSeconds), or the pod was deleted and has been not
Ready for that bound less the stop's time (the node is NotReady to the control plane while this
agent still hears it: a kubelet that stopped reporting, a one-way cut), or the pod was marked
Failed while it runs, it tells the training container to stop the program (which then exits 6:
its Job starts it again without counting).

Heard means either of two proofs (unheard_for()):
- an answer to a request this process sent (a round trip: the server heard this node then);
- a line of its watch (an event, or the bookmark the API server sends about every minute on a
  quiet watch) with a newer resourceVersion than the last, that left this pod Ready, counted the
  stop's time and LINE_LAG_S earlier. Such a line proves only
  the server's side of the link (a cut can leave an open stream flowing one way), but the fence's
  clock starts when the pod turns not Ready, which the watch would have said before that line: so
  the fence acts no sooner than the bound after it, and the task has stopped by then.
While the pod is Ready and the watch brings its minutely bookmark, a task sends a request only
when its watch ends (every 10-20 minutes: informer.WATCH_SECONDS). The API server sends a watch's
bookmark only once some pod of the cluster changed after the watch began (its resourceVersion
moved on): a busy cluster's pods do that anyway; in a quiet one, the release's pulse does
(pulse_loop: the first fencer writes a condition on its own pod every PULSE_SECONDS, 1.3
requests a minute for the release).
When the pod is not Ready, or the last proof is a minute short of the bound (asks_from: no
bookmarks, as with a pulse that stopped or an API server without a watch cache), its watch ends
every quarter of the bound, a round trip each, as a request's answer is then the only proof; it
logs when that starts and ends. Not Ready for the bound (less the stop's time) with no answer
for a quarter of it and more, it stops: the fence's clock started when the pod turned not Ready.

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

from .common import ConfigError, env, log, now_rfc3339
from .fencing import is_ready, not_ready_since, patch_condition
from .informer import Informer
from .kubeapi import answered_at
from .peerpods import index_selector, slim_pod
from .tfconfig import cluster_of


def stop_reason(
    pod: dict[str, Any] | None,
    silence: float,
    bound: float,
    server_now: float | None = None,
    margin: float = 0,
    answer_age: float | None = None,
    gone: bool = False,
) -> str | None:
    """Why this task must stop its program now, or None:
    - its pod was marked Failed while it runs (the fence, or anyone: its Job starts a replacement);
    - its pod, seen before, is gone from the API (force-deleted, or removed with its node): its Job
      starts a replacement at once;
    - it has been not Ready for the bound less `margin` (the stop's own time) on the API server's
      clock (`server_now`), and it was deleted (its node is NotReady to the control plane while
      this agent still hears it: a kubelet that stopped reporting) or the API server has not
      answered a request for ANSWER_EVERY of the bound and more (`answer_age`: it asks that often
      while not Ready): the fence's clock started then, and it acts at the bound;
    - or the API server has not been heard for `bound` seconds (`silence`, unheard_for: this node
      may be cut off, and the fence may act then)."""
    status = (pod or {}).get("status", {})
    if status.get("phase") == "Failed":
        return "this pod was marked Failed (%s) while its task runs: its Job starts a replacement" % (
            status.get("reason") or "no reason given"
        )
    if gone:
        return (
            "this pod is gone from the API server (force-deleted, or removed with its node): its Job starts "
            "a replacement"
        )
    since = not_ready_since(pod) if pod else None
    if since is not None and server_now is not None and server_now - since >= bound - margin:
        if pod and pod.get("metadata", {}).get("deletionTimestamp"):
            return (
                "this pod was deleted and has been not Ready for %ds (its node is NotReady to the control plane, "
                "nodeLoss.selfFenceSeconds: %ds): the fence may start this task's replacement elsewhere"
                % (server_now - since, bound)
            )
        if answer_age is None or answer_age >= bound * ANSWER_EVERY + ANSWER_SLACK_S:
            return (
                "this pod has been not Ready for %ds and the API server has not answered for %s "
                "(nodeLoss.selfFenceSeconds: %ds): this node may be cut off from the control plane, and the fence "
                "may start this task's replacement elsewhere"
                % (server_now - since, "ever" if answer_age is None else "%ds" % answer_age, bound)
            )
    if silence >= bound:
        return (
            "no answer from the API server for %ds (nodeLoss.selfFenceSeconds: %ds): this node may be cut "
            "off from the control plane, and the fence may start this task's replacement elsewhere" % (silence, bound)
        )
    return None


def task_pods() -> Informer | None:
    """This task's pods (this one and its earlier ones: its Job index's), watched by its agent: the
    self-fence reads its own, the deputy's request (fencing.DEPUTY) may be on any. Its watches last
    their usual 10-20 minutes, the first too, unless the self-fence asks for answers (its first check
    does if it needs them, ending the open watch then); None outside a release's pod."""
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
    ).start()


# While the agent asks for round trips (its pod not Ready, or its watch's lines stopped), a watch ends
# every this fraction of the bound: a request then, answered in ANSWER_SLACK_S at most when all is well.
ANSWER_EVERY = 0.25
ANSWER_SLACK_S = 15.0

# A watch line counts as heard this much earlier again than the stop's margin: what may pass between
# the node lifecycle controller stamping the pod's Ready=False (the fence's clock) and this agent
# reading the line before that event (the write's queueing, the watch cache's lag, a lossy link's
# retransmits, this process' other threads). Answers to requests need none: the pod turns not Ready
# a node-monitor grace (~40 s) after the cut at the earliest.
LINE_LAG_S = 30.0

# The agent asks for round trips once unheard this long before the bound at the latest (or from half
# the bound, for short bounds): time for a few to be answered before it would stop.
ASK_BEFORE_S = 60.0

# How often the release's pulse writes (pulse_loop): below the API server's bookmark period (a
# minute), so that a watch's first bookmark, a minute after it opened, has a newer resourceVersion
# to carry (and every later one of that watch then does too).
PULSE_SECONDS = 45.0

# The pod condition the pulse writes (lastProbeTime: its last write).
PULSE = "tf-cluster.io/Pulse"


def pulse_loop(stop: threading.Event, every: float = PULSE_SECONDS, pod: str | None = None) -> None:
    """Write PULSE on this task's pod every `every` seconds until `stop` is set, so that the pods'
    resourceVersion moves on and every task's watch gets its bookmarks (the module's docstring).
    Run by the release's first fencer (it has the fence's pods/status patch). A failed write is
    said once, and tried again at the next beat. `pod`: another pod's name than this one's."""
    name, namespace = pod or env("TF_CLUSTER_POD_NAME"), env("TF_CLUSTER_NAMESPACE")
    failing = False
    while not stop.wait(every):
        condition = {
            "type": PULSE,
            "status": "True",
            "reason": "Pulse",
            "message": "written every %ds so that the release's watches get the API server's bookmarks "
            "(the self-fence's proof that it is heard)" % every,
            "lastProbeTime": now_rfc3339(),
        }
        try:
            patch_condition(namespace, name, condition)
            failing = False
        except (ConfigError, OSError, ValueError) as e:  # urllib's errors are OSErrors
            if not failing:
                log(
                    "cannot write the release's pulse (will retry; its tasks then ask the API server more often): %s"
                    % e
                )
            failing = True


def asks_from(bound: float) -> float:
    """From how many seconds unheard the agent asks for round trips although its pod is Ready."""
    return max(bound / 2, bound - ASK_BEFORE_S)


def pulse_writer(cluster: dict[str, list[Any]], notebook_chief: bool) -> tuple[str, int] | None:
    """The task that writes the release's pulse: the first of the chief's, the workers' and the
    ps' first tasks that has an agent (with an interactive coordinator, the chief is the notebook:
    TF_CLUSTER_HEARTBEAT); a fencer by rule (fencing.is_fencer) in every case."""
    for role in ("chief", "worker", "ps"):
        if cluster.get(role) and not (role == "chief" and notebook_chief):
            return role, 0
    return None


def unheard_for(now: float, answered: float | None, streamed_ready: float | None, since: float, margin: float) -> float:
    """Seconds the API server counts as unheard at `now` (monotonic): since its last answer to a
    request (`answered`), or, if that is sooner, `margin` seconds more than since the last watch
    line that left this pod Ready (`streamed_ready`); since `since` (the loop's start) before
    either."""
    proofs = [now - answered] if answered is not None else []
    if streamed_ready is not None:
        proofs.append(now - streamed_ready + margin)
    return min(proofs) if proofs else now - since


def self_fence_loop(
    stop: threading.Event, bound: float, on_stop: Callable[[str], None], pods: Informer, every: float = 5.0
) -> None:
    """Read this pod from `pods` (task_pods()) and call `on_stop(why)` once when the program
    must stop; return then, or when `stop` is set. Asks `pods` for round trips only while its
    stream does not prove the API server heard this node (the module's docstring)."""
    started = time.monotonic()
    margin = float(env("TF_CLUSTER_STOP_GRACE", "30") or 30) + every  # stopped before the fence's bound
    name = env("TF_CLUSTER_POD_NAME")
    streamed_ready: float | None = None
    seen, missing, quiet = False, 0, False
    while not stop.wait(every):
        if pods.forbidden:
            log("cannot watch this pod to self-fence (%s): the Role must allow watch on pods" % pods.forbidden)
            return
        streamed = pods.streamed_at  # read before the pod: the snapshot then includes that line
        current = [p for p in pods.snapshot() if p["metadata"]["name"] == name]
        pod = current[0] if current else None
        seen = seen or pod is not None
        missing = missing + 1 if seen and pod is None else 0
        ready = is_ready(pod)
        if ready and streamed is not None:
            streamed_ready = max(streamed, streamed_ready or streamed)
        now = time.monotonic()
        answered = answered_at()
        silence = unheard_for(now, answered, streamed_ready, started, margin + LINE_LAG_S)
        if ready and (silence >= asks_from(bound)) != quiet:
            quiet = not quiet
            log(
                "self-fence: no new line of this pod's watch for %s (the API server sends a bookmark about every "
                "minute once any pod changed: is the release's pulse written?): asking it for an answer every %ds"
                % ("its start" if streamed_ready is None else "%ds" % (now - streamed_ready), bound * ANSWER_EVERY)
                if quiet
                else "self-fence: this pod's watch brings lines again: no request until it ends"
            )
        pods.ask_answers(bound * ANSWER_EVERY if not ready or silence >= asks_from(bound) else None)
        why = stop_reason(
            pod,
            silence,
            bound,
            None if pods.clock_offset is None else time.time() + pods.clock_offset,
            margin,
            None if answered is None else now - answered,
            gone=missing >= 2,  # two checks apart: not a relist's instant
        )
        if why:
            log("self-fence: " + why)
            on_stop(why)
            return
