"""`tf-cluster build`: render images/Dockerfile.j2 and build it with docker, podman or buildah."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .. import images
from ..errors import BuildError, ToolMissing, UsageError
from ..streaming import run_streaming

BUILDERS = ("docker", "podman", "buildah")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "build",
        help="build the training image (images/)",
        description="Build the trainer image. Tags: <repo>:<tf>-<variant> and <repo>:<tf>-<variant>-<content hash>.",
    )
    p.add_argument("--variant", choices=sorted(images.VARIANTS), default="cpu")
    p.add_argument(
        "--base",
        default=images.DEFAULT_BASE,
        help=f"base image with Python 3.11 (default {images.DEFAULT_BASE}; "
        "without a registry: images/base/make-base.sh)",
    )
    p.add_argument("--repository", default=images.DEFAULT_REPOSITORY, help="image repository")
    p.add_argument("--builder", choices=BUILDERS, help="default: the first of docker, podman, buildah that works")
    p.add_argument(
        "--extra-package",
        action="append",
        default=[],
        metavar="PKG",
        help="extra pip package for the image (repeatable)",
    )
    p.add_argument(
        "--ca-bundle",
        type=Path,
        default=default_ca_bundle(),
        help="CA bundle pip trusts during the build (a TLS-intercepting proxy); passed as a "
        "build secret, not stored in the image (default: $PIP_CERT or $REQUESTS_CA_BUNDLE)",
    )
    p.add_argument(
        "--requirements",
        type=Path,
        metavar="FILE",
        help="pip requirements your program needs, installed in a layer of their own (tag gets -r<hash>)",
    )
    p.add_argument(
        "--notebook",
        action="store_true",
        help="add JupyterLab and the example notebooks (images/notebooks/): the chart's notebook image "
        "(tag <tf>-<variant>-notebook)",
    )
    p.add_argument("--push", action="store_true", help="push both tags after building")
    p.add_argument("--kind-load", metavar="CLUSTER", help="load the image into this kind cluster")
    p.add_argument("--dry-run", action="store_true", help="assemble the context and print the Dockerfile only")
    p.set_defaults(func=run)


def default_ca_bundle() -> Path | None:
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(var) and Path(os.environ[var]).is_file():
            return Path(os.environ[var])
    return None


def detect_builder() -> str:
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


def image_size(builder: str, image: str) -> str:
    exe = "podman" if builder == "buildah" else builder
    fmt = "{{.Size}}"
    proc = subprocess.run(
        [exe, *(podman_flags() if exe == "podman" else []), "image", "inspect", "--format", fmt, image],
        capture_output=True,
        text=True,
    )
    return f"{int(proc.stdout.strip()) / 1e9:.2f} GB" if proc.stdout.strip().isdigit() else "?"


def run(args) -> int:
    if args.requirements and not args.requirements.is_file():
        raise UsageError(f"--requirements {args.requirements}: no such file")
    ctx = images.assemble(
        args.variant,
        base=args.base,
        repository=args.repository,
        extra_packages=args.extra_package,
        ca_secret=bool(args.ca_bundle),
        extra_requirements=args.requirements,
        notebook=args.notebook,
    )
    print(f"[build] context {ctx.path} (content {ctx.digest[:12]})", flush=True)
    if args.dry_run:
        sys.stdout.write((ctx.path / "Dockerfile").read_text())
        return 0
    builder = args.builder or detect_builder()
    start = time.monotonic()
    stream(build_argv(builder, ctx, args.ca_bundle), f"{builder} build")
    print(
        f"[build] built {ctx.image} and {ctx.pinned_image} in {time.monotonic() - start:.1f}s "
        f"({image_size(builder, ctx.image)})",
        flush=True,
    )
    if args.push:
        for tag in (ctx.image, ctx.pinned_image):
            stream([builder, "push", tag], f"push {tag}")
    if args.kind_load:
        if not shutil.which("kind"):
            raise ToolMissing("kind not found: install kind to use --kind-load")
        stream(["kind", "load", "docker-image", ctx.image, "--name", args.kind_load], "kind load")
    print(f"[build] use it: --set image.repository={args.repository} --set image.tag={ctx.tag}", flush=True)
    return 0
