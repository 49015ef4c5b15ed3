"""All or nothing: the gang the chart renders (Kubernetes' own PodGroup when the cluster serves
it, a scheduler-plugins or Volcano PodGroup by values, Kueue's queue label), with the real helm
binaries and the real Kubernetes 1.37 schemas. The scheduler's behaviour is the e2e node's
(tests/e2e/cluster/test_gang.py)."""

from __future__ import annotations

import pytest
import yaml

from rendering import EXAMPLES, HELM_VERSIONS
from tf_cluster import ROOT, helm, schemas

GANG_API = "scheduling.k8s.io/v1beta1/PodGroup"
MWMS = ROOT / "values-examples" / "mwms-cpu.yaml"
PS_EVAL = ROOT / "values-examples" / "parameter-server-evaluator.yaml"


def render(files=(MWMS,), sets=(), api=True, major="4") -> list[dict]:
    text = helm.Helm(major).template("rel", helm.Values.of(files, sets), api_versions=[GANG_API] if api else [])
    return helm.parse(text)


def kind(docs, k, api_prefix=""):
    return [d for d in docs if d["kind"] == k and d["apiVersion"].startswith(api_prefix)]


def pod_specs(docs) -> dict[str, dict]:
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"] for d in kind(docs, "Job")}


@pytest.mark.parametrize("major", HELM_VERSIONS)
def test_auto_renders_no_gang_where_the_api_is_not_served(major):
    docs = render(api=False, major=major)
    assert not kind(docs, "PodGroup")
    assert all("schedulingGroup" not in t["spec"] for t in pod_specs(docs).values())


@pytest.mark.parametrize("major", HELM_VERSIONS)
@pytest.mark.parametrize(
    "files,size,mode", [((MWMS,), 2, "all"), ((PS_EVAL,), 4, "single")], ids=["mwms", "ps+evaluator"]
)
def test_auto_gangs_the_training_tasks_where_the_api_is_served(major, files, size, mode):
    docs = render(files, major=major)
    (group,) = kind(docs, "PodGroup", "scheduling.k8s.io/")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": size}}
    assert group["spec"]["disruptionMode"] == {mode: {}}
    name = group["metadata"]["name"]
    jobs = kind(docs, "Job")
    assert all(j["metadata"]["name"].endswith(name.rsplit("-", 1)[1]) for j in jobs)  # one group per run
    for role, template in pod_specs(docs).items():
        joined = template["spec"].get("schedulingGroup")
        assert joined == (None if role == "evaluator" else {"podGroupName": name}), role
    in_gang = sum(
        j["spec"]["completions"] for j in jobs if j["metadata"]["labels"]["app.kubernetes.io/component"] != "evaluator"
    )
    assert in_gang == size


@pytest.mark.parametrize("major", HELM_VERSIONS)
def test_ganged_server_roles_end_with_the_run_so_a_late_replacement_cannot_hang_it(major):
    """A ps or worker replaced after the gang's other tasks finished could never be placed: its Job
    is done once one task was stopped by the chief's completion (successPolicy), and removes it.
    Only where the gang is (a late replacement without one is placed and exits at once) and only
    the roles that stop with the leader: the chief's Job still needs its task to succeed."""
    policies = {
        j["metadata"]["labels"]["app.kubernetes.io/component"]: j["spec"].get("successPolicy")
        for j in kind(render((PS_EVAL,), major=major), "Job")
    }
    one = {"rules": [{"succeededCount": 1}]}
    assert policies == {"chief": None, "worker": one, "ps": one, "evaluator": one}
    assert all("successPolicy" not in j["spec"] for j in kind(render((PS_EVAL,), api=False, major=major), "Job"))
    assert all("successPolicy" not in j["spec"] for j in kind(render((MWMS,), major=major), "Job"))  # workers lead


