"""`tf-cluster render`: helm template, optionally as a table of every pod's TF_CONFIG."""

from __future__ import annotations

import argparse
import sys

from .. import manifests
from ..values import add_render_args, render_docs
from . import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "render", help="render the chart (helm template)", description="Render the chart with the real helm binary."
    )
    add_render_args(p)
    p.add_argument(
        "--tf-config", action="store_true", help="print one row per pod with its TF_CONFIG (index substituted)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text, docs = render_docs(args)
    if args.tf_config:
        print(manifests.tf_config_table(manifests.pods(docs, namespace=args.namespace)))
    else:
        sys.stdout.write(text)
    return 0
