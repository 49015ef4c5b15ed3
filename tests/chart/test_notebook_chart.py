"""The notebook (templates/notebook.yaml, _notebook.tpl) and the interactive coordinator: what the chart
renders, its RBAC, its token's Secret, and the servers' heartbeat logic in the launcher. The browser test on
the real node is tests/e2e/cluster/test_notebook.py."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from rendering import EXAMPLES, render, render_text
from tf_cluster import ROOT, helm, images, manifests

TF = images.tf_version()  # the chart's appVersion: the default tag is <appVersion>

NOTEBOOK = next(p for p in EXAMPLES if p.stem == "notebook-coordinator")
LAUNCHER = ROOT / "charts" / "tf-cluster" / "files"


def values(**notebook) -> dict:
    v = yaml.safe_load(NOTEBOOK.read_text())
    v["notebook"].update(notebook)
    return v


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def named(docs, kind, suffix):
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return doc


def env_of(container) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def resolved_env(container, docs, index: int = 0) -> dict[str, str]:
    """The container's environment as its kubelet gives it (TF_CONFIG composed from the run's ConfigMap)."""
    return manifests.resolve_env(
        container, index=index, namespace="default", node_cpus=1, config_maps=manifests.config_maps(docs)
    )


def test_off_by_default_nothing_of_it_renders():
    docs = render({})
    assert not [d for d in docs if "notebook" in d["metadata"]["name"]]
    assert "tf_cluster_notebook.py" not in named(docs, "ConfigMap", "-launcher")["data"]


def test_coordinator_the_notebook_pod_is_the_chief_and_no_chief_job_exists():
    docs = render(values())
    jobs = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in by_kind(docs, "Job")}
    assert sorted(jobs) == ["ps", "worker"]
    pod = named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]
    (nb,) = pod["containers"]
    env = env_of(nb)
    cluster = json.loads(resolved_env(nb, docs)["TF_CONFIG"])
    assert cluster["task"] == {"type": "chief", "index": 0}
    (chief_address,) = cluster["cluster"]["chief"]
    # the chief's address in every task's TF_CONFIG is this pod's hostname under the headless Service
    assert chief_address == f"{pod['hostname']}.{pod['subdomain']}:2222"
    service = next(d for d in by_kind(docs, "Service") if d["spec"].get("clusterIP") == "None")
    assert pod["subdomain"] == service["metadata"]["name"]
    labels = named(docs, "Deployment", "-notebook")["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in service["spec"]["selector"].items())
    assert {"name": "tf", "containerPort": 2222, "protocol": "TCP"} in nb["ports"]
    for job in jobs.values():
        tf = job["spec"]["template"]["spec"]["containers"][0]
        server = resolved_env(tf, docs)  # the run's environment (envFrom) and the pod's own
        assert json.loads(resolved_env(tf, docs)["TF_CONFIG"])["cluster"] == cluster["cluster"]
        assert server["TF_CLUSTER_HEARTBEAT"] == env["TF_CLUSTER_HEARTBEAT"] == server["TF_CLUSTER_LEADER_JOB"]
        assert server["TF_CLUSTER_STOP_WITH_LEADER"] == "true"
        assert server["TF_CLUSTER_HEARTBEAT_TIMEOUT"] == "300" and server["TF_CLUSTER_START_TIMEOUT"] == "3600"
    heartbeat = named(docs, "ConfigMap", env["TF_CLUSTER_HEARTBEAT"])
    assert heartbeat["metadata"]["name"] == pod["hostname"].removesuffix("-0")
    assert "data" not in heartbeat, "rendered without data: the kernel writes it, every render is the same"
    assert not by_kind(docs, "Lease"), "Argo CD never syncs Leases"
    assert named(docs, "Deployment", "-notebook")["spec"]["strategy"] == {"type": "Recreate"}


def test_rbac_least_privilege_one_secret_one_heartbeat_by_name():
    docs = render(values())
    launcher = named(docs, "Role", "-launcher")
    (rule, *fence, events) = launcher["rules"]
    assert fence == [  # peers' pods and nodeLoss.fence: watch the release's pods, mark a stranded one Failed
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    ]
    assert events == {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}  # its own moments
    beat = next(c["metadata"]["name"] for c in by_kind(docs, "ConfigMap") if "-chief-" in c["metadata"]["name"])
    assert rule == {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [beat],
        "verbs": ["get"],
    }
    notebook = named(docs, "Role", "-notebook")
    assert notebook["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["tf-tf-cluster-notebook"],
            "verbs": ["get", "patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [beat],
            "verbs": ["get", "patch"],
        },
    ]
    binding = named(docs, "RoleBinding", "-notebook")
    pod = named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"] == "tf-tf-cluster-notebook"
    # the training pods' account cannot touch the token or the heartbeat
    assert pod["serviceAccountName"] != by_kind(docs, "Job")[0]["spec"]["template"]["spec"]["serviceAccountName"]


def test_no_secret_material_in_the_manifest_and_the_same_on_every_render():
    text = render_text(values())
    docs = render(values())
    (secret,) = by_kind(docs, "Secret")
    assert secret["metadata"]["name"] == "tf-tf-cluster-notebook"
    assert not (secret.keys() & {"data", "stringData"}), "the chart renders the token's Secret without data"
    env = env_of(named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]["containers"][0])
    assert "JUPYTER_TOKEN" not in env and env["JUPYTER_TOKEN_FILE"].startswith("/tmp/")
    assert not re.search(r"token=[0-9a-f]{16,}|password", text, re.IGNORECASE)
    assert render_text(values()) == text


def test_existing_secret_is_read_not_written_and_not_rendered():
    docs = render(values(auth={"existingSecret": "team-jupyter", "existingSecretKey": "jupyter-token"}))
    assert not by_kind(docs, "Secret")
    (rule, _beat) = named(docs, "Role", "-notebook")["rules"]
    assert rule["resourceNames"] == ["team-jupyter"] and rule["verbs"] == ["get"]
    (packages, prepare) = named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]["initContainers"]
    assert (packages["name"], prepare["name"]) == ("packages", "prepare")
    env = env_of(prepare)
    assert (env["TF_CLUSTER_TOKEN_SECRET"], env["TF_CLUSTER_TOKEN_KEY"], env["TF_CLUSTER_TOKEN_CREATE"]) == (
        "team-jupyter",
        "jupyter-token",
        "false",
    )


def test_notebook_pods_are_locked_down_and_covered_by_network_policies():
    docs = render(values(ingress={"enabled": True, "host": "lab.example.com", "path": "/jupyter"}))
    policies = by_kind(docs, "NetworkPolicy")
    for d in by_kind(docs, "Deployment") + by_kind(docs, "Job"):
        pod = d["spec"]["template"]
        spec = pod["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec["containers"] + spec.get("initContainers", []):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
        labels = pod["metadata"]["labels"]

        def selects(p, labels=labels):
            sel = p["spec"]["podSelector"]
            return all(labels.get(k) == v for k, v in sel.get("matchLabels", {}).items()) and all(
                labels.get(e["key"]) in e["values"] for e in sel.get("matchExpressions", [])
            )

        assert any(selects(p) for p in policies), d["metadata"]["name"]
    notebook = named(docs, "NetworkPolicy", "-notebook")
    assert notebook["spec"]["ingress"] == [{"ports": [{"port": 8888, "protocol": "TCP"}]}]
    training = named(docs, "NetworkPolicy", "-training")
    assert "notebook" in training["spec"]["podSelector"]["matchExpressions"][2]["values"]
    ingress = named(docs, "Ingress", "-notebook")
    assert ingress["spec"]["rules"][0]["host"] == "lab.example.com"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["path"] == "/jupyter"
    args = named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--ServerApp.base_url=/jupyter/" in args


def test_who_may_reach_the_notebook_is_a_value():
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    docs = render({**values(), "networkPolicy": {"notebookFrom": peers}})
    assert named(docs, "NetworkPolicy", "-notebook")["spec"]["ingress"][0]["from"] == peers


def test_a_notebook_without_coordinator_leaves_the_chief_job_alone():
    docs = render({**values(coordinator=False)})
    assert "chief" in {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] for d in by_kind(docs, "Job")
    }
    pod = named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]
    assert "hostname" not in pod and "TF_CONFIG" not in env_of(pod["containers"][0])
    assert not [c for c in by_kind(docs, "ConfigMap") if "-chief-" in c["metadata"]["name"]]
    assert named(docs, "Role", "-launcher")["rules"][0]["resources"] == ["jobs"]


def test_the_gang_counts_job_pods_only():
    text = helm.Helm("4").template(
        "tf", helm.Values.of([NOTEBOOK]), api_versions=["scheduling.k8s.io/v1beta1/PodGroup"]
    )
    (group,) = by_kind(helm.parse(text), "PodGroup")
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3  # 2 workers + 1 ps; the kernel is no Job's pod


def test_image_defaults_to_the_official_jupyter_image_and_follows_the_training_image():
    docs = render(values())
    (nb,) = named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]["containers"]
    assert nb["image"] == f"docker.io/tensorflow/tensorflow:{TF}-jupyter"
    docs = render({**values(), "image": {"repository": "registry.example.com/tf", "tag": f"{TF}-cpu-r1"}})
    (nb,) = named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]["containers"]
    assert nb["image"] == f"registry.example.com/tf:{TF}-cpu-r1-notebook"


# ------------------------------------------------------------ the servers' side: launcher.heartbeat_condition


@pytest.fixture(scope="module")
def launcher():
    import sys

    sys.path.insert(0, str(LAUNCHER))
    import tf_cluster_launcher.leader

    return tf_cluster_launcher.leader


def heartbeat(renew: str | None = None, done: str | None = None) -> dict:
    """The heartbeat ConfigMap's data as the kernel writes it (tf_cluster_notebook.Session)."""
    return {k: v for k, v in (("renewTime", renew), ("done", done)) if v}


