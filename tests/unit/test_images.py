"""Image contexts: the Dockerfile renders per variant; the tag follows the content."""

from __future__ import annotations

import pytest

from tf_cluster import images


@pytest.mark.parametrize(
    "variant,package", [("cpu", "tensorflow-cpu==2.21.0"), ("gpu", "tensorflow[and-cuda]==2.21.0")]
)
def test_dockerfile_per_variant(variant, package):
    text = images.render_dockerfile(variant, base="python:3.11-slim-bookworm")
    assert text.startswith("# Generated") and "FROM python:3.11-slim-bookworm" in text
    assert f"({package})" in text and "tf-keras==2.21.0" in text and "USER 1000:1000" in text
    assert text.index("pip install") < text.index("COPY trainers/")  # trainer edits rebuild one layer


def test_ca_bundle_is_a_secret_mount_never_a_layer():
    text = images.render_dockerfile("cpu", base="b", ca_secret=True)
    assert "--mount=type=secret,id=pipca" in text and "COPY" not in text.split("--mount")[0].splitlines()[-1]


def test_tag_changes_with_a_trainer_and_only_then(tmp_path):
    a = images.assemble("cpu", out=tmp_path / "a")
    b = images.assemble("cpu", out=tmp_path / "b")
    assert a.digest == b.digest and a.image == "tf-cluster-trainer:2.21.0-cpu"
    (b.path / "trainers" / "mwms_fit.py").write_text("# changed\n")
    assert images.digest(b.path) != a.digest
    assert a.pinned_image.startswith("tf-cluster-trainer:2.21.0-cpu-")


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="unknown variant 'tpu'"):
        images.render_dockerfile("tpu", base="b")


def test_run_local_gives_isolated_tasks_what_the_image_gives_a_container():
    """run-local's IMAGE_ENV / IMAGE_WORKDIR / POD_VENV are read from the Dockerfile, not guessed."""
    import re

    from tf_cluster import local

    text = images.render_dockerfile("cpu", base="b")
    env_block = text[text.index("ENV ") : text.index("\n\n", text.index("ENV "))]
    pairs = dict(re.findall(r"(\w+)=(\S+?)\s*(?:\\|$)", env_block, re.M))
    assert {k: v for k, v in pairs.items() if k != "PATH"} == local.IMAGE_ENV
    assert pairs["PATH"].startswith(local.POD_VENV + "/bin:")
    assert re.search(r"^WORKDIR (\S+)$", text, re.M).group(1) == local.IMAGE_WORKDIR
    assert f"-d {local.IMAGE_WORKDIR} tf" in text  # the user's home, $HOME in the pod
