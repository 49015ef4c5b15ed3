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


@pytest.mark.parametrize(
    "values,advised,not_advised",
    [
        ({}, ['fullnameOverride to a short name (now "tf-tf-cluster")', "run.suffix to none"], ["fullyQualified"]),
        (
            {"fullnameOverride": "t", "run": {"suffix": "none"}, "tfConfig": {"fullyQualified": True}},
            ["tfConfig.fullyQualified to false"],
            ["fullnameOverride", "run.suffix"],
        ),
        (
            {"fullnameOverride": "t", "run": {"suffix": "none"}},
            [],
            ["fullnameOverride", "run.suffix", "fullyQualified"],
        ),
    ],
    ids=["defaults", "names-short-fqdn-on", "names-shortest"],
)
def test_past_the_ceiling_the_refusal_advises_only_what_can_still_be_shortened(values, advised, not_advised):
    """A refusal that tells a user to set what they set already sends them round in circles: past
    the ceiling it names only the names still longer than they can be, and always the replicas."""
    with pytest.raises(RenderError) as e:
        render_text({**values, "roles": {"worker": {"replicas": 8192}}})
    msg = str(e.value)
    assert "TF_CONFIG for 8192 training tasks would be" in msg and msg.rstrip().endswith("reduce roles.*.replicas")
    assert all(a in msg for a in advised), msg
    assert not any(n in msg for n in not_advised), msg


# A pod's own env entries (inline): its role, what depends on the role, the downward API's fields
# and TF_CONFIG composed from its index; every other value is the run's (one ConfigMap, envFrom).
OWN = {"TF_TASK_INDEX", "TF_CLUSTER_ROLE", "TF_CLUSTER_NAMESPACE", "TF_CLUSTER_POD_NAME", "TF_CLUSTER_POD_UID",
       "TF_CLUSTER_STOP_WITH_LEADER", "TF_CLUSTER_WAIT_FOR_PEERS", "TF_CLUSTER_AGENT_DIR", "TF_CONFIG"}  # fmt: skip
PROGRAM_OWN = {
    "TF_CLUSTER_RESTARTS",
    "TF_CLUSTER_INDEX_FAILURES",
    "TF_NUM_INTRAOP_THREADS",
    "OMP_NUM_THREADS",
    "JOB_NAME",
    "TASK_INDEX",
}  # fmt: skip  (the training container's alone: the agent runs no program)


def test_a_pod_carries_inline_only_its_own_env_and_the_run_shares_the_rest(helm_major):
    values = {
        "strategy": "parameterServer",
        "legacyTF1": {"env": True},  # the TF1 host lists: the run's, O(N) bytes each
        "roles": {
            "chief": {"replicas": 1},
            "worker": {"replicas": 64},
            "ps": {"replicas": 2},
            "evaluator": {"replicas": 1},
        },
    }
    docs = render(values, helm_major=helm_major)
    maps = manifests.config_maps(docs)
    (run_env,) = [d for d in docs if d["kind"] == "ConfigMap" and "-tf-config" in d["metadata"]["name"]]
    jobs = [d for d in docs if d["kind"] == "Job"]
    assert len(jobs) == 4
    seen: dict[str, set[str]] = {}
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        for c in [*pod["containers"], *[c for c in pod["initContainers"] if c["name"] == "tf-cluster-agent"]]:
            inline = {e["name"] for e in c["env"]}
            allowed = OWN | (PROGRAM_OWN if c["name"] == "tensorflow" else set())
            assert inline <= allowed, (job["metadata"]["name"], c["name"], sorted(inline - allowed))
            # the run's ConfigMap last: its values win over the user's envFrom, as they did inline
            assert c["envFrom"][-1] == {"configMapRef": {"name": run_env["metadata"]["name"]}}
            env = manifests.resolve_env(c, index=3, namespace="ns", node_cpus=2, config_maps=maps)
            for name, value in env.items():
                seen.setdefault(name, set()).add(value)
    # what the ConfigMap holds is the same for every pod, and every pod sees it
    for name, value in run_env["data"].items():
        assert seen[name] == {value}, name
    assert run_env["data"]["PS_HOSTS"].count(":2222") == 2 and run_env["data"]["WORKER_HOSTS"].count(":2222") == 64
