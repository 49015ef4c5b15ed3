"""Restart policy, RBAC, NetworkPolicy, security context and run naming on every example."""

from __future__ import annotations

import pytest
import yaml

from rendering import EXAMPLES, render, render_text
from tf_cluster import manifests
from tf_cluster.errors import RenderError

PS_EVAL = next(p for p in EXAMPLES if p.stem == "parameter-server-evaluator")


def example(path):
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_restart_fields_on_every_job(path):
    docs = render(example(path))
    maps = manifests.config_maps(docs)  # the run's environment, which the pods take by envFrom
    for job in (d for d in docs if d["kind"] == "Job"):
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed"
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
        assert spec["backoffLimitPerIndex"] == 3 and spec["podReplacementPolicy"] == "Failed"
        rules = spec["podFailurePolicy"]["rules"]
        assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        assert rules[-1]["action"] == "FailJob" and rules[-1]["onExitCodes"]["values"] == [2, 3, 4]
        name, values = job["metadata"]["name"], example(path)
        # the launcher's restart (exit 6), retried without counting: every task's with the self-fence
        # on (the default); else the ParameterServer coordinator's after a lost peer, and every
        # MultiWorkerMirrored chief's and worker's (a new leader)
        entries = manifests.env_entries(job["spec"]["template"]["spec"]["containers"][0], maps)
        env = {name: e.get("value") for name, e in entries.items()}
        self_fences = env.get("TF_CLUSTER_SELF_FENCE") not in (None, "0")
        coordinator = (
            name.startswith("tf-tf-cluster-chief-")
            and values.get("strategy", "multiWorkerMirrored") == "parameterServer"
        )
        collective = values.get("strategy", "multiWorkerMirrored") == "multiWorkerMirrored" and name.startswith(
            ("tf-tf-cluster-chief-", "tf-tf-cluster-worker-")
        )
        assert rules[-2] == PREEMPTION_RESTART, rules  # job.restartExitCodes' default
        assert (rules[1:-2] == [LAUNCHER_RESTART]) == (coordinator or collective or self_fences), (name, rules)
        assert "ttlSecondsAfterFinished" not in spec  # unset by default: Argo CD self-heal would re-create
        assert "helm.sh/chart" not in spec["template"]["metadata"]["labels"]


PREEMPTION_RESTART = {  # TensorFlow's PreemptionCheckpointHandler exits 42 after its save
    "action": "Ignore",
    "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": [42]},
}
LAUNCHER_RESTART = {
    "action": "Ignore",
    "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": [6]},
}


@pytest.mark.parametrize("fence", [True, False])
def test_the_coordinators_restart_for_a_lost_peer_spends_no_retry(fence):
    """Issue 43: the ParameterServer coordinator's exit 6 (a peer lost with its node, replaced: it
    restarts to reconnect) counted against backoffLimitPerIndex like a crash; with from-tfjob's
    `ExitCode` policy (1-127 non-retryable) it failed the run. It is ignored, before any FailJob rule."""
    values = {
        "strategy": "parameterServer",
        "nodeLoss": {"fence": fence, "selfFenceSeconds": 0},  # the self-fence's restart: below
        "roles": {"chief": {"replicas": 1}, "ps": {"replicas": 1}},
        "jobPolicies": {"chief": {"nonRetryableExitCodes": list(range(1, 128)), "restartExitCodes": []}},
    }
    jobs = {d["metadata"]["name"].split("-")[3]: d for d in render(values) if d["kind"] == "Job"}
    rules = jobs["chief"]["spec"]["podFailurePolicy"]["rules"]
    assert (LAUNCHER_RESTART in rules) == fence
    if fence:
        assert rules.index(LAUNCHER_RESTART) < [r["action"] for r in rules].index("FailJob")
    # a worker restarts when a ps is replaced (its channel to the old one waits on a vanished
    # machine), with or without the fence; the ps calls no one
    assert LAUNCHER_RESTART in jobs["worker"]["spec"]["podFailurePolicy"]["rules"]
    assert LAUNCHER_RESTART not in jobs["ps"]["spec"]["podFailurePolicy"]["rules"]


