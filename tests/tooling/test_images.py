"""Image contexts: the Dockerfile renders per variant; the tag follows the content."""

from __future__ import annotations

import pytest

from tf_cluster import imagebuild, images

TF = images.tf_version()  # the chart's appVersion (tests/unit/test_versions.py)


@pytest.mark.parametrize("variant,package", [("cpu", f"tensorflow-cpu=={TF}"), ("gpu", f"tensorflow[and-cuda]=={TF}")])
def test_dockerfile_per_variant(variant, package):
    text = images.render_dockerfile(variant, base="python:3.11-slim-bookworm")
    assert text.startswith("# Generated") and "FROM python:3.11-slim-bookworm" in text
    assert f"({package})" in text and f"tf-keras=={TF}" in text and "USER 1000:1000" in text
    assert text.index("pip install") < text.index("COPY trainers/")  # trainer edits rebuild one layer


def test_ca_bundle_is_a_secret_mount_never_a_layer():
    text = images.render_dockerfile("cpu", base="b", ca_secret=True)
    assert "--mount=type=secret,id=pipca" in text and "COPY" not in text.split("--mount")[0].splitlines()[-1]


def test_tag_changes_with_a_trainer_and_only_then(tmp_path):
    a = images.assemble("cpu", out=tmp_path / "a")
    b = images.assemble("cpu", out=tmp_path / "b")
    assert a.digest == b.digest and a.image == f"tf-cluster-trainer:{TF}-cpu"
    (b.path / "trainers" / "mwms_fit.py").write_text("# changed\n")
    assert images.digest(b.path) != a.digest
    assert a.pinned_image.startswith(f"tf-cluster-trainer:{TF}-cpu-")


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="unknown variant 'tpu'"):
        images.render_dockerfile("tpu", base="b")


def test_run_local_gives_isolated_tasks_what_the_image_gives_a_container():
    """run-local's IMAGE_ENV / IMAGE_WORKDIR / POD_VENV are read from the Dockerfile, not guessed."""
    import re

    from tf_cluster.localrun import processes as local

    text = images.render_dockerfile("cpu", base="b")
    env_block = text[text.index("ENV ") : text.index("\n\n", text.index("ENV "))]
    pairs = dict(re.findall(r"(\w+)=(\S+?)\s*(?:\\|$)", env_block, re.M))
    assert {k: v for k, v in pairs.items() if k != "PATH"} == local.IMAGE_ENV
    assert pairs["PATH"].startswith(local.POD_VENV + "/bin:")
    assert re.search(r"^WORKDIR (\S+)$", text, re.M).group(1) == local.IMAGE_WORKDIR
    assert f"-d {local.IMAGE_WORKDIR} tf" in text  # the user's home, $HOME in the pod


def test_extra_requirements_are_a_layer_of_their_own_with_their_own_tag(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("tabulate==0.9.0\n")
    plain = images.assemble("cpu", out=tmp_path / "plain")
    ctx = images.assemble("cpu", out=tmp_path / "req", extra_requirements=req)
    text = (ctx.path / "Dockerfile").read_text()
    assert (ctx.path / "extra-requirements.txt").read_text() == "tabulate==0.9.0\n"
    tf_layer = text.index("tf-keras==")
    extra_layer = text.index("-r /tmp/tf-cluster/extra-requirements.txt")
    assert tf_layer < extra_layer < text.index("COPY trainers/")  # editing them keeps the TensorFlow layer
    assert "-c /tmp/tf-cluster/constraints.txt -r /tmp/tf-cluster/extra-requirements.txt" in text
    assert "extra-requirements" not in (plain.path / "Dockerfile").read_text()
    assert plain.tag == f"{TF}-cpu" and ctx.tag.startswith(f"{TF}-cpu-r") and len(ctx.tag) == len(plain.tag) + 10
    req.write_text("tabulate==0.8.10\n")
    assert images.assemble("cpu", out=tmp_path / "req2", extra_requirements=req).tag != ctx.tag


@pytest.mark.parametrize(
    "builder,image,stored",
    [
        ("podman", "tf-cluster-trainer:2.21.0-cpu", "localhost/tf-cluster-trainer:2.21.0-cpu"),
        ("buildah", "ml/trainer:1", "localhost/ml/trainer:1"),
        ("podman", "registry.example:5000/ml/trainer:1", "registry.example:5000/ml/trainer:1"),
        ("podman", "ghcr.io/org/trainer:1", "ghcr.io/org/trainer:1"),
        ("podman", "localhost/trainer:1", "localhost/trainer:1"),
        ("docker", "ml/trainer:1", "ml/trainer:1"),
    ],
)
def test_a_built_image_is_loaded_into_kind_under_the_name_its_builder_stored(builder, image, stored):
    """`build --kind-load` and `smoke --kind` load the name the builder's store has (podman puts a
    name without a registry under localhost/), and tell the pods that name."""
    assert imagebuild.local_name(builder, image) == stored
