"""TF_CONFIG: for every role and index, exactly what the chart promises (templates/_tfconfig.tpl):
one cluster spec per release listing each in-cluster role's pod addresses `<job>-<i>.<fullname>:<port>`
(the Indexed Job's hostnames under the headless Service), the index from the completion-index
annotation, and the evaluator never listed in `cluster`."""

from __future__ import annotations

import pytest

from rendering import pods, render

PS = {
    "strategy": "parameterServer",
    "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 3}, "ps": {"replicas": 2}, "evaluator": {"replicas": 1}},
}
MWMS = {"strategy": "multiWorkerMirrored", "roles": {"worker": {"replicas": 3}}}
MWMS_CHIEF = {"strategy": "multiWorkerMirrored", "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 2}}}
NO_SUFFIX = {"run": {"suffix": "none"}}

CASES = {
    "mwms-3-workers": (MWMS, {"worker": 3}),
    "mwms-chief-2-workers": (MWMS_CHIEF, {"chief": 1, "worker": 2}),
    "ps-with-evaluator": (PS, {"chief": 1, "worker": 3, "ps": 2}),
}


def expected_cluster(counts: dict, fullname: str = "tf-tf-cluster", port: int = 2222) -> dict:
    return {role: [f"{fullname}-{role}-{i}.{fullname}:{port}" for i in range(n)] for role, n in counts.items()}


@pytest.mark.parametrize("values,counts", CASES.values(), ids=CASES.keys())
def test_every_pod_gets_the_expected_tf_config(values, counts, helm_major):
    all_pods = pods({**values, **NO_SUFFIX}, helm_major=helm_major)
    cluster = expected_cluster(counts)
    seen = set()
    for pod in all_pods:
        assert pod.tf_config == {"cluster": cluster, "task": {"type": pod.role, "index": pod.index}}, pod.name
        seen.add((pod.role, pod.index))
    want = {(r, i) for r, n in counts.items() for i in range(n)}
    if values["roles"].get("evaluator", {}).get("replicas"):
        want.add(("evaluator", 0))
    assert seen == want


@pytest.mark.parametrize("values", [MWMS, MWMS_CHIEF, PS], ids=["mwms", "mwms-chief", "ps"])
def test_every_address_names_a_pod_of_the_chart_on_its_tf_port(values, helm_major):
    docs = render(values, helm_major=helm_major)
    all_pods = pods(values, helm_major=helm_major)
    service = next(d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None")
    assert service["spec"]["publishNotReadyAddresses"] is True
    by_host = {f"{p.hostname}.{p.subdomain}": p for p in all_pods}
    for pod in all_pods:
        for role, addresses in pod.tf_config["cluster"].items():
            for i, address in enumerate(addresses):
                host, port = address.rsplit(":", 1)
                target = by_host[host]  # KeyError: an address no pod of the chart has
                assert (target.role, target.index) == (role, i)
                assert target.subdomain == service["metadata"]["name"]
                assert target.ports["tf"] == int(port)
                # the Service selects the target pod
                labels = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == target.job)["spec"][
                    "template"
                ]["metadata"]["labels"]
                assert service["spec"]["selector"].items() <= labels.items()


def test_evaluator_is_never_in_the_cluster_and_master_never_appears(helm_major):
    for pod in pods(PS, helm_major=helm_major):
        assert "evaluator" not in pod.tf_config["cluster"]
        assert "master" not in pod.tf_config["cluster"]
    evaluator = [p for p in pods(PS, helm_major=helm_major) if p.role == "evaluator"]
    assert evaluator[0].tf_config["task"] == {"type": "evaluator", "index": 0}


def test_index_comes_from_the_completion_index_annotation(helm_major):
    job = next(d for d in render(MWMS, helm_major=helm_major) if d["kind"] == "Job")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert env[0] == {
        "name": "TF_TASK_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
    }
    assert names.index("TF_TASK_INDEX") < names.index("TF_CONFIG")
    tf_config = next(e["value"] for e in env if e["name"] == "TF_CONFIG")
    assert tf_config.endswith('"index":$(TF_TASK_INDEX)}}')
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["template"]["spec"]["subdomain"] == "tf-tf-cluster"


@pytest.mark.parametrize(
    "roles",
    [{"worker": {"replicas": 1}}, {"worker": {"replicas": 0}, "chief": {"replicas": 1}}],
    ids=["one-worker", "one-chief"],
)
def test_single_task_release_trains_locally_without_tf_config(roles, helm_major):
    (pod,) = pods({"roles": roles}, helm_major=helm_major)
    assert "TF_CONFIG" not in pod.env
    assert pod.env["TF_TASK_INDEX"] == "0"
    (pod,) = pods({"roles": roles, "tfConfig": {"alwaysSet": True}}, helm_major=helm_major)
    assert pod.tf_config["task"] == {"type": pod.role, "index": 0}


def test_fully_qualified_addresses(helm_major):
    (p, _) = pods(
        {
            **MWMS_CHIEF,
            **NO_SUFFIX,
            "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 1}},
            "tfConfig": {"fullyQualified": True},
        },
        helm_major=helm_major,
        namespace="ml",
    )
    assert p.tf_config["cluster"]["chief"] == ["tf-tf-cluster-chief-0.tf-tf-cluster.ml.svc.cluster.local:2222"]


def test_legacy_tf1_flags_and_env(helm_major):
    values = {
        "strategy": "custom",
        "legacyTF1": {"flags": True, "env": True},
        **NO_SUFFIX,
        "roles": {"worker": {"replicas": 2}, "ps": {"replicas": 1}},
    }
    w1 = next(p for p in pods(values, helm_major=helm_major) if p.name == "worker-1")
    ps = "tf-tf-cluster-ps-0.tf-tf-cluster:2222"
    workers = "tf-tf-cluster-worker-0.tf-tf-cluster:2222,tf-tf-cluster-worker-1.tf-tf-cluster:2222"
    assert w1.args[-4:] == [f"--ps_hosts={ps}", f"--worker_hosts={workers}", "--job_name=worker", "--task_index=1"]
    assert (w1.env["PS_HOSTS"], w1.env["WORKER_HOSTS"], w1.env["JOB_NAME"], w1.env["TASK_INDEX"]) == (
        ps,
        workers,
        "worker",
        "1",
    )


def test_user_env_replaces_chart_env_without_duplicates(helm_major):
    values = {
        "env": [{"name": "OMP_NUM_THREADS", "value": "7"}, {"name": "A", "value": "top"}],
        "roles": {"worker": {"replicas": 2, "env": [{"name": "A", "value": "role"}]}},
    }
    job = next(d for d in render(values, helm_major=helm_major) if d["kind"] == "Job")
    names = [e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert len(names) == len(set(names))
    w = pods(values, helm_major=helm_major)[0]
    assert (w.env["OMP_NUM_THREADS"], w.env["A"]) == ("7", "role")


def test_threads_follow_the_cpu_limit(helm_major):
    values = {"roles": {"worker": {"replicas": 2, "resources": {"limits": {"cpu": "2500m"}}}}}
    w = pods(values, helm_major=helm_major)[0]
    assert {w.env[k] for k in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS")} == {"3"}
    assert "TF_NUM_INTEROP_THREADS" not in w.env  # the launcher sets max(2, intra-op)


def test_storage_env_and_mounts(helm_major):
    values = {
        "storage": {
            "checkpoints": {"type": "pvc"},
            "data": {"type": "existingClaim", "existingClaim": "corpus"},
            "logs": {"type": "none"},
        }
    }
    docs = render(values, helm_major=helm_major)
    w = pods(values, helm_major=helm_major)[0]
    assert w.env["AIP_MODEL_DIR"] == "/mnt/checkpoints/model"
    assert w.env["AIP_CHECKPOINT_DIR"] == w.env["CHECKPOINT_DIR"] == "/mnt/checkpoints/checkpoints"
    assert "LOG_DIR" not in w.env and "AIP_TENSORBOARD_LOG_DIR" not in w.env
    claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in w.pod_spec["volumes"]}
    assert claims["checkpoints"] == "tf-tf-cluster-checkpoints" and claims["data"] == "corpus"
    pvcs = [d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert pvcs == ["tf-tf-cluster-checkpoints"]


def test_gpus_and_shm(helm_major):
    values = {"shmSize": "2Gi", "roles": {"worker": {"replicas": 2, "gpus": {"nvidia.com/gpu": 2}}}}
    w = pods(values, helm_major=helm_major)[0]
    res = w.container["resources"]
    assert res["limits"]["nvidia.com/gpu"] == 2 and res["requests"]["nvidia.com/gpu"] == 2
    shm = next(v for v in w.pod_spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}


def test_tensorflow_cluster_resolver_parses_every_pod():
    """TensorFlow's own TFConfigClusterResolver reads each pod's TF_CONFIG as intended."""
    import os

    from tensorflow.python.distribute.cluster_resolver.tfconfig_cluster_resolver import TFConfigClusterResolver

    for values in (MWMS, MWMS_CHIEF, PS):
        for pod in pods(values):
            old = os.environ.get("TF_CONFIG")
            os.environ["TF_CONFIG"] = pod.env["TF_CONFIG"]
            try:
                r = TFConfigClusterResolver()
                assert r.task_type == pod.role and r.task_id == pod.index
                assert r.cluster_spec().as_dict() == pod.tf_config["cluster"]
                assert set(r.cluster_spec().jobs) <= {"chief", "worker", "ps"}
            finally:
                os.environ.pop("TF_CONFIG") if old is None else os.environ.__setitem__("TF_CONFIG", old)
