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


def program_exit_code(namespace: str, pod: str, wait: float = 10.0, every: float = 1.0) -> int | None:
    """The training container's exit code, as its pod's status says it (the kubelet reports it as
    it stops the agent); None when the status has none within `wait` seconds or cannot be read."""
    path = "/api/v1/namespaces/%s/pods?fieldSelector=%s" % (namespace, quote("metadata.name=" + pod))
    deadline = time.monotonic() + wait
    while True:
        try:
            items = api(path).get("items") or []
        except (OSError, ValueError) as e:  # urllib's errors are OSErrors; a refusal is final
            log("cannot read this pod's status (%s): the gang keeps its minCount" % e)
            return None
        for status in (items[0].get("status") or {}).get("containerStatuses") or [] if items else []:
            done = (status.get("state") or {}).get("terminated")
            if status.get("name") == TRAINING_CONTAINER and done:
                return int(done.get("exitCode", -1))
        if time.monotonic() >= deadline:
            return None
        time.sleep(every)


def relax(namespace: str, group: str) -> bool:
    """Lower the PodGroup `group`'s minCount to 1 (a merge patch: a no-op once it is 1)."""
    path = "/apis/scheduling.k8s.io/v1beta1/namespaces/%s/podgroups/%s" % (namespace, group)
    try:
        api(path, "PATCH", {"spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}})
    except urllib.error.HTTPError as e:
        log(
            "cannot lower %s's minCount (HTTP %d): a replacement of a task lost from now on waits for the "
            "whole gang; give the Role patch on podgroups" % (group, e.code)
        )
        return False
    except OSError as e:
        log("cannot lower %s's minCount (%s)" % (group, e))
        return False
    return True


def relax_once_finished() -> None:
    """Called as the agent stops: when this task's program exited 0, lower the gang's minCount."""
    group, namespace, pod = env("TF_CLUSTER_POD_GROUP"), env("TF_CLUSTER_NAMESPACE"), env("TF_CLUSTER_POD_NAME")
    if not (group and namespace and pod):
        return
    code = program_exit_code(namespace, pod)
    if code != 0:
        return
    if relax(namespace, group):
        log(
            "this task finished: %s's minCount is now 1, so a replacement of a task lost from now on is "
            "placed on its own (the gang can no longer form whole)" % group
        )
        EVENTS.record(
            "GangRelaxed",
            "this task finished: the PodGroup %s's minCount is now 1, so a task replaced from now on is "
            "placed on its own and ends with the run" % group,
        )
