"""Names stay valid DNS labels; 4096 tasks fit TF_CONFIG; what cannot fit fails clearly."""

from __future__ import annotations

import re

import pytest

from rendering import pods, render, render_text
from tf_cluster import helm
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
    text = render_text(values, helm_major=helm_major)
    job = next(d for d in helm.parse(text) if d["kind"] == "Job")
    tf_config = next(
        e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"
    )
    worst = tf_config.replace("$(TF_TASK_INDEX)", "4095")
    assert len("TF_CONFIG=" + worst) + 1 <= LIMIT
    assert worst.count(":2222") == 4096


def test_a_cluster_that_cannot_fit_fails_with_advice(helm_major):
    with pytest.raises(RenderError) as e:
        render_text({"roles": {"worker": {"replicas": 4096}}}, helm_major=helm_major)
    msg = str(e.value)
    assert "TF_CONFIG for 4096 training tasks would be" in msg
    assert "fullnameOverride" in msg and "131072" in msg
