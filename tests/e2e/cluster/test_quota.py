"""A namespace a platform team hands out: a ResourceQuota that counts requests and limits, and a
LimitRange. The chart's defaults (resourceDefaults: requests for every container) are what let
its pods in; without them the quota refuses the `helm test` Pod (the control case)."""

from __future__ import annotations

import pytest
from test_cluster import helm_in, say

from tf_cluster import helm, kube

QUOTA = {"requests.cpu": "3", "requests.memory": "6Gi", "pods": "10"}


def quota(api, ns: str, *, limits: bool) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api)
    hard = dict(QUOTA, **({"limits.cpu": "6", "limits.memory": "12Gi"} if limits else {}))
    meta = client.V1ObjectMeta(name="team")
    core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(metadata=meta, spec={"hard": hard}))
    if limits:  # limits come from the namespace's LimitRange (the chart sets requests, not limits)
        item = {"type": "Container", "max": {"cpu": "2", "memory": "4Gi"}, "default": {"cpu": "1", "memory": "2Gi"}}
        core.create_namespaced_limit_range(ns, client.V1LimitRange(metadata=meta, spec={"limits": [item]}))


VALUES = helm.Values(set=("roles.worker.replicas=1", "tests.hookDeletePolicy=before-hook-creation"))


def test_a_quota_namespace_admits_the_release_and_helm_test_passes(api, ns):
    quota(api, ns, limits=True)
    h = helm_in(ns)
    r = h.install("q", VALUES, wait=False)
    assert r.returncode == 0, r.stderr
    snap = kube.wait_for_jobs(api, ns, "q", timeout=600, say=say)
    assert set(snap.states().values()) == {"Complete"}, kube.diagnostics(api, ns, "q")
    t = h.test("q", timeout="3m")
    assert t.returncode == 0, t.stdout + t.stderr
    from kubernetes import client

    used = client.CoreV1Api(api).read_namespaced_resource_quota("team", ns).status.used
    say(f"quota namespace: release trained and helm test passed; quota used {used}")


@pytest.mark.extended
def test_without_default_requests_the_quota_refuses_the_test_pod(api, ns):
    """The control: the same quota (requests only, no LimitRange) and the defaults emptied."""
    quota(api, ns, limits=False)
    h = helm_in(ns)
    off = ("resourceDefaults.test.cpu=", "resourceDefaults.test.memory=")
    r = h.install("q", helm.Values(set=VALUES.set, set_string=off), wait=False)
    assert r.returncode == 0, r.stderr
    t = h.test("q", timeout="1m")
    assert t.returncode != 0 and "must specify" in (t.stderr + t.stdout), t.stdout + t.stderr
    say("without requests the quota refused the helm test Pod: " + (t.stderr.strip().splitlines() or ["?"])[-1][:200])