@pytest.mark.parametrize(
    "case,beat,started,now,expected",
    [
        ("no kernel yet, within the start timeout", {}, 1000, 1000 + 3599, ""),
        ("no kernel ever came", {}, 1000, 1000 + 3601, "Abandoned"),
        ("kernel alive", {"renew": "1970-01-01T00:30:00.000000Z"}, 1000, 1800 + 299, ""),
        (
            "kernel silent past the heartbeat timeout",
            {"renew": "1970-01-01T00:30:00.000000Z"},
            1000,
            1800 + 301,
            "Abandoned",
        ),
        ("done", {"renew": "1970-01-01T00:30:00.000000Z", "done": "x"}, 1000, 1801, "Complete"),
        ("kernel renewed just before this server started", {"renew": "1970-01-01T00:16:00.5Z"}, 1000, 1100, ""),
        ("a dead kernel's old renewal: the start timeout applies", {"renew": "1970-01-01T00:00:10Z"}, 1000, 2000, ""),
    ],
)
def test_heartbeat_condition(launcher, case, beat, started, now, expected):
    assert launcher.heartbeat_condition(heartbeat(**beat), started, now, 3600, 300) == expected, case
    assert launcher.heartbeat_condition(None, 1000, 1000 + 3601, 3600, 300) == "Abandoned"  # never created


