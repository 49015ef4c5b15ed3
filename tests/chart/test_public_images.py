"""The first install runs anywhere: with no values and with every example, each pod pulls a
fully-qualified image from a public registry (TensorFlow's official one by default), the example
trainers ship in the chart, and the `packages` init container adds what that image lacks."""

from __future__ import annotations

import re

import pytest
import yaml

from rendering import EXAMPLES, render
from tf_cluster import CHART, ROOT, helm, manifests

OFFICIAL = "docker.io/tensorflow/tensorflow"
# registry host / path : tag, the registries anyone can pull from without an account
PUBLIC = re.compile(r"^(docker\.io|quay\.io|ghcr\.io|registry\.k8s\.io|nvcr\.io)/[a-z0-9._/-]+:[A-Za-z0-9._-]+$")
TUNE = ROOT / "values-examples" / "tune" / "values.yaml"


def pods(docs):
    """(object kind/name, container kind, container) for every container of every pod template."""
    for d in docs:
        spec = d.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") if d["kind"] in ("Job", "Deployment") else spec
        if d["kind"] not in ("Job", "Deployment", "Pod") or not pod:
            continue
        for kind in ("initContainers", "containers"):
            for c in pod.get(kind) or []:
                yield f"{d['kind']}/{d['metadata']['name']}", c


@pytest.mark.parametrize("example", [None, *EXAMPLES, TUNE], ids=lambda p: p.stem if p else "no-values")
def test_every_pod_pulls_a_public_fully_qualified_image(example):
    docs = helm.parse(helm.template([example] if example else []))
    seen = set()
    for where, c in pods(docs):
        image = c["image"]
        assert PUBLIC.match(image), f"{where} container {c['name']} pulls {image!r}, which no public registry serves"
        seen.add(image)
    assert seen, "no container rendered"
    variant = {"mwms-gpu": "-gpu"}.get(example.stem if example else "", "")
    want = {f"{OFFICIAL}:2.21.0{variant}"}
    if example and example.stem == "notebook-coordinator":  # JupyterLab: the official -jupyter image
        want.add(f"{OFFICIAL}:2.21.0-jupyter")
    assert seen == want, seen


