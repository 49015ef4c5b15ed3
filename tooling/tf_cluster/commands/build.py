"""`tf-cluster build`: render images/Dockerfile.j2 and build it with docker, podman or buildah."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from .. import IMAGES, images
from ..errors import ToolMissing, UsageError
from ..imagebuild import (
    BUILDERS,
    build_argv,
    default_ca_bundle,
    detect_builder,
    image_size,
    load_into_kind,
    local_name,
    stream,
)
from . import Subparsers


def add_parser(sub: Subparsers) -> None:
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
        f"without a registry: bash {IMAGES / 'base' / 'make-base.sh'})",
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
        help="add JupyterLab and the example notebooks (the chart's files/notebooks/): the chart's notebook image "
        "(tag <tf>-<variant>-notebook)",
    )
    p.add_argument("--push", action="store_true", help="push both tags after building")
    p.add_argument("--kind-load", metavar="CLUSTER", help="load the image into this kind cluster")
    p.add_argument("--dry-run", action="store_true", help="assemble the context and print the Dockerfile only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
    repository = args.repository
    if args.kind_load:
        if not shutil.which("kind"):
            raise ToolMissing("kind not found: install kind to use --kind-load")
        repository = local_name(builder, args.repository)  # as the kind nodes will have it (podman: localhost/...)
        load_into_kind(local_name(builder, ctx.image), args.kind_load, stream)
    print(f"[build] use it: --set image.repository={repository} --set image.tag={ctx.tag}", flush=True)
    return 0
