"""Lifecycle moments as Kubernetes Events on the task's pod: one Event per reason, its count updated
in place, at a pace that keeps a whole release's updates under RELEASE_RATE a second."""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request

from . import kubeapi
from .common import ConfigError, env, log, now_rfc3339
from .kubeapi import api
from .tfconfig import cluster_of


class Events:
    """Kubernetes Events on this task's pod for the lifecycle moments a platform's tools read
    (`kubectl describe pod`, `kubectl events`, Argo CD, event exporters): one Event per reason,
    its count and message updated in place when the moment recurs (at most once every `period`
    seconds per reason), so a wait of an hour is one Event, not hundreds. Without a token or
    a pod name (run-local, rbac off) it does nothing; a refused request is logged once, then it
    stops trying: the task's work never depends on an Event."""

    EVERY = 30.0  # seconds between two updates of one Event, in a release of up to 300 tasks
    RELEASE_RATE = 10.0  # in a larger one: updates a second of all its tasks together, at most

    def __init__(self) -> None:
        self.on: bool | None = None  # decided at the first record: the environment is read then
        self.sent: dict[str, list[float]] = {}  # reason -> [count, last update (monotonic)]
        self.lock = threading.Lock()

    def period(self, tasks: int) -> float:
        """Seconds between two updates of one Event in a release of `tasks` tasks: EVERY, or longer
        where every task updating every EVERY seconds would pass RELEASE_RATE (4096 tasks all
        waiting for their peers: one update each per 410 s, not 136 a second)."""
        return max(self.EVERY, tasks / self.RELEASE_RATE) if self.EVERY else 0.0

    def record(self, reason: str, message: str, warning: bool = False) -> None:
        if self.on is None:
            self.pod, self.namespace = env("TF_CLUSTER_POD_NAME"), env("TF_CLUSTER_NAMESPACE")
            self.on = bool(self.pod and self.namespace and os.path.exists(os.path.join(kubeapi.SA_DIR, "token")))
            try:
                tasks = sum(len(hosts) for hosts in cluster_of(env("TF_CONFIG")).values())
            except ConfigError:
                tasks = 1
            self.every = self.period(tasks)
        if not self.on:
            return
        with self.lock:
            count, last = self.sent.get(reason, [0, 0.0])
            now = time.monotonic()
            if count and now - last < self.every:
                self.sent[reason][0] = count + 1  # counted; sent with the next update
                return
            self.sent[reason] = [count + 1, now]
            stamp = now_rfc3339()
            name = "%s.tf-cluster-%s" % (self.pod, reason.lower())
            path = "/api/v1/namespaces/%s/events" % self.namespace
            try:
                if not count:
                    api(
                        path,
                        method="POST",
                        body={
                            "metadata": {"name": name},
                            "involvedObject": {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "namespace": self.namespace,
                                "name": self.pod,
                                "uid": env("TF_CLUSTER_POD_UID") or None,
                            },
                            "reason": reason,
                            "message": message[:1024],
                            "type": "Warning" if warning else "Normal",
                            "source": {"component": "tf-cluster-launcher"},
                            "firstTimestamp": stamp,
                            "lastTimestamp": stamp,
                            "count": 1,
                        },
                        content_type="application/json",
                    )
                else:
                    api(
                        path + "/" + name,
                        method="PATCH",
                        body={"message": message[:1024], "lastTimestamp": stamp, "count": count + 1},
                    )
            except (urllib.error.URLError, OSError, ValueError) as e:
                self.on = False
                log(
                    "cannot record Kubernetes Events (%s): the task goes on; `kubectl logs` has every "
                    "moment" % getattr(e, "code", e)
                )


EVENTS = Events()