def test_the_default_release_ships_its_trainers_and_adds_tf_keras_and_tensorboard_at_start():
    docs = helm.parse(helm.template([]))
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-launcher"))
    shipped = sorted(p.name for p in (CHART / "files" / "trainers").glob("*.py"))
    assert sorted(k.removeprefix("trainers.") for k in config["data"] if k.startswith("trainers.")) == shipped
    for k in shipped:
        assert config["data"][f"trainers.{k}"] == (CHART / "files" / "trainers" / k).read_text().rstrip("\n") + "\n"
    job = next(d for d in docs if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    (packages,) = [c for c in pod["initContainers"] if c["name"] == "packages"]
    assert packages["command"][-3:] == [
        "/opt/tf-cluster/packages",
        "tensorboard=tensorboard==2.21.0",
        "tf_keras=tf-keras==2.21.0",
    ]
    (main,) = pod["containers"]
    assert main["command"][-1] == "/opt/tf-cluster/trainers/mwms_fit.py"
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/opt/tf-cluster/trainers"]["readOnly"] and mounts["/opt/tf-cluster/packages"]["readOnly"]
    env = manifests.resolve_env(
        main, index=0, namespace="default", node_cpus=1, config_maps=manifests.config_maps(docs)
    )
    assert env["PYTHONPATH"] == "/opt/tf-cluster/packages"  # from the run's environment (envFrom)
    # the init container runs as the training container does: non-root, read-only root
    assert packages["securityContext"] == main["securityContext"]
    assert packages["securityContext"]["readOnlyRootFilesystem"] is True


def test_packages_follow_the_values():
    """A mirror through pipEnv, an extra package, and `enabled: false` for an image that has them."""
    values = {
        "packages": {
            "pipEnv": [{"name": "PIP_INDEX_URL", "value": "https://pypi.example.com/simple"}],
            "training": {"hypertune": "cloudml-hypertune==0.1.0.dev6"},
        },
        "tensorboard": {"enabled": True},
    }
    docs = render(values)
    job = next(d for d in docs if d["kind"] == "Job")
    (packages,) = [c for c in job["spec"]["template"]["spec"]["initContainers"] if c["name"] == "packages"]
    assert packages["command"][-3:] == [
        "hypertune=cloudml-hypertune==0.1.0.dev6",
        "tensorboard=tensorboard==2.21.0",
        "tf_keras=tf-keras==2.21.0",
    ]
    assert {"name": "PIP_INDEX_URL", "value": "https://pypi.example.com/simple"} in packages["env"]
    # a name the chart sets too: the user's, once (Helm 4 refuses a name set twice)
    cached = render({"packages": {"pipEnv": [{"name": "PIP_NO_CACHE_DIR", "value": "0"}]}})
    job = next(d for d in cached if d["kind"] == "Job")
    (packages,) = [c for c in job["spec"]["template"]["spec"]["initContainers"] if c["name"] == "packages"]
    cache = [e for e in packages["env"] if e["name"] == "PIP_NO_CACHE_DIR"]
    assert cache == [{"name": "PIP_NO_CACHE_DIR", "value": "0"}]
    board = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    (init,) = board["initContainers"]
    assert "tensorboard=tensorboard==2.21.0" in init["command"] and board["containers"][0]["command"] == [
        "python3",
        "-m",
        "tensorboard.main",
    ]
    off = render({"packages": {"enabled": False}, "tensorboard": {"enabled": True}})
    text = yaml.safe_dump_all(off)
    assert "/opt/tf-cluster/packages" not in text and "name: packages" not in text


def test_the_official_images_read_only_root_is_not_the_working_directory():
    """TensorFlow's official image works in `/`, read-only under the chart's security context: a
    program that writes `./logs` (as the Kubeflow examples do) works in the pod's /tmp; another
    image keeps its own WORKDIR unless `workingDir` says."""

    def working_dirs(values):
        jobs = [d for d in render(values) if d["kind"] == "Job"]
        return {c.get("workingDir") for j in jobs for c in j["spec"]["template"]["spec"]["containers"]}

    assert working_dirs({}) == {"/tmp"}
    assert working_dirs({"image": {"repository": "registry.example.com/ml/trainer", "tag": "1"}}) == {None}
    assert working_dirs({"image": {"repository": "registry.example.com/ml/trainer"}, "workingDir": "/app"}) == {"/app"}


def test_a_digest_pins_only_the_image_it_was_taken_of():
    """`image.digest` names one image's content: the notebook's `-jupyter` image, or a role that names another
    tag or repository, must not run the training image's digest instead (it did: the notebook pod then ran
    the training image, without JupyterLab)."""
    digest = "sha256:" + "a" * 64
    values = yaml.safe_load((ROOT / "values-examples" / "notebook-coordinator.yaml").read_text())
    values["image"] = {"digest": digest}
    values["roles"]["ps"]["image"] = {"tag": "2.21.0-gpu"}
    images: dict[str, set[str]] = {}
    for where, c in pods(render(values)):
        images.setdefault(where, set()).add(c["image"])

    def of(kind: str, part: str) -> set[str]:
        (found,) = [found for where, found in images.items() if where.startswith(kind + "/") and part in where]
        return found

    assert of("Job", "-worker-") == {f"{OFFICIAL}@{digest}"}  # the image the digest was taken of
    assert of("Job", "-ps-") == {f"{OFFICIAL}:2.21.0-gpu"}  # the tag it names
    assert of("Deployment", "-notebook") == {f"{OFFICIAL}:2.21.0-jupyter"}  # its own image, unpinned


def test_a_pythonpath_the_user_sets_comes_before_the_packages_dir_not_instead_of_it():
    """Else the packages the image lacks (tf-keras) vanish from the program's path and `fit` breaks."""
    values = yaml.safe_load((ROOT / "values-examples" / "notebook-coordinator.yaml").read_text())
    values["env"] = [{"name": "PYTHONPATH", "value": "/code/lib"}]
    values["roles"]["ps"]["env"] = [{"name": "PYTHONPATH", "value": "/ps/lib"}]
    paths = {}
    for where, c in pods(render(values)):
        for e in c.get("env") or []:
            if e["name"] == "PYTHONPATH" and c["name"] in ("tensorflow", "notebook"):
                paths[where.split("-")[-2] if where.startswith("Job/") else "notebook"] = e["value"]
    assert paths == {
        "worker": "/code/lib:/opt/tf-cluster/packages",
        "ps": "/ps/lib:/opt/tf-cluster/packages",  # a role's env wins over the top-level one
        "notebook": "/code/lib:/opt/tf-cluster/launcher:/opt/tf-cluster/packages",
    }
    values["packages"] = {"enabled": False}
    values["env"] = [{"name": "PYTHONPATH", "value": "/code/lib"}]
    worker = [c for where, c in pods(render(values)) if "-worker-" in where and c["name"] == "tensorflow"]
    assert {e["value"] for e in worker[0]["env"] if e["name"] == "PYTHONPATH"} == {"/code/lib"}
