"""`tf-cluster validate`: render, then check every manifest against Kubernetes schemas."""

from __future__ import annotations

import argparse

from .. import schemas
from ..errors import ValidationError
from ..values import add_render_args, render_docs
from . import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("validate", help="render and validate against Kubernetes schemas (offline)")
    add_render_args(p)
    p.add_argument(
        "--kube-version",
        action="append",
        dest="kube_versions",
        metavar="X.Y",
        help=f"Kubernetes version(s) to validate for (default: {', '.join(schemas.DEFAULT_VERSIONS)})",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    _, docs = render_docs(args)
    versions = args.kube_versions or schemas.DEFAULT_VERSIONS
    problems = schemas.validate_docs(docs, versions)
    if problems:
        raise ValidationError("\n".join(str(p) for p in problems))
    print(f"ok: {len(docs)} manifests valid for Kubernetes {', '.join(versions)}")
    return 0
