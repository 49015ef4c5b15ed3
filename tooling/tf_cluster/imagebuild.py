"""Building an assembled image context (tf_cluster.images) with docker, podman or buildah: which
builder works here, its argv, the long build streamed with elapsed times, the built image's size.
`tf-cluster build` and `tf-cluster smoke --kind` both build through here."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import images
from .errors import BuildError, ToolMissing
from .imageconfig import registry_host
from .streaming import run_streaming

BUILDERS = ("docker", "podman", "buildah")


def default_ca_bundle() -> Path | None:
    """The CA bundle pip should trust during a build: $PIP_CERT or $REQUESTS_CA_BUNDLE when it is a file."""
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(var) and Path(os.environ[var]).is_file():
            return Path(os.environ[var])
    return None


def detect_builder() -> str:
    """The first of docker (with a daemon), podman and buildah that works here."""
    for name in BUILDERS:
        exe = shutil.which(name)
        if not exe:
            continue
        if name == "docker":  # a docker client without a daemon is no builder
            if subprocess.run([exe, "info"], capture_output=True).returncode != 0:
                continue
        return name
    raise ToolMissing("no image builder works here: install docker (with its daemon), podman or buildah")


def podman_flags() -> list[str]:
    """crun fails on cgroup v1/hybrid hosts: use runc with the cgroupfs manager there."""
    override = os.environ.get("TF_CLUSTER_PODMAN_FLAGS")
    if override is not None:
        return override.split()
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    return []


def build_argv(builder: str, ctx: images.Context, ca_bundle: Path | None = None) -> list[str]:
    """The builder's command that builds `ctx` with both its tags (the CA bundle as a build secret)."""
    tags = [ctx.image, ctx.pinned_image]
    if builder == "buildah":
        argv = ["buildah", "bud", "--layers"]
    elif builder == "podman":
        argv = ["podman", *podman_flags(), "build", "--layers", "--network", "host"]
    else:
        argv = ["docker", "build"]
    for t in tags:
        argv += ["-t", t]
    if ca_bundle:
        argv += ["--secret", f"id=pipca,src={ca_bundle}"]
    return argv + ["-f", str(ctx.path / "Dockerfile"), str(ctx.path)]


def stream(argv: list[str], what: str) -> None:
    """Run a long command, printing its lines with elapsed time; raise BuildError with the tail."""
    print(f"[build] {what}: {' '.join(argv)}", flush=True)

    def shows(line: str) -> bool:
        steps = ("STEP", "#", "Step", "COMMIT", "-->", "Successfully", "Writing")
        return line.startswith(steps) or "error" in line.lower()

    code, tail, seconds = run_streaming(argv, shows, lambda m: print(m, flush=True), "build")
    if code != 0:
        raise BuildError(f"{what} failed (exit {code}) after {seconds:.0f}s; last lines:\n  " + "\n  ".join(tail))


def local_name(builder: str, image: str) -> str:
    """The name the builder's store has a built image under: podman and buildah put a name without a
    registry host under localhost/ (what a kind node must then be given, and the pods asked for)."""
    return image if builder == "docker" or registry_host(image) else f"localhost/{image}"


def load_into_kind(image: str, cluster: str, run: Callable[[list[str], str], object]) -> None:
    """`image` into every node of kind cluster `cluster`: from docker's store when it has it (`kind load
    docker-image`, docker only), else saved from podman's (`kind load image-archive`). `run(argv, what)`
    runs one command or raises, naming `what`."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "image", "inspect", image], capture_output=True).returncode == 0:
        run(["kind", "load", "docker-image", image, "--name", cluster], "kind load docker-image")
        return
    with tempfile.TemporaryDirectory() as d:
        tar = str(Path(d) / "image.tar")
        run(["podman", *podman_flags(), "save", "-o", tar, image], "podman save")
        run(["kind", "load", "image-archive", tar, "--name", cluster], "kind load image-archive")


def image_size(builder: str, image: str) -> str:
    """The built image's size as `1.23 GB`, or `?` when the builder does not say."""
    exe = "podman" if builder == "buildah" else builder
    fmt = "{{.Size}}"
    proc = subprocess.run(
        [exe, *(podman_flags() if exe == "podman" else []), "image", "inspect", "--format", fmt, image],
        capture_output=True,
        text=True,
    )
    return f"{int(proc.stdout.strip()) / 1e9:.2f} GB" if proc.stdout.strip().isdigit() else "?"