def test_api_times_parse_with_and_without_fractions(launcher):
    assert launcher.parse_time("1970-01-01T00:00:10Z") == 10
    assert launcher.parse_time("1970-01-01T00:00:10.250000Z") == pytest.approx(10.25)
    assert launcher.parse_time("") is None and launcher.parse_time("yesterday") is None


def test_user_env_keeps_its_order_and_notebook_env_wins_as_a_roles_env_does():
    top = [{"name": "A", "value": "a"}, {"name": "B", "value": "$(A)-b"}, {"name": "HOME", "value": "/work"}]
    docs = render({**values(env=[{"name": "B", "value": "nb"}]), "env": top})
    (nb,) = named(docs, "Deployment", "-notebook")["spec"]["template"]["spec"]["containers"]
    names = [e["name"] for e in nb["env"]]
    assert names[-3:] == ["A", "HOME", "B"]  # top-level in order (B moved to notebook.env's), then notebook.env
    assert env_of(nb)["B"] == "nb" and env_of(nb)["HOME"] == "/work" and names.count("HOME") == 1


def test_prepare_answers_jupyterlabs_news_question_once_and_keeps_the_users_answer(tmp_path, monkeypatch):
    """No "Would you like to get notified about official Jupyter news?" for each new user (pods often
    have no internet); a setting the user made is kept."""
    import sys

    sys.path.insert(0, str(LAUNCHER))
    import tf_cluster_notebook

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("JUPYTERLAB_SETTINGS_DIR", raising=False)
    tf_cluster_notebook.quiet_jupyterlab()
    path = tmp_path / ".jupyter/lab/user-settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings"
    assert json.loads(path.read_text()) == {"fetchNews": "false", "checkForUpdates": False}
    path.write_text('{"fetchNews": "true"}')
    tf_cluster_notebook.quiet_jupyterlab()
    assert json.loads(path.read_text()) == {"fetchNews": "true"}
