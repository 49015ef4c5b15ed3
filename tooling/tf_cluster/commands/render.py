"""`tf-cluster render`: helm template, optionally as a table of every pod's TF_CONFIG."""
from __future__ import annotations

import argparse
import sys

from .. import helm, manifests


def add_parser(sub) -> None:
    p = sub.add_parser("render", help="render the chart (helm template)",
                       description="Render the chart with the real helm binary.")
    add_render_args(p)
    p.add_argument("--tf-config", action="store_true",
                   help="print one row per pod with its TF_CONFIG (index substituted)")
    p.set_defaults(func=run)


def add_render_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--values", action="append", default=[], metavar="FILE",
                   help="values file (repeatable)")
    p.add_argument("--set", action="append", default=[], dest="set_values", metavar="K=V",
                   help="helm --set (repeatable)")
    p.add_argument("--set-string", action="append", default=[], dest="set_strings", metavar="K=V",
                   help="helm --set-string (repeatable)")
    p.add_argument("--release", default="tf", help="release name (default: tf)")
    p.add_argument("-n", "--namespace", default="default")
    p.add_argument("--helm", choices=("3", "4"), default="4", help="Helm major version (default 4)")


def render_docs(args) -> tuple[str, list[dict]]:
    extra = [a for s in args.set_strings for a in ("--set-string", s)]
    text = helm.template(args.values, set_values=args.set_values, release=args.release,
                         namespace=args.namespace, helm=args.helm, extra_args=extra)
    return text, helm.parse(text)


def run(args) -> int:
    text, docs = render_docs(args)
    if args.tf_config:
        print(manifests.tf_config_table(manifests.pods(docs, namespace=args.namespace)))
    else:
        sys.stdout.write(text)
    return 0