@pytest.mark.parametrize("seconds", [240, 0])
def test_with_the_self_fence_every_tasks_restart_spends_no_retry(seconds):
    """Issue 43, split brain: a task whose self-fence stops it exits 6 (nodeLoss.selfFenceSeconds):
    every role's Job retries that without counting, before any FailJob rule; the launchers and the
    fence get the bound. Off (0), only the roles that restart for a lost peer keep the rule."""
    values = {
        "strategy": "parameterServer",
        "nodeLoss": {"selfFenceSeconds": seconds},
        "roles": {"chief": {"replicas": 1}, "ps": {"replicas": 1}, "evaluator": {"replicas": 1}},
        "job": {"nonRetryableExitCodes": list(range(1, 42)), "restartExitCodes": [42]},
    }
    docs = render(values)
    maps = manifests.config_maps(docs)
    jobs = {d["metadata"]["name"].split("-")[3]: d for d in docs if d["kind"] == "Job"}
    for role, job in jobs.items():
        rules = job["spec"]["podFailurePolicy"]["rules"]
        has = LAUNCHER_RESTART in rules
        assert has == (bool(seconds) or role in ("chief", "worker")), (role, rules)
        if has:
            assert rules.index(LAUNCHER_RESTART) < [r["action"] for r in rules].index("FailJob"), rules
        pod = job["spec"]["template"]["spec"]
        for c in pod["containers"] + [c for c in pod.get("initContainers", []) if c["name"] == "tf-cluster-agent"]:
            env = {name: e.get("value") for name, e in manifests.env_entries(c, maps).items()}
            assert env["TF_CLUSTER_SELF_FENCE"] == str(seconds), (role, c["name"])
            # the launcher reads the same rule: a program's own exit 6 is reported as 1 where the Job ignores 6
            # (the training container's: the agent runs no program)
            expected = ("true" if has else "false") if c["name"] == "tensorflow" else None
            assert env.get("TF_CLUSTER_RESTARTS") == expected, (role, c["name"])
    with pytest.raises(RenderError, match="selfFenceSeconds"):
        render({**values, "nodeLoss": {"selfFenceSeconds": 30}})  # below the minimum: refused


def test_a_collective_tasks_restart_for_a_new_leader_spends_no_retry():
    """Issue 43, a lost leader: a MultiWorkerMirrored chief's or worker's launcher exits 6 when the
    leader's name answers with its replacement (its collectives wait on the old one); that restart
    is ignored by its Job, before any FailJob rule (from-tfjob's ExitCode policy fails on 1-127).
    The evaluator is not in the collective."""
    values = {
        "strategy": "multiWorkerMirrored",
        "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 2}, "evaluator": {"replicas": 1}},
        "job": {"nonRetryableExitCodes": list(range(1, 42)), "restartExitCodes": [42]},
        "nodeLoss": {"selfFenceSeconds": 0},
    }
    jobs = {d["metadata"]["name"].split("-")[3]: d for d in render(values) if d["kind"] == "Job"}
    for role in ("chief", "worker"):
        rules = jobs[role]["spec"]["podFailurePolicy"]["rules"]
        assert rules.index(LAUNCHER_RESTART) < [r["action"] for r in rules].index("FailJob"), rules
    assert LAUNCHER_RESTART not in jobs["evaluator"]["spec"]["podFailurePolicy"]["rules"]
    for role, want in (("chief", "true"), ("worker", "true"), ("evaluator", "false")):
        (c,) = [c for c in jobs[role]["spec"]["template"]["spec"]["containers"] if c["name"] == "tensorflow"]
        assert {e["name"]: e.get("value") for e in c["env"]}["TF_CLUSTER_RESTARTS"] == want, role


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_pods_are_locked_down(path):
    for job in (d for d in render(example(path)) if d["kind"] == "Job"):
        pod = job["spec"]["template"]["spec"]
        c = pod["containers"][0]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
        assert job["spec"]["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_network_policy_selects_every_training_pod_and_admits_only_the_release(path):
    docs = render(example(path))
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-training")]
    exprs = {e["key"]: set(e["values"]) for e in policy["spec"]["podSelector"]["matchExpressions"]}
    for job in (d for d in docs if d["kind"] == "Job"):
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert all(labels[k] in v for k, v in exprs.items()), job["metadata"]["name"]
    rule, metrics = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 2222, "protocol": "TCP"}]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "tf-cluster", "app.kubernetes.io/instance": "tf"}}}
    ]
    # the other rule opens only the exporter's port, to metrics.scrapers (tests/chart/test_task_metrics.py)
    assert metrics["ports"] == [{"port": 9464, "protocol": "TCP"}] and metrics["from"]


