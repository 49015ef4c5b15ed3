"""Quota-safe defaults: every container requests cpu and memory unless its own resources say
otherwise (a ResourceQuota namespace refuses pods without requests), every emptyDir has a
sizeLimit, and TF's threads follow the CPU limit, else the CPU request."""

from __future__ import annotations

import pytest

from rendering import render
from tf_cluster import manifests


def containers(docs):
    for d in docs:
        spec = d.get("spec", {})
        pod = spec.get("template", {}).get("spec") if d["kind"] in ("Job", "Deployment") else spec
        if d["kind"] in ("Job", "Deployment", "Pod"):
            for c in pod["containers"]:
                yield d, c, pod


def threads_resource(container):
    ref = next(e for e in container["env"] if e["name"] == "TF_NUM_INTRAOP_THREADS")
    return ref["valueFrom"]["resourceFieldRef"]["resource"]


def test_by_default_every_container_requests_cpu_and_memory_and_every_empty_dir_is_bounded(helm_major):
    docs = render({"tensorboard": {"enabled": True}}, helm_major=helm_major)
    seen = set()
    for doc, c, pod in containers(docs):
        seen.add(doc["kind"])
        requests = (c.get("resources") or {}).get("requests") or {}
        assert {"cpu", "memory"} <= set(requests), (doc["metadata"]["name"], c.get("resources"))
        for v in pod.get("volumes", []):
            if "emptyDir" in v:
                assert v["emptyDir"].get("sizeLimit"), (doc["metadata"]["name"], v)
    assert seen == {"Job", "Deployment", "Pod"}  # training, TensorBoard, helm test
    job = next(d for d in docs if d["kind"] == "Job")
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}}
    assert threads_resource(c) == "requests.cpu"  # no limit: the request, not the node's cores
    for pod in manifests.pods(docs, node_cpus=64):  # what run-local and the kubelet resolve
        assert pod.env["TF_NUM_INTRAOP_THREADS"] == "1"


@pytest.mark.parametrize(
    "resources,want,threads",
    [
        # a limit without a request is also requested, as Kubernetes would (written out for quotas and linters)
        (
            {"limits": {"cpu": "4", "memory": "8Gi"}},
            {"limits": {"cpu": "4", "memory": "8Gi"}, "requests": {"cpu": "4", "memory": "8Gi"}},
            "limits.cpu",
        ),
        (
            {"limits": {"cpu": "500m"}},
            {"limits": {"cpu": "500m"}, "requests": {"cpu": "500m", "memory": "2Gi"}},
            "limits.cpu",
        ),
        ({"requests": {"cpu": "3"}}, {"requests": {"cpu": "3", "memory": "2Gi"}}, "requests.cpu"),
    ],
)
def test_a_roles_own_resources_win_and_are_never_contradicted(resources, want, threads):
    """Never a request above a limit: a default fills only a resource the role leaves unset."""
    docs = render({"roles": {"worker": {"resources": resources}}})
    c = next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"] == want and threads_resource(c) == threads


def test_defaults_can_be_turned_off():
    values = {
        "resourceDefaults": {"training": {"cpu": "", "memory": ""}, "test": {"cpu": "", "memory": ""}},
        "storage": {"tmp": {"sizeLimit": ""}},
    }
    docs = render(values)
    job = next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]
    assert "resources" not in job["containers"][0]
    assert threads_resource(job["containers"][0]) == "limits.cpu"  # the node's cores, as before 0.3.0
    assert next(v for v in job["volumes"] if v["name"] == "tmp") == {"name": "tmp", "emptyDir": {}}
    test_pod = next(d for d in docs if d["kind"] == "Pod")
    assert "resources" not in test_pod["spec"]["containers"][0]


def test_storage_size_bounds_an_empty_dir_volume():
    docs = render({"storage": {"checkpoints": {"type": "emptyDir", "size": "3Gi"}, "tmp": {"sizeLimit": "500Mi"}}})
    volumes = {v["name"]: v for v in next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["checkpoints"]["emptyDir"] == {"sizeLimit": "3Gi"}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": "500Mi"}
