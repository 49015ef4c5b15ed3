"""Roles as data: the chart behaves as its role table (files/roles.yaml) says, the tooling reads
the same table, and `roleDefaults` is merged under every role."""

from __future__ import annotations

import json

import pytest

from rendering import pods, render
from tf_cluster import CHART, roles
from tf_cluster.errors import RenderError

EVERY_ROLE = {
    "strategy": "custom",
    "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 2}, "ps": {"replicas": 1}, "evaluator": {"replicas": 1}},
}
PS = {**EVERY_ROLE, "strategy": "parameterServer"}
MWMS = {
    "strategy": "multiWorkerMirrored",
    "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 2}, "evaluator": {"replicas": 1}},
}
# nodeLoss.tolerationSeconds: appended to every training pod's own tolerations
LOST_NODE = [
    {"effect": "NoExecute", "key": f"node.kubernetes.io/{k}", "operator": "Exists", "tolerationSeconds": 30}
    for k in ("not-ready", "unreachable")
]


def env(pod, name):
    return pod.env.get(name)


def test_the_schema_knows_exactly_the_roles_of_the_table():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert tuple(schema["properties"]["roles"]["properties"]) == roles.NAMES
    assert tuple(schema["properties"]["jobPolicies"]["properties"]) == roles.NAMES
    assert roles.NAMES == ("chief", "worker", "ps", "evaluator") and roles.LEADERS == ("chief", "worker")


@pytest.mark.parametrize("values", [EVERY_ROLE, PS, MWMS], ids=["custom", "parameterServer", "mwms"])
def test_every_trait_of_the_table_is_what_the_pods_get(values, helm_major):
    rendered = pods(values, helm_major=helm_major)
    cluster = rendered[0].tf_config["cluster"]
    for p in rendered:
        role = roles.BY_NAME[p.role]
        assert (p.role in cluster) == role.in_cluster
        assert ("tf" in p.ports) == role.port, p.role
        assert env(p, "TF_CLUSTER_WAIT_FOR_PEERS") == str(role.waits_for_peers).lower()
        stops = p.role != "chief" and values["strategy"] in role.stops_with_leader
        assert env(p, "TF_CLUSTER_STOP_WITH_LEADER") == str(stops).lower(), p.role
        assert env(p, "TF_CLUSTER_LEADER_JOB").split("-")[3] == "chief"


@pytest.mark.parametrize("role", [r for r in roles.ROLES if r.max_replicas], ids=lambda r: r.name)
def test_max_replicas_of_the_table_are_enforced(role, helm_major):
    with pytest.raises(RenderError, match=rf"roles\.{role.name}\.replicas={role.max_replicas + 1}"):
        render({"strategy": "custom", "roles": {role.name: {"replicas": role.max_replicas + 1}}}, helm_major=helm_major)


def test_the_first_present_role_that_may_lead_leads(helm_major):
    workers_only = pods({"roles": {"worker": {"replicas": 2}, "evaluator": {"replicas": 1}}}, helm_major=helm_major)
    assert {env(p, "TF_CLUSTER_LEADER_JOB").split("-")[3] for p in workers_only} == {"worker"}


def test_role_defaults_are_set_once_and_apply_to_every_role(helm_major):
    shared = {
        "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "cpu", "operator": "Exists"}],
        "podLabels": {"team": "ml"},
        "priorityClassName": "batch",
    }
    rendered = pods({**PS, "roleDefaults": shared}, helm_major=helm_major)
    assert {p.role for p in rendered} == set(roles.NAMES)
    for p in rendered:  # the limits, and as requests too (written out: quotas count requests)
        assert p.container["resources"] == {**shared["resources"], "requests": {"cpu": "1", "memory": "2Gi"}}
        assert p.pod_spec["nodeSelector"] == {"pool": "cpu"} and p.pod_spec["priorityClassName"] == "batch"
        assert p.pod_spec["tolerations"] == shared["tolerations"] + LOST_NODE


def test_a_role_overrides_role_defaults_maps_merged_key_by_key_lists_replaced(helm_major):
    values = {
        **PS,
        "roleDefaults": {
            "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
            "nodeSelector": {"pool": "cpu"},
            "tolerations": [{"key": "a", "operator": "Exists"}],
            "schedulerName": "default-scheduler",
        },
    }
    values["roles"] = {
        **PS["roles"],
        "chief": {
            "replicas": 1,
            "resources": {"limits": {"memory": "8Gi"}},
            "tolerations": [{"key": "b", "operator": "Exists"}],
            "schedulerName": "gang",
        },
    }
    by_role = {p.role: p for p in pods(values, helm_major=helm_major)}
    chief, worker = by_role["chief"], by_role["worker"]
    assert chief.container["resources"]["limits"] == {"cpu": "1", "memory": "8Gi"}
    assert chief.pod_spec["tolerations"] == [{"key": "b", "operator": "Exists"}] + LOST_NODE
    assert chief.pod_spec["schedulerName"] == "gang" and worker.pod_spec["schedulerName"] == "default-scheduler"
    assert worker.container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}


def test_the_run_follows_the_effective_settings_not_where_they_are_written(helm_major):
    """Moving a setting from every role into roleDefaults changes nothing a pod runs: same Jobs.
    Changing a roleDefault changes what pods run: a new run."""
    limits = {"limits": {"cpu": "1"}}
    every = {**MWMS["roles"], "ps": {"replicas": 0}}
    per_role = {**MWMS, "roles": {r: {**v, "resources": limits} for r, v in every.items()}}
    shared = {**MWMS, "roleDefaults": {"resources": limits}}
    names = [
        sorted(d["metadata"]["name"] for d in render(v, helm_major=helm_major) if d["kind"] == "Job")
        for v in (per_role, shared, {**MWMS, "roleDefaults": {"resources": {"limits": {"cpu": "2"}}}})
    ]
    assert names[0] == names[1]
    assert set(names[2]).isdisjoint(names[1])
