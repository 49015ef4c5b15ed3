"""Pod extensions per role (issue 47): extraVolumes, extraVolumeMounts, initContainers and
sidecars, rendered under Helm 4 and 3. Sidecars are Kubernetes native sidecars (init containers
with restartPolicy Always, listed first), so they stop when the training container ends and never
keep a finished Job's pod running. The refusals (a name or path the chart has) are files of the
bad-values corpus (tests/bad-values/extra-*, sidecar-*, init-container-*)."""

from __future__ import annotations

import yaml

from rendering import render
from tf_cluster import ROOT

CASE = yaml.safe_load((ROOT / "tests" / "golden" / "cases" / "pod-extensions.yaml").read_text())


def pod_spec(docs: list[dict], role: str) -> dict:
    (job,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["labels"]["app.kubernetes.io/component"] == role]
    return job["spec"]["template"]["spec"]


def test_sidecars_run_first_as_native_sidecars_then_the_init_containers(helm_major):
    spec = pod_spec(render(CASE, helm_major=helm_major), "worker")
    inits = spec["initContainers"]
    # the chart's tf-cluster-agent first (it holds the token: docs/user-guide/security.md), then the role's
    # sidecars, the chart's packages (after a proxy sidecar pip may need), the role's init containers
    assert [c["name"] for c in inits] == ["tf-cluster-agent", "ship-logs", "packages", "fetch-data"]
    assert inits[1]["restartPolicy"] == "Always" and "restartPolicy" not in inits[2]
    # no securityContext given: the training container's, so the pod stays Pod Security `restricted`
    training = next(c for c in spec["containers"] if c["name"] == "tensorflow")
    assert all(c["securityContext"] == training["securityContext"] for c in inits)
    assert [c["name"] for c in spec["containers"]] == ["tensorflow"]


def test_extra_volumes_and_mounts_sit_beside_the_charts(helm_major):
    spec = pod_spec(render(CASE, helm_major=helm_major), "chief")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["bucket-creds"]["secret"]["secretName"] == "bucket-creds"
    assert {"tmp", "launcher", "data", "checkpoints", "logs"} <= set(volumes)
    mounts = {
        m["mountPath"]: m for m in next(c for c in spec["containers"] if c["name"] == "tensorflow")["volumeMounts"]
    }
    assert mounts["/var/run/secrets/bucket"] == {
        "name": "bucket-creds",
        "mountPath": "/var/run/secrets/bucket",
        "readOnly": True,
    }
    launcher = {"/opt/tf-cluster/launcher/launcher.py", "/opt/tf-cluster/launcher/tf_cluster_launcher"}
    assert {"/tmp", *launcher, "/mnt/data", "/mnt/checkpoints", "/mnt/logs"} <= set(mounts)


def test_a_roles_own_list_replaces_the_defaults_and_its_own_security_context_is_kept(helm_major):
    own = {"name": "proxy", "image": "registry.example.com/proxy:1.0", "securityContext": {"runAsUser": 2000}}
    values = {**CASE, "roles": {**CASE["roles"], "worker": {"replicas": 2, "sidecars": [own]}}}
    docs = render(values, helm_major=helm_major)
    worker, chief = pod_spec(docs, "worker"), pod_spec(docs, "chief")
    assert [c["name"] for c in worker["initContainers"]] == ["tf-cluster-agent", "proxy", "packages", "fetch-data"]
    assert worker["initContainers"][1]["securityContext"] == {"runAsUser": 2000}
    assert [c["name"] for c in chief["initContainers"]] == ["tf-cluster-agent", "ship-logs", "packages", "fetch-data"]


def test_without_extensions_the_pod_has_only_the_charts_agent_and_packages(helm_major):
    spec = pod_spec(render({}, helm_major=helm_major), "worker")
    assert [c["name"] for c in spec["initContainers"]] == ["tf-cluster-agent", "packages"]
    chart = {"tmp", "launcher", "launcher-package", "trainers", "packages", "data", "checkpoints", "logs", "code"}
    chart |= {"dshm"}
    chart |= {"tf-cluster-agent", "tf-cluster-token"}
    assert {v["name"] for v in spec["volumes"]} <= chart
