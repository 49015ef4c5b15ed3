"""The chart's default image on the node: a stand-in for TensorFlow's official image (no registry
serves images here), and the package index its pods install the chart's `packages` from.

The stand-ins are built from the official recipes under the official names,
docker.io/tensorflow/tensorflow:<tf> and its `-jupyter` variant (the notebook's; the files/*standin.Containerfile
say how they differ), and `up` says so in its log. The index is this machine's pip's wheels of every requirement the
chart's values and the examples name under `packages`, served on the pod bridge's gateway (the
stand-in's /etc/pip.conf points there): a pod's `packages` init container reaches it as it would
PyPI or a mirror.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import yaml

from .config import BASE_IMAGE, CACHE, GATEWAY, HERE, PACKAGES_PORT, ROOT, STANDIN_REPO, tf_version
from .proc import NodeError, say, start, wait_for
from .runtime import podman

CONTAINERFILE = HERE / "files" / "tensorflow-standin.Containerfile"
INDEX = CACHE / "package-index"
INDEX_URL = f"http://{GATEWAY}:{PACKAGES_PORT}/"
PIP_CONF = f"[global]\nno-index = true\nfind-links = {INDEX_URL}\ntrusted-host = {GATEWAY}\n"


def standin_image() -> str:
    return f"{STANDIN_REPO}:{tf_version()}"


def requirements() -> list[str]:
    """Every pip requirement under `packages` in the chart's values and the examples' values files."""
    files = [ROOT / "charts" / "tf-cluster" / "values.yaml", *sorted((ROOT / "values-examples").rglob("*.yaml"))]
    out: set[str] = set()
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            packages = doc.get("packages") if isinstance(doc, dict) else None
            for key in ("training", "tensorboard"):
                out.update(((packages or {}).get(key) or {}).values())
    return sorted(out)


def ensure_index() -> Path:
    """The wheels of `requirements()` in INDEX (downloaded once per set; an sdist built into a
    wheel here, as pip in a pod would build it)."""
    reqs = requirements()
    stamp = INDEX / "requirements.txt"
    if stamp.exists() and stamp.read_text().split() == reqs:
        return INDEX
    say(f"the pods' package index: {len(reqs)} wheels through this machine's pip ({' '.join(reqs)})")
    tmp = Path(tempfile.mkdtemp(prefix="package-index-", dir=CACHE))
    try:
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q"]
        p = subprocess.run([*argv, "--wheel-dir", tmp, *reqs], capture_output=True, text=True)
        if p.returncode != 0:
            raise NodeError(f"pip could not fetch the pods' packages ({' '.join(reqs)}):\n{p.stderr[-2000:]}")
        (tmp / "requirements.txt").write_text("\n".join(reqs) + "\n")
        shutil.rmtree(INDEX, ignore_errors=True)
        tmp.chmod(0o755)  # mkdtemp made it 0700
        tmp.rename(INDEX)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return INDEX


def ca_bundle() -> Path:
    """What pip trusts during the build: $PIP_CERT / $REQUESTS_CA_BUNDLE (a TLS-intercepting
    proxy's), else the system's bundle."""
    from tf_cluster.imagebuild import default_ca_bundle

    return default_ca_bundle() or Path("/etc/ssl/certs/ca-certificates.crt")


JUPYTER_CONTAINERFILE = HERE / "files" / "tensorflow-jupyter-standin.Containerfile"
JUPYTER_REQUIREMENTS = ROOT / "images" / "notebooks" / "requirements.txt"


def jupyter_image() -> str:
    return f"{STANDIN_REPO}:{tf_version()}-jupyter"


def build(image: str, containerfile: Path, base: str, files: dict[str, str], args: dict[str, str]) -> str:
    """`image` in podman's store, built from `containerfile` on `base` with `files` in its context
    (again only when any of it changed: a label holds their hash)."""
    parts = [containerfile.read_text(), base, *sorted(f"{k}\0{v}" for k, v in {**files, **args}.items())]
    want = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    have = podman("image", "inspect", "--format", '{{index .Labels "tf-cluster.recipe"}}', image, check=False)
    if have.returncode == 0 and have.stdout.strip() == want:
        say(f"{image}: the harness's stand-in for TensorFlow's official image (built from its recipe)")
        return image
    say(f"building {image}, a stand-in for TensorFlow's official image (no registry here): {containerfile.name}")
    with tempfile.TemporaryDirectory(prefix="standin-") as ctx:
        for name, text in files.items():
            (Path(ctx) / name).write_text(text)
        argv = ["build", "--layers", "--network", "host", "--secret", f"id=pipca,src={ca_bundle()}"]
        argv += ["--build-arg", f"BASE={base}"]
        for k, v in args.items():
            argv += ["--build-arg", f"{k}={v}"]
        argv += ["--label", f"tf-cluster.recipe={want}", "-t", image, "-f", containerfile, ctx]
        p = podman(*argv, check=False)
        if p.returncode != 0:
            raise NodeError(f"building the stand-in {image} failed:\n{(p.stdout + p.stderr)[-3000:]}")
    say(f"built {image}")
    return image


def ensure_standin() -> str:
    """The stand-in in podman's store (built when its recipe changed): its name."""
    return build(standin_image(), CONTAINERFILE, BASE_IMAGE, {"pip.conf": PIP_CONF}, {"TF_VERSION": tf_version()})


def ensure_jupyter_standin() -> str:
    """The stand-in of the official `-jupyter` image, on the stand-in (ensure_standin first)."""
    files = {"requirements.txt": JUPYTER_REQUIREMENTS.read_text()}
    return build(jupyter_image(), JUPYTER_CONTAINERFILE, standin_image(), files, {})


def serve_index() -> None:
    """The package index on the pod bridge's gateway, for every node's pods."""
    index = ensure_index()
    start(
        "package-index", [sys.executable, "-m", "http.server", PACKAGES_PORT, "--bind", GATEWAY, "--directory", index]
    )
    wait_for(
        "the pods' package index",
        lambda: urllib.request.urlopen(INDEX_URL, timeout=2).status == 200,
        30,
        "package-index",
    )
    say(f"the pods' package index serves {INDEX_URL} (the stand-in's pip.conf)")
