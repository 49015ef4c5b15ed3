"""`tf-cluster render`: helm template, optionally as a table of every pod's TF_CONFIG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import helm, manifests


def add_parser(sub) -> None:
    p = sub.add_parser(
        "render", help="render the chart (helm template)", description="Render the chart with the real helm binary."
    )
    add_render_args(p)
    p.add_argument(
        "--tf-config", action="store_true", help="print one row per pod with its TF_CONFIG (index substituted)"
    )
    p.set_defaults(func=run)


def add_values_args(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Helm's own values flags, as every command that renders or installs takes them."""
    p.add_argument(
        "-f",
        "--values",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        required=required,
        help="values file (repeatable)",
    )
    p.add_argument(
        "--set", action="append", default=[], dest="set_values", metavar="K=V", help="helm --set (repeatable)"
    )
    p.add_argument(
        "--set-string",
        action="append",
        default=[],
        dest="set_strings",
        metavar="K=V",
        help="helm --set-string (repeatable)",
    )
    p.add_argument(
        "--set-file",
        action="append",
        default=[],
        dest="set_files",
        metavar="K=PATH",
        help="helm --set-file: a value read from a file, e.g. code.files.train\\.py=train.py (repeatable)",
    )
    p.add_argument("--helm", choices=helm.MAJORS, default="4", help="Helm major version (default 4)")


def values_from(args) -> helm.Values:
    return helm.Values.of(args.values, args.set_values, args.set_strings, args.set_files)


def add_render_args(p: argparse.ArgumentParser) -> None:
    add_values_args(p)
    p.add_argument("--release", default="tf", help="release name (default: tf)")
    p.add_argument("-n", "--namespace", default="default")


def render_docs(args) -> tuple[str, list[dict]]:
    text = helm.Helm(args.helm, namespace=args.namespace).template(args.release, values_from(args))
    return text, helm.parse(text)


def run(args) -> int:
    text, docs = render_docs(args)
    if args.tf_config:
        print(manifests.tf_config_table(manifests.pods(docs, namespace=args.namespace)))
    else:
        sys.stdout.write(text)
    return 0
