"""The gang after a task finished: a gang scheduler binds no pod of a group until the group's size
of its pods are pending or placed, and a pod that has finished (Succeeded) counts no more. That holds
for Kubernetes' own gang (a PodGroup's `minCount`) and for scheduler-plugins' coscheduling (its
PodGroup's `minMember`: its PreFilter counts the pods of the scheduler's informer, which leaves the
Succeeded and Failed ones out). So once a task of the run has finished, a replacement of another (a
follower evicted as the chief completed, a worker lost at the last step) could never be placed: the
group can no longer reach its size, and the release would wait forever. The agent of a task whose
program exited 0 lowers the run's size to 1 (TF_CLUSTER_POD_GROUP names the group,
TF_CLUSTER_POD_GROUP_API its API), so those replacements are placed one by one, start, read that
the run is over and end. Until a task has finished the gang keeps its size: a run whose every pod
was preempted starts again whole. (Volcano counts a job's Succeeded tasks: nothing to lower there.)"""

from __future__ import annotations

import time
import urllib.error
from typing import Any, Callable, TypeVar
from urllib.parse import quote

from .common import env, log
from .events import EVENTS
from .kubeapi import api

TRAINING_CONTAINER = "tensorflow"  # the pod's training container (the chart's _pod.tpl)
FIELD_MANAGER = "tf-cluster-agent"  # names the agent where Helm or Argo CD meet its field
T = TypeVar("T")


def transient(e: Exception) -> bool:
    """An error worth another try before the deadline: throttled, the server's, or no answer."""
    if isinstance(e, urllib.error.HTTPError):
        return e.code == 429 or e.code >= 500
    return isinstance(e, OSError)


# where each gang API a finished task lowers holds the group's size (the path in the object)
SIZE_FIELD = {
    "scheduling.k8s.io/v1beta1": ("spec", "schedulingPolicy", "gang", "minCount"),
    "scheduling.x-k8s.io/v1alpha1": ("spec", "minMember"),
}
NATIVE = "scheduling.k8s.io/v1beta1"  # when TF_CLUSTER_POD_GROUP_API is unset (the chart names the others alone)


def api_until(call: Callable[[], T], deadline: float, every: float = 1.0) -> T:
    """call() again while it fails in a transient way and the monotonic `deadline` is ahead; the
    last error otherwise (urllib's errors are OSErrors; a body that is not JSON, a ValueError)."""
    while True:
        try:
            return call()
        except (OSError, ValueError) as e:
            if not transient(e) or time.monotonic() >= deadline:
                raise
            time.sleep(every)


def program_exit_code(namespace: str, pod: str, deadline: float, every: float = 1.0) -> int | None:
    """The training container's exit code, as its pod's status says it (the kubelet reports it as
    it stops the agent); None when the status has none by the monotonic `deadline`, or the API
    refuses the read."""
    path = "/api/v1/namespaces/%s/pods?fieldSelector=%s" % (namespace, quote("metadata.name=" + pod))
    while True:
        try:
            items = api_until(lambda: api(path).get("items") or [], deadline, every)
        except (OSError, ValueError) as e:
            log("cannot read this pod's status (%s): the gang keeps its size" % e)
            return None
        for status in (items[0].get("status") or {}).get("containerStatuses") or [] if items else []:
            done = (status.get("state") or {}).get("terminated")
            if status.get("name") == TRAINING_CONTAINER and done:
                return int(done.get("exitCode", -1))
        if time.monotonic() >= deadline:
            return None
        time.sleep(every)


def group_path(namespace: str, group: str, api_version: str) -> str:
    return "/apis/%s/namespaces/%s/podgroups/%s" % (api_version, namespace, group)


def size_of(group: dict[str, Any], api_version: str) -> int | None:
    """The group's size as the object holds it; None when the field is absent or not a number."""
    value: object = group
    for key in SIZE_FIELD[api_version]:
        value = value.get(key) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def min_count(namespace: str, group: str, deadline: float, api_version: str = NATIVE) -> int | None:
    """The PodGroup's size now; None when it cannot be read by `deadline`."""
    field = SIZE_FIELD[api_version][-1]
    try:
        found = api_until(lambda: api(group_path(namespace, group, api_version)), deadline)
    except (OSError, ValueError) as e:
        log("cannot read %s (%s): the gang keeps its %s" % (group, e, field))
        return None
    size = size_of(found, api_version)
    if size is None:
        log("%s holds no number at %s: the gang keeps its %s" % (group, ".".join(SIZE_FIELD[api_version]), field))
    return size


def relax(namespace: str, group: str, deadline: float | None = None, api_version: str = NATIVE) -> bool:
    """Lower the PodGroup `group`'s size to 1 (a merge patch, as the agent's field manager)."""
    path = group_path(namespace, group, api_version) + "?fieldManager=" + FIELD_MANAGER
    body: dict[str, Any] = {}
    node = body
    *parents, field = SIZE_FIELD[api_version]
    for key in parents:
        node = node.setdefault(key, {})
    node[field] = 1
    deadline = time.monotonic() if deadline is None else deadline
    try:
        api_until(lambda: api(path, "PATCH", body), deadline)
        return True
    except (OSError, ValueError) as e:
        code = getattr(e, "code", None)
        log(
            "cannot lower %s's %s (%s): a task replaced from now on waits for the whole gang%s"
            % (
                group,
                field,
                "HTTP %d" % code if code else e,
                "; give the Role get and patch on podgroups" if code == 403 else "",
            )
        )
        return False


def relax_once_finished(wait: float = 10.0) -> None:
    """Called as the agent stops: when the gang is still whole and this task's program exited 0,
    lower the gang's size to 1. One GET when another task's agent did it already."""
    group, namespace, pod = env("TF_CLUSTER_POD_GROUP"), env("TF_CLUSTER_NAMESPACE"), env("TF_CLUSTER_POD_NAME")
    if not (group and namespace and pod):
        return
    api_version = env("TF_CLUSTER_POD_GROUP_API") or NATIVE
    if api_version not in SIZE_FIELD:
        log(
            "TF_CLUSTER_POD_GROUP_API=%s: this agent lowers the size of %s only; the gang keeps its size"
            % (api_version, " and ".join(SIZE_FIELD))
        )
        return
    field = SIZE_FIELD[api_version][-1]
    deadline = time.monotonic() + wait
    now = min_count(namespace, group, deadline, api_version)
    if now is None or now <= 1:
        return
    if program_exit_code(namespace, pod, deadline) != 0:
        return
    if relax(namespace, group, deadline, api_version):
        log(
            "this task finished: %s's %s is now 1 (was %d), so a task replaced from now on is placed "
            "on its own (the gang can no longer form whole)" % (group, field, now)
        )
        EVENTS.record(
            "GangRelaxed",
            "this task finished: the PodGroup %s's %s is now 1 (was %d), so a task replaced from now "
            "on is placed on its own and ends with the run" % (group, field, now),
        )