def _role_and_tokens(values: dict) -> tuple[dict, str, dict]:
    docs = render(values)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    chief = next(
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "Job" and d["metadata"]["name"].startswith("tf-tf-cluster-chief")
    )
    tokens = {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: token_holders(d)
        for d in docs
        if d["kind"] == "Job"
    }
    return role, chief, tokens


def token_holders(job: dict) -> bool:
    """Whether the Job's pods hold the account's token, checking that only the tf-cluster-agent
    sidecar does: never automounted, never mounted by the training container or another."""
    spec = job["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    holders = [
        c["name"]
        for c in [*spec.get("initContainers", []), *spec["containers"]]
        if any(m["name"] == "tf-cluster-token" for m in c.get("volumeMounts", []))
    ]
    assert holders in ([], ["tf-cluster-agent"]), holders
    return bool(holders)


def rules_of(role: dict) -> dict:
    return {
        (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"])): r.get("resourceNames") for r in role["rules"]
    }


def test_without_the_fence_the_role_only_reads_the_leading_job_and_pods():
    """Reads only: the leading Job by name (get, and list/watch naming it), the pods (a task waits
    for its leader's pod before it looks its name up) and, as the ParameterServer chief waits for
    every peer, the headless Service's EndpointSlices; writes only Events (its lifecycle moments)."""
    role, chief, tokens = _role_and_tokens({**example(PS_EVAL), "nodeLoss": {"fence": False}})
    assert rules_of(role) == {
        (("batch",), ("jobs",), ("get", "list", "watch")): [chief],
        (("",), ("pods",), ("list", "watch")): None,
        (("discovery.k8s.io",), ("endpointslices",), ("list", "watch")): None,
        (("",), ("events",), ("create", "patch")): None,  # the task's lifecycle moments, on its own pod
    }
    assert set(tokens.values()) == {True}  # the chief waits for its peers' pods


def test_a_single_task_mounts_no_token_and_gets_no_role():
    docs = render(
        {
            **example(PS_EVAL),
            "roles": {
                "chief": {"replicas": 0},
                "worker": {"replicas": 1},
                "ps": {"replicas": 0},
                "evaluator": {"replicas": 0},
            },
            "strategy": "multiWorkerMirrored",
            "nodeLoss": {"fence": False},
            "tests": {"enabled": False},
        }
    )
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    assert {token_holders(d) for d in docs if d["kind"] == "Job"} == {False}
    # no agent: the one init container is `packages`, which holds no token either
    inits = [c for d in docs if d["kind"] == "Job" for c in d["spec"]["template"]["spec"].get("initContainers", [])]
    assert [c["name"] for c in inits] == ["packages"]
    assert all("/var/run/secrets/kubernetes.io/serviceaccount" not in str(c["volumeMounts"]) for c in inits)


def test_the_fence_adds_patch_pod_status_only():
    """nodeLoss.fence (default): a few tasks watch the release's pods and may mark one Failed."""
    role, chief, tokens = _role_and_tokens(example(PS_EVAL))
    assert rules_of(role) == {
        (("batch",), ("jobs",), ("get", "list", "watch")): [chief],
        (("",), ("pods",), ("list", "watch")): None,
        (("discovery.k8s.io",), ("endpointslices",), ("list", "watch")): None,
        (("",), ("pods/status",), ("patch",)): None,
        (("",), ("events",), ("create", "patch")): None,
    }
    assert set(tokens.values()) == {True}


def test_a_changed_training_spec_is_a_new_run_and_an_unchanged_one_the_same_bytes():
    base = example(PS_EVAL)
    names = lambda docs: sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Job")  # noqa: E731
    same = render(base)
    changed = render({**base, "env": [{"name": "EPOCHS", "value": "9"}]})
    assert names(same) == names(render(base))
    assert render_text(base) == render_text(dict(base))
    assert set(names(same)).isdisjoint(names(changed))
    # Values that do not reach a Job keep the run (no needless restart).
    assert names(render({**base, "tensorboard": {"enabled": True}})) == names(same)


def psscheck(manifest: str):
    import subprocess

    from tf_cluster import TOOLS_BIN

    return subprocess.run(
        [str(TOOLS_BIN / "psscheck"), "-level", "restricted"], input=manifest, capture_output=True, text=True
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_pod_template_passes_pod_security_restricted(path, helm_major):
    """Checked by Kubernetes' own PodSecurity evaluator (k8s.io/pod-security-admission)."""
    values = {
        **example(path),
        "tensorboard": {**example(path).get("tensorboard", {}), "enabled": True},
        "storage": {**example(path).get("storage", {}), "logs": {"type": "pvc"}},
    }
    proc = psscheck(render_text(values, helm_major=helm_major))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 violation(s)" in proc.stderr


def test_the_policy_check_rejects_a_weakened_pod():
    proc = psscheck(render_text({"securityContext": {"allowPrivilegeEscalation": True}}))
    assert proc.returncode == 1
    assert "allowPrivilegeEscalation != false" in proc.stdout


@pytest.mark.parametrize("example", ["application.yaml", "application-oci.yaml"])
def test_argocd_application_example_renders_with_sync_wave(example):
    from tf_cluster import ROOT

    app = yaml.safe_load((ROOT / "values-examples" / "argocd" / example).read_text())
    values = app["spec"]["source"]["helm"]["valuesObject"]
    jobs = [d for d in render(values, release=app["spec"]["source"]["helm"]["releaseName"]) if d["kind"] == "Job"]
    assert jobs and all(j["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "1" for j in jobs)
    assert all("ttlSecondsAfterFinished" not in j["spec"] for j in jobs)


@pytest.mark.parametrize("example", ["application.yaml", "application-oci.yaml"])
def test_argocd_examples_render_the_same_whatever_api_list_argo_cd_hands_helm(example):
    """Argo CD passes Helm its cluster cache's API versions, which change as CRDs come and go: the
    examples name every value whose `auto` reads them, so their run (Job names) never flips."""
    import json

    from tf_cluster import ROOT, helm

    app = yaml.safe_load((ROOT / "values-examples" / "argocd" / example).read_text())
    values = app["spec"]["source"]["helm"]["valuesObject"]
    apis = ["scheduling.k8s.io/v1beta1/PodGroup", "monitoring.coreos.com/v1"]
    renders = []
    for listed in ([], apis):
        text = helm.Helm("4").template(
            "mnist",
            helm.Values.of([], set_json=[f"{k}={json.dumps(v)}" for k, v in values.items()]),
            api_versions=listed,
        )
        renders.append({(d["kind"], d["metadata"]["name"]) for d in helm.parse(text)})
    assert renders[0] == renders[1]
    # and the chart does read those APIs: with `auto` the same values render a different run
    auto = {**values, "scheduling": {"gang": "auto"}}
    text = helm.Helm("4").template(
        "mnist", helm.Values.of([], set_json=[f"{k}={json.dumps(v)}" for k, v in auto.items()]), api_versions=apis
    )
    assert {(d["kind"], d["metadata"]["name"]) for d in helm.parse(text)} != renders[0]


def test_per_role_job_policy_overrides():
    values = {
        "strategy": "parameterServer",
        "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": 1}},
        "job": {"activeDeadlineSeconds": 3600},
        "jobPolicies": {"ps": {"backoffLimitPerIndex": 0, "ttlSecondsAfterFinished": 60}},
    }
    jobs = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"] for d in render(values) if d["kind"] == "Job"
    }
    assert jobs["ps"]["backoffLimitPerIndex"] == 0 and jobs["ps"]["ttlSecondsAfterFinished"] == 60
    assert jobs["chief"]["backoffLimitPerIndex"] == 3 and "ttlSecondsAfterFinished" not in jobs["chief"]
    assert {s["activeDeadlineSeconds"] for s in jobs.values()} == {3600}
