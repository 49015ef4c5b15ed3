"""Names stay valid DNS labels; 4096 tasks fit TF_CONFIG; what cannot fit fails clearly."""

from __future__ import annotations

import json
import re

import pytest

from rendering import pods, render, render_text
from tf_cluster import helm, manifests
from tf_cluster.errors import RenderError

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LIMIT = 131072


def test_every_name_and_hostname_is_a_dns_label(helm_major):
    values = {
        "strategy": "parameterServer",
        "tensorboard": {"enabled": True},
        "storage": {"logs": {"type": "pvc"}},
        "roles": {
            "chief": {"replicas": 1},
            "worker": {"replicas": 12},
            "ps": {"replicas": 3},
            "evaluator": {"replicas": 1},
        },
    }
    release = "team-a-nightly-train"
    for doc in render(values, helm_major=helm_major, release=release):
        assert DNS_LABEL.match(doc["metadata"]["name"]) and len(doc["metadata"]["name"]) <= 63
    for p in pods(values, helm_major=helm_major, release=release):
        assert len(p.hostname) <= 63 and DNS_LABEL.match(p.hostname)


@pytest.mark.parametrize("suffix", ["none", "auto"])
def test_4096_tasks_fit_one_environment_string(suffix, helm_major):
    values = {"fullnameOverride": "t", "run": {"suffix": suffix}, "roles": {"worker": {"replicas": 4096}}}
    docs = helm.parse(render_text(values, helm_major=helm_major))
    job = next(d for d in docs if d["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = manifests.resolve_env(
        container, index=4095, namespace="default", node_cpus=1, config_maps=manifests.config_maps(docs)
    )
    worst = env["TF_CONFIG"]
    assert len("TF_CONFIG=" + worst) + 1 <= LIMIT
    assert worst.count(":2222") == 4096
    assert json.loads(worst)["task"] == {"type": "worker", "index": 4095}


def test_a_pod_carries_a_reference_to_the_cluster_not_the_cluster(helm_major):
    """TF_CONFIG's cluster is stored once per run (one ConfigMap), so a 4096-task release's pods stay
    small: etcd holds O(N) bytes for it, not O(N²)."""
    values = {"fullnameOverride": "t", "roles": {"worker": {"replicas": 4096}}}
    docs = helm.parse(render_text(values, helm_major=helm_major))
    (job,) = [d for d in docs if d["kind"] == "Job"]
    template = json.dumps(job["spec"]["template"], separators=(",", ":"))
    assert len(template) <= 20_000, f"a pod's template is {len(template)} bytes"
    address = re.compile(r"-worker-[0-9a-f]{6}-[0-9]+\.t:2222")  # a task's address in the cluster spec
    assert not address.search(template)
    holders = [d for d in docs if address.search(json.dumps(d))]
    name = job["metadata"]["name"].replace("-worker-", "-tf-config-")
    assert [(d["kind"], d["metadata"]["name"]) for d in holders] == [("ConfigMap", name)]
    assert len(address.findall(json.dumps(holders[0]))) == 4096
    assert holders[0]["immutable"] is True


def test_a_cluster_that_cannot_fit_fails_with_advice(helm_major):
    with pytest.raises(RenderError) as e:
        render_text({"roles": {"worker": {"replicas": 4096}}}, helm_major=helm_major)
    msg = str(e.value)
    assert "TF_CONFIG for 4096 training tasks would be" in msg
    assert "fullnameOverride" in msg and "131072" in msg
