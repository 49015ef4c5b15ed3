"""Image build contexts: pure logic (render the Dockerfile, hash the context).

The context for variant V is build/images/V/: the rendered Dockerfile, the pip
requirements for that variant, the project's pins as constraints, the chart's
launcher and example trainers (charts/tf-cluster/files/). Its tag carries a hash of
all of it, so an unchanged context keeps its tag and any change gets a new one.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml

from . import CHART, IMAGES, REQUIREMENTS, work_dir

CACHES = shutil.ignore_patterns("__pycache__", "*.pyc")  # what importing the launcher in tests leaves

DEFAULT_REPOSITORY = "tf-cluster-trainer"
DEFAULT_BASE = "python:3.11-slim-bookworm"

VARIANTS = {
    "cpu": {"tf_package": "tensorflow-cpu=={tf}"},
    # pip's CUDA wheels: no CUDA base image needed, only the NVIDIA driver on the node.
    "gpu": {"tf_package": "tensorflow[and-cuda]=={tf}"},
}


@functools.cache
def tf_version() -> str:
    """The TensorFlow version of the default image: the chart's appVersion."""
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def __getattr__(name: str) -> str:  # images.TF_VERSION, read when first asked for (not at import)
    if name == "TF_VERSION":
        return tf_version()
    raise AttributeError(name)


def tf_package(variant: str) -> str:
    return VARIANTS[variant]["tf_package"].format(tf=tf_version())


@dataclass(frozen=True)
class Context:
    variant: str
    path: Path
    digest: str
    repository: str
    flavor: str = ""  # "-r<hash>" with extra requirements, "-notebook" with JupyterLab: another image, another tag

    @property
    def tag(self) -> str:
        return f"{tf_version()}-{self.variant}{self.flavor}"

    @property
    def image(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def pinned_image(self) -> str:
        return f"{self.repository}:{self.tag}-{self.digest[:12]}"


def render_dockerfile(
    variant: str,
    base: str,
    python: str = "python3",
    extra_packages=(),
    ca_secret: bool = False,
    extra_requirements: bool = False,
    notebook: bool = False,
) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: choose {', '.join(VARIANTS)}")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(IMAGES), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
    )
    return env.get_template("Dockerfile.j2").render(
        variant=variant,
        base=base,
        python=python,
        tf_version=tf_version(),
        ca_secret=ca_secret,
        extra_packages=list(extra_packages),
        extra_requirements=extra_requirements,
        notebook=notebook,
        tf_package=tf_package(variant),
    )


def requirements(variant: str) -> str:
    return f"{tf_package(variant)}\ntensorboard\ncloudml-hypertune\n"  # Vertex AI metric reports


def constraints() -> str:
    """The project's pins (constraints install nothing themselves: they only fix versions)."""
    return REQUIREMENTS.read_text()


def assemble(
    variant: str,
    base: str = DEFAULT_BASE,
    repository: str = DEFAULT_REPOSITORY,
    python: str = "python3",
    extra_packages=(),
    out: Path | None = None,
    ca_secret: bool = False,
    extra_requirements: Path | None = None,
    notebook: bool = False,
) -> Context:
    """The build context; `extra_requirements` (a pip requirements file) adds a layer and a tag
    suffix `-r<first 8 hex of its sha256>`; `notebook` adds JupyterLab and the example notebooks
    (the chart's files/notebooks/) and the suffix `-notebook` (the chart's notebook image)."""
    out = out or work_dir("build") / "images" / (variant + ("-notebook" if notebook else ""))
    if out.exists():
        shutil.rmtree(out)
    (out / "trainers").mkdir(parents=True)
    dockerfile = render_dockerfile(
        variant, base, python, extra_packages, ca_secret, bool(extra_requirements), notebook=notebook
    )
    (out / "Dockerfile").write_text(dockerfile)
    flavor = ""
    if extra_requirements:
        text = extra_requirements.read_text()
        (out / "extra-requirements.txt").write_text(text)
        flavor = "-r" + hashlib.sha256(text.encode()).hexdigest()[:8]
    if notebook:
        flavor += "-notebook"
        shutil.copytree(IMAGES / "notebooks", out / "notebooks")
        for example in sorted((CHART / "files" / "notebooks").glob("*.ipynb")):  # the chart ships them too
            shutil.copy2(example, out / "notebooks" / example.name)
        shutil.copy2(CHART / "files" / "tf_cluster_notebook.py", out / "tf_cluster_notebook.py")
    (out / "requirements.txt").write_text(requirements(variant))
    (out / "constraints.txt").write_text(constraints())
    shutil.copy2(CHART / "files" / "launcher.py", out / "launcher.py")
    shutil.copytree(CHART / "files" / "tf_cluster_launcher", out / "tf_cluster_launcher", ignore=CACHES)
    for f in sorted((CHART / "files" / "trainers").glob("*.py")):
        shutil.copy2(f, out / "trainers" / f.name)
    return Context(variant, out, digest(out), repository, flavor)


def digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()