@pytest.mark.parametrize("major", HELM_VERSIONS)
@pytest.mark.parametrize(
    "sets",
    [(), ("nodeLoss.fence=false", "nodeLoss.selfFenceSeconds=0"), ("rbac.create=false",)],
    ids=["default", "no-fence", "own-rbac"],
)
@pytest.mark.parametrize(
    "gang,api",
    [
        ((), "scheduling.k8s.io/v1beta1"),
        (("scheduling.podGroup=coscheduling",), "scheduling.x-k8s.io/v1alpha1"),
    ],
    ids=["native", "coscheduling"],
)
def test_each_gang_task_has_an_agent_that_may_lower_its_podgroup_and_nothing_more(major, sets, gang, api):
    """A task replaced once another task of the gang finished could never be placed (a finished pod
    no longer counts toward minCount, nor, in coscheduling's PreFilter, toward minMember): the
    agent of a finished task lowers it to 1 (files/tf_cluster_launcher/gang.py). So every gang pod
    has the agent, told the group's name and API, and the Role may read and patch that one
    PodGroup of that API group (and list pods: the agent reads its own's status), with or without
    the fence, and with your own RBAC too; the evaluator, outside the gang, is told nothing."""
    docs = render((PS_EVAL,), (*sets, *gang), major=major)
    (group,) = kind(docs, "PodGroup", api)
    name = group["metadata"]["name"]
    for role, template in pod_specs(docs).items():
        agent = [c for c in template["spec"].get("initContainers", []) if c["name"] == "tf-cluster-agent"]
        told = [{e["name"]: e.get("value") for e in c.get("env", [])} for c in agent]
        if role == "evaluator":
            assert all("TF_CLUSTER_POD_GROUP" not in e for e in told), role
        else:
            # Kubernetes' own gang is the agent's default: its pods are told no API (they stay as they were)
            want = api if gang else None
            assert [(e["TF_CLUSTER_POD_GROUP"], e.get("TF_CLUSTER_POD_GROUP_API")) for e in told] == [(name, want)], (
                role
            )
        training = [c for c in template["spec"]["containers"] if c["name"] == "tensorflow"]
        assert all("TF_CLUSTER_POD_GROUP" not in str(c.get("env")) for c in training)
    if "rbac.create=false" in sets:  # the agent is there (nothing else would add it), asking your Role
        assert not kind(docs, "Role")
    else:
        (role,) = kind(docs, "Role")
        rules = [r for r in role["rules"] if "podgroups" in r["resources"]]
        podgroups = {"apiGroups": [api.split("/")[0]], "resources": ["podgroups"], "resourceNames": [name]}
        assert rules == [{**podgroups, "verbs": ["get", "patch"]}]
        assert any(r["resources"] == ["pods"] and "list" in r["verbs"] for r in role["rules"])
    no_gang = render((PS_EVAL,), sets, api=False, major=major)
    assert "podgroups" not in str(kind(no_gang, "Role")) and "TF_CLUSTER_POD_GROUP" not in str(kind(no_gang, "Job"))


def test_a_volcano_gang_is_not_lowered_it_counts_succeeded_tasks():
    """Volcano counts a job's Succeeded tasks toward minMember (JobInfo.ValidTaskNum), so nothing
    lowers its PodGroup: no env, no rule on podgroups."""
    docs = render((PS_EVAL,), ("scheduling.podGroup=volcano",))
    (group,) = kind(docs, "PodGroup", "scheduling.volcano.sh/")
    assert group["spec"]["minMember"] == 4 and "tf-cluster.io/gang-size" not in group["metadata"].get("annotations", {})
    assert "podgroups" not in str(kind(docs, "Role")) and "TF_CLUSTER_POD_GROUP" not in str(kind(docs, "Job"))


def test_the_gang_validates_against_the_kubernetes_1_37_schemas():
    text = helm.Helm("4").template("rel", helm.Values.of([PS_EVAL]), api_versions=[GANG_API])
    assert schemas.validate_docs(helm.parse(text), ("1.37",)) == []
    r = schemas.kubeconform(text, "1.37")
    assert r.returncode == 0 and "Invalid: 0, Errors: 0" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize(
    "sets,api,expected",
    [
        (["scheduling.gang=false"], True, None),
        (["scheduling.gang=true"], False, {"all": {}}),
        (["scheduling.disruptionMode=single"], True, {"single": {}}),
    ],
    ids=["off-although-served", "on-although-not-served", "disruption-override"],
)
def test_gang_and_disruption_values(sets, api, expected):
    groups = kind(render(sets=sets, api=api), "PodGroup")
    assert [g["spec"]["disruptionMode"] for g in groups] == ([expected] if expected else [])


def test_a_new_run_gets_a_new_group_and_a_label_change_keeps_it():
    base = kind(render(), "PodGroup")[0]["metadata"]["name"]
    assert kind(render(sets=["roles.worker.replicas=3"]), "PodGroup")[0]["metadata"]["name"] != base
    same = render(sets=["scheduling.kueueQueue=team-a"])
    assert kind(same, "PodGroup")[0]["metadata"]["name"] == base


@pytest.mark.parametrize(
    "pod_group,scheduler,joins",
    [
        ("coscheduling", "scheduler-plugins-scheduler", ("labels", "scheduling.x-k8s.io/pod-group")),
        ("volcano", "volcano", ("annotations", "scheduling.k8s.io/group-name")),
    ],
)
def test_a_gang_schedulers_podgroup_by_values(pod_group, scheduler, joins):
    docs = render((PS_EVAL,), [f"scheduling.podGroup={pod_group}"], api=True)
    (group,) = kind(docs, "PodGroup")
    assert not group["apiVersion"].startswith("scheduling.k8s.io/")  # takes the place of the native gang
    assert group["spec"]["minMember"] == 4
    where, key = joins
    for role, template in pod_specs(docs).items():
        spec, meta = template["spec"], template["metadata"]
        assert "schedulingGroup" not in spec
        if role == "evaluator":
            assert key not in meta.get(where, {}) and "schedulerName" not in spec
        else:
            assert meta[where][key] == group["metadata"]["name"] and spec["schedulerName"] == scheduler, role
    own = render((PS_EVAL,), [f"scheduling.podGroup={pod_group}", "roleDefaults.schedulerName=my-gang"])
    assert {t["spec"]["schedulerName"] for t in pod_specs(own).values()} == {"my-gang"}


