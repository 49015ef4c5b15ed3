"""The gang after a task finished: Kubernetes' gang scheduling (a PodGroup's `minCount`) binds no
pod of the group until `minCount` of its pods are pending or placed, and a pod that has finished
(Succeeded) counts no more. So once a task of the run has finished, a replacement of another (a
follower evicted as the chief completed, a worker lost at the last step) could never be placed:
the group can no longer reach `minCount`, and the release would wait forever. The agent of a task
whose program exited 0 lowers the run's `minCount` to 1 (TF_CLUSTER_POD_GROUP names it), so those
replacements are placed one by one, start, read that the run is over and end. Until a task has
finished the gang keeps its size: a run whose every pod was preempted starts again whole."""

from __future__ import annotations

import time
import urllib.error
from urllib.parse import quote

from .common import env, log
from .events import EVENTS
from .kubeapi import api

TRAINING_CONTAINER = "tensorflow"  # the pod's training container (the chart's _pod.tpl)
FIELD_MANAGER = "tf-cluster-agent"  # names the agent where Helm or Argo CD meet its field


def transient(e: Exception) -> bool:
    """An error worth another try before the deadline: throttled, the server's, or no answer."""
    if isinstance(e, urllib.error.HTTPError):
        return e.code == 429 or e.code >= 500
    return isinstance(e, OSError)


def program_exit_code(namespace: str, pod: str, deadline: float, every: float = 1.0) -> int | None:
    """The training container's exit code, as its pod's status says it (the kubelet reports it as
    it stops the agent); None when the status has none by the monotonic `deadline`, or the API
    refuses the read."""
    path = "/api/v1/namespaces/%s/pods?fieldSelector=%s" % (namespace, quote("metadata.name=" + pod))
    while True:
        try:
            items = api(path).get("items") or []
        except (OSError, ValueError) as e:  # urllib's errors are OSErrors
            if not transient(e) or time.monotonic() >= deadline:
                log("cannot read this pod's status (%s): the gang keeps its minCount" % e)
                return None
            items = []
        for status in (items[0].get("status") or {}).get("containerStatuses") or [] if items else []:
            done = (status.get("state") or {}).get("terminated")
            if status.get("name") == TRAINING_CONTAINER and done:
                return int(done.get("exitCode", -1))
        if time.monotonic() >= deadline:
            return None
        time.sleep(every)


def min_count(namespace: str, group: str, deadline: float) -> int | None:
    """The PodGroup's minCount now; None when it cannot be read by `deadline`."""
    path = "/apis/scheduling.k8s.io/v1beta1/namespaces/%s/podgroups/%s" % (namespace, group)
    while True:
        try:
            return int(((api(path).get("spec") or {}).get("schedulingPolicy") or {}).get("gang", {}).get("minCount", 0))
        except (OSError, ValueError) as e:
            if not transient(e) or time.monotonic() >= deadline:
                log("cannot read %s (%s): the gang keeps its minCount" % (group, e))
                return None
            time.sleep(1.0)


def relax(namespace: str, group: str, deadline: float | None = None) -> bool:
    """Lower the PodGroup `group`'s minCount to 1 (a merge patch, as the agent's field manager)."""
    path = "/apis/scheduling.k8s.io/v1beta1/namespaces/%s/podgroups/%s?fieldManager=%s" % (
        namespace,
        group,
        FIELD_MANAGER,
    )
    deadline = time.monotonic() if deadline is None else deadline
    while True:
        try:
            api(path, "PATCH", {"spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}})
            return True
        except (OSError, ValueError) as e:
            if transient(e) and time.monotonic() < deadline:
                time.sleep(1.0)
                continue
            code = getattr(e, "code", None)
            log(
                "cannot lower %s's minCount (%s): a task replaced from now on waits for the whole gang%s"
                % (
                    group,
                    "HTTP %d" % code if code else e,
                    "; give the Role get and patch on podgroups" if code == 403 else "",
                )
            )
            return False


def relax_once_finished(wait: float = 10.0) -> None:
    """Called as the agent stops: when the gang is still whole and this task's program exited 0,
    lower the gang's minCount to 1. One GET when another task's agent did it already."""
    group, namespace, pod = env("TF_CLUSTER_POD_GROUP"), env("TF_CLUSTER_NAMESPACE"), env("TF_CLUSTER_POD_NAME")
    if not (group and namespace and pod):
        return
    deadline = time.monotonic() + wait
    now = min_count(namespace, group, deadline)
    if now is None or now <= 1:
        return
    if program_exit_code(namespace, pod, deadline) != 0:
        return
    if relax(namespace, group, deadline):
        log(
            "this task finished: %s's minCount is now 1 (was %d), so a task replaced from now on is placed "
            "on its own (the gang can no longer form whole)" % (group, now)
        )
        EVENTS.record(
            "GangRelaxed",
            "this task finished: the PodGroup %s's minCount is now 1 (was %d), so a task replaced from now "
            "on is placed on its own and ends with the run" % (group, now),
        )