def test_kueue_queue_label_on_every_job_and_no_suspend():
    docs = render((PS_EVAL,), ["scheduling.kueueQueue=team-a"], api=False)
    jobs = kind(docs, "Job")
    assert len(jobs) == 4 and all(j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" for j in jobs)
    assert all("suspend" not in j["spec"] for j in jobs)  # Kueue suspends and admits them itself
    plain = kind(render((PS_EVAL,), api=False), "Job")
    assert [j["metadata"]["name"] for j in plain] == [j["metadata"]["name"] for j in jobs]  # same run


def test_two_gang_mechanisms_are_refused_at_render_time():
    r = helm.Helm("4").render("rel", helm.Values.of([], ["scheduling.gang=true", "scheduling.podGroup=volcano"]))
    assert r.returncode != 0
    assert "scheduling.gang=true and scheduling.podGroup=volcano: one gang mechanism per release" in r.stderr


@pytest.mark.parametrize("values", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_gangs_on_1_37_and_validates(values):
    text = helm.Helm("4").template("rel", helm.Values.of([values]), api_versions=[GANG_API])
    assert schemas.validate_docs(helm.parse(text), ("1.37",)) == []


@pytest.mark.parametrize("pod_group", ["coscheduling", "volcano"])
def test_gang_scheduler_podgroups_validate_against_their_published_crds(pod_group):
    """Their controllers cannot run here (the Go modules are refused by the proxy): the objects are
    checked against the CRDs the projects publish (tooling/tf_cluster/crds/, unknown fields refused)."""
    sets = [f"scheduling.podGroup={pod_group}", "scheduling.scheduleTimeoutSeconds=120", "scheduling.volcanoQueue=q"]
    if pod_group == "coscheduling":
        sets = sets[:2]
    docs = render((PS_EVAL,), sets, api=False)
    (group,) = kind(docs, "PodGroup")
    assert schemas.validate_custom(group) == [], group
    assert schemas.validate_docs(docs, ("1.37",)) == []
    # as a 1.29 cluster's install renders it: no Job successPolicy there (GA in 1.33)
    on_129 = helm.parse(helm.Helm("4").template("rel", helm.Values.of([PS_EVAL], sets), kube_version="1.29.0"))
    assert all("successPolicy" not in j["spec"] for j in kind(on_129, "Job"))
    assert schemas.validate_docs(on_129, ("1.29",)) == []
    group["spec"]["minMembers"] = 4  # a misspelt field
    (problem,) = schemas.validate_custom(group)
    assert "minMembers" in problem.message


def on_host(selector: dict, **extra) -> dict:
    return {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname", **extra}


WORKER_0 = {
    "app.kubernetes.io/instance": "rel",
    "app.kubernetes.io/component": "worker",
    "batch.kubernetes.io/job-completion-index": "0",
}


def chief_affinity(kind: str, term: dict) -> dict:
    return {"roles": {"chief": {"replicas": 1, "affinity": {"podAffinity": {kind: [term]}}}}}


# The refused ones are in tests/bad-values (gang-affinity-*): a required term on a role created later.
@pytest.mark.parametrize(
    "values",
    [
        {"scheduling": {"singleNode": True}},  # every pod matches its own term: the first placed meets it
        {"roles": {"worker": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            on_host({"matchLabels": {"app.kubernetes.io/component": "worker"}})]}}}}},  # every worker matches
        {"roles": {"worker": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            on_host({"matchLabels": WORKER_0})]}}}}},  # worker 0 is created, so placed, first (measured)
        {"roles": {"chief": {"replicas": 1}, "worker": {"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                on_host({"matchLabels": {"app.kubernetes.io/component": "chief"}})]}}}}},  # created first
        chief_affinity("requiredDuringSchedulingIgnoredDuringExecution", on_host({"matchLabels": {"app": "cache"}})),
        chief_affinity("requiredDuringSchedulingIgnoredDuringExecution", on_host({"matchLabels": WORKER_0},
                                                                                namespaces=["elsewhere"])),
        chief_affinity("preferredDuringSchedulingIgnoredDuringExecution",
                       {"weight": 100, "podAffinityTerm": on_host({"matchLabels": WORKER_0})}),
        {**chief_affinity("requiredDuringSchedulingIgnoredDuringExecution", on_host({"matchLabels": WORKER_0})),
         "scheduling": {"gang": False}},
    ],
    ids=["singleNode", "own-role", "worker-0", "an-earlier-role", "outside-the-release", "other-namespace",
         "preferred", "gang-off"],
)  # fmt: skip
def test_a_required_pod_affinity_the_gang_can_meet_renders(values, tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    docs = render((MWMS, path), sets=() if "gang" in values.get("scheduling", {}) else ("scheduling.gang=true",))
    assert kind(docs, "Job")
